// DeviceGptModel against the CPU GptModel (tp 1): the same parameter values copied
// in, the same batch, then the loss and every parameter's gradient compared, over a
// seeded sweep of shapes (uneven heads and MLP widths, rows above the column-sum
// chunk, widths above a row kernel's block, several layers), in f32 and in bf16; the
// AdamW step bit for bit against the CPU step on the device's own gradients.
#include "models/gpt/gpu/device_gpt_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/gpu/cuda_status.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/gpt/batch.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/gpt_model.h"
#include "models/gpt/gpt_parameter.h"
#include "models/gpt/internal/train_testing.h"
#include "offload/adamw/cpu_adamw.h"
#include "tensor_parallel/layers/gemm.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using train_testing::ExpectAllOk;
using train_testing::RunTp;
using train_testing::SeededIds;

constexpr uint64_t kSeed = 20261126;

bool HasDevice() {
  absl::StatusOr<int> count = CudaDeviceCountOrZero();
  return count.ok() && *count > 0;
}

struct Case {
  GptConfig config;
  int64_t micro_batch;
};

// The sweep: each case names what it crosses.
std::vector<Case> Sweep() {
  std::vector<Case> cases;
  const auto add = [&](int64_t v, int64_t s, int64_t h, int64_t heads, int64_t layers, int64_t ffn,
                       int64_t b) {
    GptConfig c;
    c.vocab = v;
    c.seq_len = s;
    c.hidden = h;
    c.heads = heads;
    c.layers = layers;
    c.ffn = ffn;
    c.seed = kSeed + cases.size();
    cases.push_back({c, b});
  };
  add(64, 32, 64, 4, 2, 0, 2);     // the job's default model
  add(50, 17, 48, 3, 1, 0, 3);     // odd sequence, three heads
  add(37, 33, 96, 6, 3, 200, 1);   // uneven MLP width, three layers, one sequence
  add(300, 300, 128, 2, 1, 0, 2);  // vocab and sequence above a row block (256 threads)
  add(128, 64, 320, 5, 2, 0, 3);   // hidden 320, 192 rows: above the 128-row chunk
  add(96, 80, 256, 2, 1, 0, 2);    // head_dim 128 (flash's other tile), 80 = a tile and a part
  return cases;
}

// The randomized weights' range: 0.2 at width 64, shrinking as 1 / sqrt(hidden)
// above it, so pre-activations stay O(1) at every width as a trained model's do
// (at 0.2 and hidden 320 the attention scores reach std 4 and the softmax saturates,
// where bf16 operands are not a fair test of anything).
float ScaleOf(const GptConfig& c) {
  return 0.2f * std::min(1.0f, std::sqrt(64.0f / static_cast<float>(c.hidden)));
}

struct Reference {
  float loss = 0;
  std::vector<std::string> names;
  std::vector<std::vector<float>> values, grads;
};

// The CPU model's values (randomized, seeded), loss and gradients of one batch, with
// the loss weighted by `loss_grad` over `batches` microbatches.
absl::StatusOr<Reference> CpuReference(const Case& c, bool bf16,
                                       const std::vector<GptBatch>& batches, float loss_grad) {
  Reference ref;
  absl::Status status;
  ExpectAllOk(RunTp(1, [&](Communicator& tp) -> absl::Status {
    GptModelOptions options;
    options.precision = bf16 ? GemmPrecision::kBf16 : GemmPrecision::kF32;
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model,
                          GptModel::Create(c.config, tp, options));
    std::vector<GptParameter> params = model->Parameters();
    LOOM_RETURN_IF_ERROR(train_testing::RandomizeParameters(absl::MakeSpan(params),
                                                            c.config.seed, ScaleOf(c.config), 1,
                                                            0));
    model->ZeroGrad();
    for (const GptBatch& batch : batches) {
      LOOM_ASSIGN_OR_RETURN(const float loss, model->Forward(batch.tokens, batch.targets));
      ref.loss += loss_grad * loss;
      LOOM_RETURN_IF_ERROR(model->Backward(loss_grad));
    }
    for (const GptParameter& p : model->Parameters()) {
      ref.names.push_back(p.name);
      ref.values.emplace_back(p.values.begin(), p.values.end());
      ref.grads.emplace_back(p.grad.begin(), p.grad.end());
    }
    return absl::OkStatus();
  }));
  return ref;
}

