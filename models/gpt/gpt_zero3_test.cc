// The GPT model as a library user embeds it with zero3: each data-parallel rank's
// GptModel borrows its weights from a Zero3Engine whose partition is built from the
// model's own units (GptModel::Units), at a width above every size threshold
// (hidden 320: the final norm's 320 elements once made a unit apart from the head,
// and every ZeRO run failed in its first backward). At stages 1, 2 and 3, with every
// unit sharded and with the small units kept whole, two ranks run forward and
// backward on different batches and the engine's reduced gradient is the gradient of
// the mean over both batches on one rank (its squared norm within 1e-5). A partition
// that splits the head's unit apart (the old name-based units) is refused at stage 3
// at the model's first lease of that unit, naming it: the check this test exists for
// (before leases it failed later, with the engine's "already released" error).
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "collectives/communicator.h"
#include "collectives/inproc_ranks_testing.h"
#include "core/parameter_source.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/gpt_model.h"
#include "models/gpt/internal/train_testing.h"
#include "zero3/partition.h"
#include "zero3/zero3_engine.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using train_testing::RunTp;

GptConfig WideConfig() {
  GptConfig config;
  config.vocab = 64;
  config.seq_len = 8;
  config.hidden = 320;
  config.heads = 4;
  config.layers = 2;
  return config;
}

struct Batch {
  std::vector<int64_t> tokens, targets;
};

// Two sequences of distinct seeded tokens per rank.
Batch BatchOf(int rank, const GptConfig& config) {
  std::mt19937_64 rng(1000 + static_cast<uint64_t>(rank));
  Batch b;
  for (int64_t i = 0; i < 2 * config.seq_len; ++i) {
    b.tokens.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(config.vocab)));
    b.targets.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(config.vocab)));
  }
  return b;
}

// The squared norm of the mean gradient over both ranks' batches, on one rank.
double ReferenceSquaredNorm(const GptConfig& config) {
  double sq = 0;
  const std::vector<absl::Status> status = RunTp(1, [&](Communicator& tp) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model, GptModel::Create(config, tp));
    for (int r = 0; r < 2; ++r) {
      const Batch b = BatchOf(r, config);
      LOOM_RETURN_IF_ERROR(model->Forward(b.tokens, b.targets).status());
      LOOM_RETURN_IF_ERROR(model->Backward(0.5f));
    }
    for (const GptParameter& p : model->Parameters()) {
      for (const float g : p.grad) sq += static_cast<double>(g) * static_cast<double>(g);
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status[0].ok()) << status[0];
  return sq;
}

// Specs: the model's units as the partition's; `split_head` puts the final norm in
// a unit of its own, apart from the head's weight (what the name-based units did).
std::vector<ParamSpec> Specs(GptModel& model, bool split_head, std::vector<float>& initial) {
  std::vector<ParamSpec> specs;
  const std::vector<GptParameter> params = model.Parameters();
  const std::vector<ParameterUnit> units = model.Units();
  for (size_t u = 0; u < units.size(); ++u) {
    for (int p = units[u].first; p < units[u].end; ++p) {
      int unit = static_cast<int>(u);
      if (split_head && params[p].name == "head.weight") unit = static_cast<int>(units.size());
      specs.push_back(ParamSpec{params[p].name, params[p].shape, unit});
      initial.insert(initial.end(), params[p].values.begin(), params[p].values.end());
    }
  }
  return specs;
}

// RunRank: rank `rank`'s model borrows from an engine of `stage` over `dp` and
// runs one forward and backward on its batch; returns its share of the reduced
// gradient's squared norm.
absl::StatusOr<double> RunRank(const GptConfig& config, int rank, Communicator& dp, int stage,
                               int64_t persistence_threshold, bool split_head) {
  double share = 0;
  const std::vector<absl::Status> status = RunTp(1, [&](Communicator& tp) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model, GptModel::Create(config, tp));
    std::vector<float> initial;
    const std::vector<ParamSpec> specs = Specs(*model, split_head, initial);
    PartitionOptions options;
    options.dp_size = 2;
    options.persistence_threshold = persistence_threshold;
    LOOM_ASSIGN_OR_RETURN(const Partition partition, Partition::Create(specs, options));
    Zero3Options zero;
    zero.stage = stage;
    zero.require_same_use = true;
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Zero3Engine> engine,
                          Zero3Engine::Create(partition, &dp, initial, zero));
    LOOM_RETURN_IF_ERROR(
        model->UseParameterSource(engine.get(), GptModel::GradientHome::kSource));
    const Batch b = BatchOf(rank, config);
    LOOM_RETURN_IF_ERROR(model->Forward(b.tokens, b.targets).status());
    LOOM_RETURN_IF_ERROR(model->Backward());
    LOOM_RETURN_IF_ERROR(engine->ReduceGradients());
    const std::vector<float> weight(static_cast<size_t>(partition.num_params()), 1.0f);
    LOOM_ASSIGN_OR_RETURN(share, engine->ReducedGradSquaredNorm(weight));
    return absl::OkStatus();
  });
  if (!status[0].ok()) return status[0];
  return share;
}

TEST(GptZero3Test, WideModelsUnitsThroughTheEngineAtEveryStage) {
  const GptConfig config = WideConfig();
  const double expected = ReferenceSquaredNorm(config);
  ASSERT_GT(expected, 0);
  // 0: every unit sharded; 25,000 elements: the embeddings (23,040) and the head's
  // unit (21,120) kept whole, the blocks (1.2 M each) sharded.
  for (const int64_t threshold : {int64_t{0}, int64_t{25000}}) {
    for (const int stage : {1, 2, 3}) {
      SCOPED_TRACE(absl::StrCat("stage ", stage, " persistence threshold ", threshold));
      std::vector<double> shares(2, 0);
      RunInprocRanks(2, [&](int rank, Communicator& dp) {
        absl::StatusOr<double> share = RunRank(config, rank, dp, stage, threshold, false);
        ASSERT_TRUE(share.ok()) << share.status();
        shares[static_cast<size_t>(rank)] = *share;
      });
      EXPECT_NEAR(shares[0] + shares[1], expected, 1e-5 * expected);
    }
  }
}

TEST(GptZero3Test, SplittingTheHeadsUnitIsTheEnginesClearError) {
  const GptConfig config = WideConfig();
  std::vector<absl::Status> status(2);
  RunInprocRanks(2, [&](int rank, Communicator& dp) {
    status[static_cast<size_t>(rank)] = RunRank(config, rank, dp, 3, 0, true).status();
  });
  for (const absl::Status& s : status) {
    // The model leases its units whole: a partition that split one is refused at
    // the first lease, naming the unit and where it was split.
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("unit \"head\" is not one of the partition's units: "
                                      "parameters 26 and 28 lie in different buckets")));
  }
}

}  // namespace
}  // namespace loom
