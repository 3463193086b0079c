#include "pipeline/executor/tiny_mlp.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/stage_layout.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

MlpConfig SmallConfig() {
  MlpConfig config;
  config.widths = {3, 5, 4, 2};
  config.rows = 2;
  config.num_microbatches = 3;
  config.seed = 7;
  return config;
}

// The reference's gradient against central differences of its own loss, for every
// parameter: the backward math the executor tests rely on is right. Float
// differences with step 1e-2 agree to about 1e-4 here; the bound leaves room.
TEST(TinyMlpTest, ReferenceGradientMatchesFiniteDifferences) {
  const MlpConfig config = SmallConfig();
  const MlpParameters params = MakeMlpParameters(config);
  const MlpData data = MakeMlpData(config);
  const MlpGradients reference = MlpReference(config, params, data);
  const float step = 1e-2f;
  int checked = 0;
  for (int64_t l = 0; l < config.num_layers(); ++l) {
    for (const bool bias : {false, true}) {
      const size_t count = bias ? params.biases[l].size() : params.weights[l].size();
      for (size_t e = 0; e < count; ++e) {
        MlpParameters plus = params, minus = params;
        (bias ? plus.biases : plus.weights)[l][e] += step;
        (bias ? minus.biases : minus.weights)[l][e] -= step;
        const double numeric = (static_cast<double>(MlpReference(config, plus, data).loss) -
                                static_cast<double>(MlpReference(config, minus, data).loss)) /
                               static_cast<double>(2 * step);
        const double analytic =
            static_cast<double>((bias ? reference.grads.biases : reference.grads.weights)[l][e]);
        EXPECT_NEAR(analytic, numeric, 1e-3 + 2e-2 * std::abs(numeric))
            << "layer " << l << (bias ? " bias " : " weight ") << e;
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 3 * 5 + 5 + 5 * 4 + 4 + 4 * 2 + 2);
}

TEST(TinyMlpTest, ParametersAndDataAreSeededAndDistinct) {
  const MlpConfig config = SmallConfig();
  EXPECT_EQ(MakeMlpParameters(config), MakeMlpParameters(config));
  MlpConfig other = config;
  other.seed = 8;
  EXPECT_NE(MakeMlpParameters(config).weights, MakeMlpParameters(other).weights);
  const MlpData data = MakeMlpData(config);
  EXPECT_NE(data.inputs[0], data.inputs[1]);
  EXPECT_NE(data.targets[0], data.targets[2]);
}

// One rank holding every layer, driven by hand in the executor's call order, is
// the reference bit for bit; B and I-then-W agree too.
TEST(TinyMlpTest, OneStageModuleEqualsTheReference) {
  const MlpConfig config = SmallConfig();
  const MlpParameters params = MakeMlpParameters(config);
  const MlpData data = MakeMlpData(config);
  const MlpGradients reference = MlpReference(config, params, data);
  LOOM_ASSERT_OK_AND_ASSIGN(StageLayout layout, StageLayout::Loop(1)->WithLayers(3, {3}));
  for (const bool split : {false, true}) {
    LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<MlpStageModule> module,
                              MlpStageModule::Create(config, layout, 0, params, data));
    EXPECT_THAT(module->InputShape(0, 0), ElementsAre(2, 3));
    EXPECT_THAT(module->OutputShape(0, 0), ElementsAre(2, 2));
    for (int64_t mb = 0; mb < config.num_microbatches; ++mb) {
      LOOM_ASSERT_OK_AND_ASSIGN(Tensor x, module->Input(mb));
      LOOM_ASSERT_OK_AND_ASSIGN(Tensor y, module->Forward(0, mb, x));
      LOOM_ASSERT_OK_AND_ASSIGN(Tensor dy, module->Loss(mb, y));
      if (split) {
        LOOM_ASSERT_OK(module->BackwardInput(0, mb, dy).status());
        LOOM_ASSERT_OK(module->BackwardWeight(0, mb));
      } else {
        LOOM_ASSERT_OK(module->Backward(0, mb, dy).status());
      }
    }
    const MlpGradients got = GatherGradients(config, {module.get()});
    EXPECT_EQ(got.grads, reference.grads);
    EXPECT_EQ(got.microbatch_losses, reference.microbatch_losses);
    EXPECT_EQ(got.loss, reference.loss);
    EXPECT_EQ(module->SavedActivations(), 0);
  }
}

TEST(TinyMlpTest, EmptyStagePassesItsInputThrough) {
  const MlpConfig config = SmallConfig();
  const MlpParameters params = MakeMlpParameters(config);
  const MlpData data = MakeMlpData(config);
  LOOM_ASSERT_OK_AND_ASSIGN(StageLayout layout, StageLayout::Loop(2)->WithLayers(3, {0, 3}));
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<MlpStageModule> module,
                            MlpStageModule::Create(config, layout, 0, params, data));
  EXPECT_TRUE(module->layers().empty());
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor x, module->Input(1));
  LOOM_ASSERT_OK_AND_ASSIGN(Tensor y, module->Forward(0, 1, x));
  EXPECT_TRUE(y.Equals(x));
}

TEST(TinyMlpTest, Errors) {
  const MlpConfig config = SmallConfig();
  const MlpParameters params = MakeMlpParameters(config);
  const MlpData data = MakeMlpData(config);
  LOOM_ASSERT_OK_AND_ASSIGN(StageLayout layout, StageLayout::Loop(2)->WithLayers(3, {1, 2}));
  EXPECT_THAT(MlpStageModule::Create(config, *StageLayout::Loop(2), 0, params, data),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must assign the MLP's 3")));
  EXPECT_THAT(MlpStageModule::Create(config, layout, 2, params, data),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 2 is outside")));
  LOOM_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<MlpStageModule> module,
      MlpStageModule::Create(config, layout, 1, params, data, /*split_backward=*/false));
  EXPECT_FALSE(module->SupportsSplitBackward());
  EXPECT_THAT(module->Forward(0, 0, *Tensor::Create({2, 3})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has no stage 0")));
  EXPECT_THAT(module->Forward(1, 0, *Tensor::Create({2, 4})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("takes f32 [2,5], got f32 [2,4]")));
  EXPECT_THAT(module->Forward(1, 0, *Tensor::Create({2, 5}, DType::kI64)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("takes f32 [2,5], got i64 [2,5]")));
  EXPECT_THAT(module->BackwardInput(1, 0, *Tensor::Create({2, 2})),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("no BackwardInput")));
  EXPECT_THAT(module->Backward(1, 0, *Tensor::Create({2, 2})),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no forward state")));
}

}  // namespace
}  // namespace loom