GptBatch SeededBatch(const Case& c, uint64_t seed) {
  GptBatch batch;
  batch.batch = c.micro_batch;
  batch.seq_len = c.config.seq_len;
  batch.tokens = SeededIds(c.micro_batch * c.config.seq_len, c.config.vocab, seed);
  batch.targets = SeededIds(c.micro_batch * c.config.seq_len, c.config.vocab, seed + 1);
  return batch;
}

absl::StatusOr<std::unique_ptr<DeviceGptModel>> DeviceWith(
    const Case& c, bool bf16, const Reference& ref,
    DeviceAttention attention = DeviceAttention::kAuto) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<DeviceGptModel> model,
                        DeviceGptModel::Create(c.config, {.micro_batch = c.micro_batch,
                                                          .bf16 = bf16,
                                                          .attention = attention}));
  if (model->parameters().size() != ref.names.size()) {
    return absl::InternalError(absl::StrCat(model->parameters().size(), " device parameters, ",
                                            ref.names.size(), " on the CPU"));
  }
  for (size_t p = 0; p < ref.names.size(); ++p) {
    if (model->parameters()[p].name != ref.names[p]) {
      return absl::InternalError(absl::StrCat("parameter ", p, " is ", model->parameters()[p].name,
                                              " on the device, ", ref.names[p], " on the CPU"));
    }
    LOOM_RETURN_IF_ERROR(model->SetParameter(static_cast<int>(p), 0, ref.values[p], {}, {}));
  }
  return model;
}

// Compares the device model's loss and gradients with the reference: loss within
// loss_rel of it, each gradient within grad_rel of its largest element.
void ExpectMatches(DeviceGptModel& model, const Reference& ref, double loss, double loss_rel,
                   double grad_rel, const std::string& what) {
  EXPECT_NEAR(loss, ref.loss, loss_rel * std::max(1.0, std::fabs(static_cast<double>(ref.loss)))) << what;
  for (size_t p = 0; p < ref.names.size(); ++p) {
    std::vector<float> grad(ref.grads[p].size());
    LOOM_ASSERT_OK(model.GetGradient(static_cast<int>(p), absl::MakeSpan(grad)));
    train_testing::ExpectClose(grad, ref.grads[p], absl::StrCat(what, " ", ref.names[p]), grad_rel,
                               1e-9);
  }
}

class DeviceGptModelTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!HasDevice()) GTEST_SKIP() << "no CUDA device";
    std::printf("seed %llu\n", static_cast<unsigned long long>(kSeed));
  }
  bool bf16() const { return GetParam(); }
  // f32: products without TF32, sums reordered; bf16: operands rounded on both
  // sides, the attention's products and probabilities too (the CPU keeps them f32).
  double loss_rel() const { return bf16() ? 2e-2 : 2e-5; }
  double grad_rel() const { return bf16() ? 6e-2 : 2e-4; }
};

TEST_P(DeviceGptModelTest, LossAndGradientsMatchTheCpuModelOnASweep) {
  for (const Case& c : Sweep()) {
    const std::string what = absl::StrCat(c.config.ToString(), " b=", c.micro_batch,
                                          bf16() ? " bf16" : " f32");
    SCOPED_TRACE(what);
    const std::vector<GptBatch> batches = {SeededBatch(c, c.config.seed + 7)};
    LOOM_ASSERT_OK_AND_ASSIGN(const Reference ref, CpuReference(c, bf16(), batches, 1.0f));
    LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceGptModel> model, DeviceWith(c, bf16(), ref));
    LOOM_ASSERT_OK(model->ZeroGrad());
    LOOM_ASSERT_OK(model->ForwardBackward(batches[0], 1.0f));
    LOOM_ASSERT_OK_AND_ASSIGN(const double loss, model->TakeLoss());
    std::printf("%s%s: loss device %.7f cpu %.7f\n", what.c_str(), model->flash() ? " flash" : "",
                loss, static_cast<double>(ref.loss));
    ExpectMatches(*model, ref, loss, loss_rel(), grad_rel(), what);
    // A forward alone gives the same loss and leaves the gradients alone.
    LOOM_ASSERT_OK_AND_ASSIGN(const double eval, model->ForwardLoss(batches[0]));
    EXPECT_NEAR(eval, loss, 1e-6 * std::max(1.0, loss)) << what;
    ExpectMatches(*model, ref, loss, loss_rel(), grad_rel(), what + " after ForwardLoss");
  }
}

