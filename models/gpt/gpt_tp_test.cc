// A tp = 2 model (ranks as threads over inproc) against the tp = 1 model: the same
// initial values (each rank holds its shard), the same loss, and gradients whose
// shards equal the tp = 1 gradients' shards within 1e-5 of the largest magnitude
// of each tensor. The ranks split heads, MLP columns and vocabulary, so their
// products sum in another order than tp = 1's (partial sums all-reduced): a few
// f32 roundings of O(64)-term sums, ~1e-6 relative; a wrong shard offset, a
// missing all-reduce or a replicated gradient counted twice is off by O(1).
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gtest/gtest.h"
#include "models/gpt/gpt_model.h"
#include "models/gpt/internal/train_testing.h"

namespace loom {
namespace {

using train_testing::ExpectAllOk;
using train_testing::ExpectClose;
using train_testing::RandomizeParameters;
using train_testing::RunTp;
using train_testing::SeededIds;

constexpr double kRel = 1e-5;

struct RankResult {
  float loss = 0;
  std::vector<GptParameter> params;  // names, shapes and split only
  std::vector<std::vector<float>> initial, values, grads;
};

// Runs the model on `tp` ranks; rank r's result in results[r].
std::vector<RankResult> RunModel(const GptConfig& config, int tp_size, bool randomize) {
  std::vector<RankResult> results(static_cast<size_t>(tp_size));
  const std::vector<int64_t> tokens = SeededIds(3 * config.seq_len, config.vocab, 41);
  const std::vector<int64_t> targets = SeededIds(3 * config.seq_len, config.vocab, 42);
  ExpectAllOk(RunTp(tp_size, [&](Communicator& tp) -> absl::Status {
    RankResult& out = results[static_cast<size_t>(tp.rank())];
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model, GptModel::Create(config, tp));
    std::vector<GptParameter> params = model->Parameters();
    for (const GptParameter& p : params) out.initial.emplace_back(p.values.begin(), p.values.end());
    if (randomize) {
      LOOM_RETURN_IF_ERROR(RandomizeParameters(absl::MakeSpan(params), 51, 0.3f, tp.size(),
                                               tp.rank()));
    }
    LOOM_ASSIGN_OR_RETURN(out.loss, model->Forward(tokens, targets));
    LOOM_RETURN_IF_ERROR(model->Backward());
    for (const GptParameter& p : params) {
      out.values.emplace_back(p.values.begin(), p.values.end());
      out.grads.emplace_back(p.grad.begin(), p.grad.end());
      GptParameter meta = p;
      meta.values = {};
      meta.grad = {};
      out.params.push_back(meta);
    }
    return absl::OkStatus();
  }));
  return results;
}

class GptTensorParallelTest : public ::testing::TestWithParam<bool> {};

TEST_P(GptTensorParallelTest, TwoRanksEqualOneRank) {
  const bool randomize = GetParam();
  const GptConfig config;  // V=64, seq=32, hidden=64, heads=4, layers=4
  const std::vector<RankResult> one = RunModel(config, 1, randomize);
  const std::vector<RankResult> two = RunModel(config, 2, randomize);
  ASSERT_EQ(one.size(), 1u);
  ASSERT_EQ(two.size(), 2u);
  const RankResult& ref = one[0];
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(absl::StrCat("tp rank ", r));
    const RankResult& got = two[static_cast<size_t>(r)];
    EXPECT_NEAR(got.loss, ref.loss, kRel * std::fabs(static_cast<double>(ref.loss)));
    ASSERT_EQ(got.params.size(), ref.params.size());
    for (size_t k = 0; k < ref.params.size(); ++k) {
      const GptParameter& p = got.params[k];
      SCOPED_TRACE(p.name);
      ASSERT_EQ(p.name, ref.params[k].name);
      EXPECT_EQ(p.full_shape, ref.params[k].shape);
      if (p.split != TpSplit::kReplicated) {
        EXPECT_NE(p.shape, p.full_shape);
      }
      // Initial values: exactly this rank's cut of the tp = 1 tensor.
      LOOM_ASSERT_OK_AND_ASSIGN(std::vector<float> initial, ShardOf(p, ref.initial[k], 2, r));
      EXPECT_EQ(got.initial[k], initial);
      LOOM_ASSERT_OK_AND_ASSIGN(std::vector<float> values, ShardOf(p, ref.values[k], 2, r));
      EXPECT_EQ(got.values[k], values);
      LOOM_ASSERT_OK_AND_ASSIGN(std::vector<float> grad, ShardOf(p, ref.grads[k], 2, r));
      ExpectClose(got.grads[k], grad, p.name, kRel);
    }
  }
  // Replicated parameters' gradients are the same on both ranks (no tp reduction
  // needed before an optimizer step).
  for (size_t k = 0; k < two[0].params.size(); ++k) {
    if (two[0].params[k].split == TpSplit::kReplicated) {
      EXPECT_EQ(two[0].grads[k], two[1].grads[k]) << two[0].params[k].name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(InitialAndRandomized, GptTensorParallelTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? "Randomized" : "Initial";
                         });

}  // namespace
}  // namespace loom