// Flash attention against the materialized one on the same device, bf16 both, at
// both head sizes and sequences that end inside a tile: the loss and every gradient
// within the bf16 bound of each other, and of the CPU.
TEST(DeviceGptFlashTest, FlashMatchesMaterializedAttention) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device";
  for (const int64_t heads : {4, 2}) {  // head_dim 64, 128
    GptConfig config;
    config.vocab = 64;
    config.seq_len = 200;
    config.hidden = 256;
    config.heads = heads;
    config.layers = 2;
    config.seed = kSeed + heads;
    const Case c{config, 2};
    const std::string what = absl::StrCat(config.ToString(), " flash vs materialized");
    SCOPED_TRACE(what);
    const std::vector<GptBatch> batches = {SeededBatch(c, 21)};
    LOOM_ASSERT_OK_AND_ASSIGN(const Reference ref, CpuReference(c, true, batches, 1.0f));
    LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceGptModel> flash,
                              DeviceWith(c, true, ref, DeviceAttention::kFlash));
    LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceGptModel> plain,
                              DeviceWith(c, true, ref, DeviceAttention::kMaterialized));
    ASSERT_TRUE(flash->flash());
    ASSERT_FALSE(plain->flash());
    Reference plain_ref = ref;
    LOOM_ASSERT_OK(plain->ZeroGrad());
    LOOM_ASSERT_OK(plain->ForwardBackward(batches[0], 1.0f));
    LOOM_ASSERT_OK_AND_ASSIGN(const double plain_loss, plain->TakeLoss());
    plain_ref.loss = static_cast<float>(plain_loss);
    for (size_t p = 0; p < ref.names.size(); ++p) {
      LOOM_ASSERT_OK(plain->GetGradient(static_cast<int>(p), absl::MakeSpan(plain_ref.grads[p])));
    }
    LOOM_ASSERT_OK(flash->ZeroGrad());
    LOOM_ASSERT_OK(flash->ForwardBackward(batches[0], 1.0f));
    LOOM_ASSERT_OK_AND_ASSIGN(const double loss, flash->TakeLoss());
    std::printf("%s: loss flash %.7f materialized %.7f cpu %.7f\n", what.c_str(), loss, plain_loss,
                static_cast<double>(ref.loss));
    ExpectMatches(*flash, plain_ref, loss, 1e-2, 3e-2, what);
    ExpectMatches(*flash, ref, loss, 2e-2, 6e-2, what + " (cpu)");
  }
}

TEST_P(DeviceGptModelTest, MicrobatchesAccumulateWeighted) {
  const Case c = Sweep()[1];
  const std::vector<GptBatch> batches = {SeededBatch(c, 11), SeededBatch(c, 12),
                                         SeededBatch(c, 13)};
  LOOM_ASSERT_OK_AND_ASSIGN(const Reference ref, CpuReference(c, bf16(), batches, 1.0f / 3));
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceGptModel> model, DeviceWith(c, bf16(), ref));
  // Gradients left from an earlier step are cleared by ZeroGrad.
  LOOM_ASSERT_OK(model->ForwardBackward(batches[2], 1.0f));
  LOOM_ASSERT_OK(model->ZeroGrad());
  for (const GptBatch& batch : batches) LOOM_ASSERT_OK(model->ForwardBackward(batch, 1.0f / 3));
  LOOM_ASSERT_OK_AND_ASSIGN(const double loss, model->TakeLoss());
  ExpectMatches(*model, ref, loss, loss_rel(), grad_rel(), "three microbatches");
}

TEST_P(DeviceGptModelTest, AdamWStepIsTheCpuStepOnTheDeviceGradients) {
  const Case c = Sweep()[0];
  const std::vector<GptBatch> batches = {SeededBatch(c, 5)};
  LOOM_ASSERT_OK_AND_ASSIGN(const Reference ref, CpuReference(c, bf16(), batches, 1.0f));
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceGptModel> model, DeviceWith(c, bf16(), ref));
  LOOM_ASSERT_OK(model->ZeroGrad());
  LOOM_ASSERT_OK(model->ForwardBackward(batches[0], 1.0f));
  LOOM_ASSERT_OK_AND_ASSIGN(const double squares, model->GradSquaredNorm());
  double expected_squares = 0;
  std::vector<std::vector<float>> grads;
  for (size_t p = 0; p < ref.names.size(); ++p) {
    grads.emplace_back(ref.grads[p].size());
    LOOM_ASSERT_OK(model->GetGradient(static_cast<int>(p), absl::MakeSpan(grads.back())));
    for (float g : grads.back()) expected_squares += static_cast<double>(g) * static_cast<double>(g);
  }
  EXPECT_NEAR(squares, expected_squares, 1e-9 * expected_squares);
  AdamWHyper hyper;
  hyper.lr = 3e-3f;
  hyper.weight_decay = 0.1f;
  hyper.grad_scale = 0.5f;
  LOOM_ASSERT_OK(model->Step(hyper));
  for (size_t p = 0; p < ref.names.size(); ++p) {
    std::vector<float> expected = ref.values[p];
    LOOM_ASSERT_OK_AND_ASSIGN(AdamWState state, AdamWState::Create(static_cast<int64_t>(expected.size())));
    LOOM_ASSERT_OK(AdamWStep(hyper, absl::MakeSpan(expected), grads[p], state));
    std::vector<float> values(expected.size()), m(expected.size()), v(expected.size());
    LOOM_ASSERT_OK(model->GetParameter(static_cast<int>(p), absl::MakeSpan(values), absl::MakeSpan(m),
                                  absl::MakeSpan(v)));
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(values[i], expected[i]) << ref.names[p] << "[" << i << "]";
    }
  }
}

TEST_P(DeviceGptModelTest, StateRoundTripsThroughTheHost) {
  const Case c = Sweep()[1];
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceGptModel> model,
                       DeviceGptModel::Create(c.config, {.micro_batch = c.micro_batch, .bf16 = bf16()}));
  for (size_t p = 0; p < model->parameters().size(); ++p) {
    const int64_t n = model->parameters()[p].numel;
    std::vector<float> values(n), m(n), v(n);
    for (int64_t i = 0; i < n; ++i) {
      values[i] = 0.001f * static_cast<float>((i * 7 + p) % 97) - 0.05f;
      m[i] = 1e-4f * static_cast<float>(i % 13);
      v[i] = 1e-6f * static_cast<float>(i % 11 + 1);
    }
    // In two pieces, as checkpoint slices arrive.
    const int64_t half = n / 2;
    LOOM_ASSERT_OK(model->SetParameter(static_cast<int>(p), 0, absl::MakeSpan(values).subspan(0, half),
                                  absl::MakeSpan(m).subspan(0, half),
                                  absl::MakeSpan(v).subspan(0, half)));
    LOOM_ASSERT_OK(model->SetParameter(static_cast<int>(p), half, absl::MakeSpan(values).subspan(half),
                                  absl::MakeSpan(m).subspan(half), absl::MakeSpan(v).subspan(half)));
    std::vector<float> back(n, -1), mb(n, -1), vb(n, -1);
    LOOM_ASSERT_OK(model->GetParameter(static_cast<int>(p), absl::MakeSpan(back), absl::MakeSpan(mb),
                                  absl::MakeSpan(vb)));
    EXPECT_EQ(back, values);
    EXPECT_EQ(mb, m);
    EXPECT_EQ(vb, v);
  }
}

TEST_P(DeviceGptModelTest, BadInputIsNamed) {
  const Case c = Sweep()[0];
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceGptModel> model,
                       DeviceGptModel::Create(c.config, {.micro_batch = c.micro_batch, .bf16 = bf16()}));
  GptBatch batch = SeededBatch(c, 3);
  batch.tokens[5] = c.config.vocab;
  EXPECT_THAT(model->ForwardBackward(batch, 1.0f),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("token 64 at 5")));
  Case other = c;
  other.micro_batch = 3;
  EXPECT_THAT(model->ForwardBackward(SeededBatch(other, 3), 1.0f),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("made for 2 of 32")));
  std::vector<float> too_many(model->parameters()[0].numel + 1);
  EXPECT_THAT(model->SetParameter(0, 0, too_many, {}, {}),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("embed.token")));
  EXPECT_THAT(model->SetParameter(999, 0, too_many, {}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("parameter 999")));
  const std::vector<float> four(4, 0.5f);
  EXPECT_THAT(model->SetParameter(0, 0, four, four, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("moments of 4 and 0")));
  GptConfig huge = c.config;
  huge.hidden = 16384;
  huge.heads = 128;
  huge.layers = 96;
  huge.seq_len = 4096;
  EXPECT_THAT(DeviceGptModel::Create(huge, {.micro_batch = 8, .bf16 = bf16()}),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("are free")));
  EXPECT_THAT(DeviceGptModel::Create(c.config, {.micro_batch = 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("micro_batch 0")));
  // head_dim 16: no flash tile for it, nor for f32.
  EXPECT_THAT(DeviceGptModel::Create(c.config, {.micro_batch = 2, .bf16 = true,
                                                .attention = DeviceAttention::kFlash}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("head_dim 16")));
}

INSTANTIATE_TEST_SUITE_P(Precisions, DeviceGptModelTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? "Bf16" : "F32";
                         });

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// Two models built from the same values give bitwise the same loss (the kernels
// reduce in a fixed order; a forward has no atomics), and it is the CPU model's
// within the dtype's bound, across widths and both attentions. (A bf16 copy of the
// weights made before their upload had landed failed exactly this.)
TEST(DeviceGptRepeatTest, TwoModelsAgreeBitwiseAndWithTheCpu) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device";
  struct V {
    int64_t h, heads, layers;
  };
  for (const V v : {V{192, 2, 1}, V{256, 2, 1}, V{256, 4, 2}, V{384, 6, 1}}) {
    GptConfig c;
    c.vocab = 96;
    c.seq_len = 80;
    c.hidden = v.h;
    c.heads = v.heads;
    c.layers = v.layers;
    c.seed = kSeed + 31;
    const Case k{c, 2};
    const std::vector<GptBatch> batches = {SeededBatch(k, 41)};
    for (const bool bf16 : {false, true}) {
      LOOM_ASSERT_OK_AND_ASSIGN(const Reference cpu, CpuReference(k, bf16, batches, 1.0f));
      for (const DeviceAttention a : {DeviceAttention::kMaterialized, DeviceAttention::kAuto}) {
        LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceGptModel> one, DeviceWith(k, bf16, cpu, a));
        LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceGptModel> two, DeviceWith(k, bf16, cpu, a));
        LOOM_ASSERT_OK_AND_ASSIGN(const double l1, one->ForwardLoss(batches[0]));
        LOOM_ASSERT_OK_AND_ASSIGN(const double l2, two->ForwardLoss(batches[0]));
        const std::string what = absl::StrCat(c.ToString(), bf16 ? " bf16 " : " f32 ",
                                              one->flash() ? "flash" : "materialized");
        std::printf("%s: device %.7f (twice %.7f) cpu %.7f\n", what.c_str(), l1, l2,
                    static_cast<double>(cpu.loss));
        EXPECT_EQ(l1, l2) << what;
        const double want = static_cast<double>(cpu.loss);
        EXPECT_NEAR(l1, want, (bf16 ? 2e-3 : 2e-6) * want) << what;
      }
    }
  }
}

}  // namespace
}  // namespace loom
