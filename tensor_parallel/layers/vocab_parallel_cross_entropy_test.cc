// VocabParallelCrossEntropy against an unsharded double-precision softmax
// cross-entropy, for tp = 1..4 (uneven vocabulary pieces at 3 and 4, an empty one
// with kChunk at tp = 4 over a vocabulary of 5) and both shard rules. Logits span
// [-8, 8) so the max shift matters. Bound: tp_testing.h (relative 1e-5).
#include "tensor_parallel/layers/vocab_parallel_cross_entropy.h"

#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor_parallel/layers/internal/tp_testing.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using tp_layers_testing::ExpectAllOk;
using tp_layers_testing::ExpectClose;
using tp_layers_testing::RandomTensor;
using tp_layers_testing::RandomValues;
using tp_layers_testing::RuleName;
using tp_layers_testing::RunTp;
using tp_layers_testing::SliceCols;
using tp_layers_testing::Values;

constexpr int64_t kTokens = 9;

using Param = std::tuple<int /*tp*/, ShardRule, int64_t /*vocab*/>;

class VocabParallelCrossEntropyTest : public ::testing::TestWithParam<Param> {};

TEST_P(VocabParallelCrossEntropyTest, MatchesUnshardedReference) {
  // Named copies, not a structured binding: clang 14 cannot capture those in lambdas.
  const auto tp = std::get<0>(GetParam());
  const auto rule = std::get<1>(GetParam());
  const auto vocab = std::get<2>(GetParam());
  std::vector<float> z = RandomValues(kTokens * vocab, 31);
  for (float& v : z) v *= 8.0f;
  const Tensor logits = *Tensor::FromValues({kTokens, vocab}, z);
  const Tensor dloss = RandomTensor({kTokens}, 32);
  std::mt19937 gen(33);
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  std::vector<int64_t> targets(kTokens);
  for (int64_t& t : targets) t = dist(gen);
  targets[0] = vocab - 1;  // the last rank's (or a trailing) piece owns a target

  const std::vector<double> zd = Values(logits), gd = Values(dloss);
  std::vector<double> loss_ref(kTokens), dz_ref(kTokens * vocab);
  for (int64_t t = 0; t < kTokens; ++t) {
    double sum = 0;
    for (int64_t j = 0; j < vocab; ++j) sum += std::exp(zd[t * vocab + j]);
    loss_ref[t] = std::log(sum) - zd[t * vocab + targets[t]];
    for (int64_t j = 0; j < vocab; ++j) {
      dz_ref[t * vocab + j] =
          (std::exp(zd[t * vocab + j]) / sum - (j == targets[t] ? 1.0 : 0.0)) * gd[t];
    }
  }

  ExpectAllOk(RunTp(tp, [&](Communicator& comm) -> absl::Status {
    const std::string where = absl::StrCat("rank ", comm.rank());
    LOOM_ASSIGN_OR_RETURN(VocabParallelCrossEntropy ce,
                          VocabParallelCrossEntropy::Create(vocab, comm, rule));
    const ShardExtent piece = ShardExtentOf(vocab, tp, comm.rank(), rule);
    LOOM_ASSIGN_OR_RETURN(Tensor local, logits.Slice(1, piece.offset, piece.length));
    LOOM_ASSIGN_OR_RETURN(Tensor loss, ce.Forward(local, targets));
    ExpectClose(loss, loss_ref, where + " loss");
    LOOM_ASSIGN_OR_RETURN(Tensor dz, ce.Backward(dloss));
    EXPECT_EQ(dz.shape(), (std::vector<int64_t>{kTokens, piece.length})) << where;
    ExpectClose(dz, SliceCols(dz_ref, vocab, piece.offset, piece.length), where + " dlogits");
    return absl::OkStatus();
  }));
}

std::vector<Param> Params() {
  std::vector<Param> params;
  for (int tp : {1, 2, 3, 4}) {
    for (ShardRule rule : {ShardRule::kBalanced, ShardRule::kChunk}) {
      for (int64_t vocab : {5, 13}) params.emplace_back(tp, rule, vocab);
    }
  }
  return params;
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const auto [tp, rule, vocab] = info.param;
  return absl::StrCat("tp", tp, "_", RuleName(rule), "_vocab", vocab);
}

INSTANTIATE_TEST_SUITE_P(All, VocabParallelCrossEntropyTest, ::testing::ValuesIn(Params()),
                         ParamName);

TEST(VocabParallelCrossEntropyErrors, BadShapesAndTargets) {
  ExpectAllOk(RunTp(2, [&](Communicator& comm) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(VocabParallelCrossEntropy ce,
                          VocabParallelCrossEntropy::Create(8, comm, ShardRule::kBalanced));
    EXPECT_THAT(ce.Forward(RandomTensor({3, 8}, 1), {0, 1, 2}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("input shape [3,8] must be [..., 4]")));
    EXPECT_THAT(ce.Forward(RandomTensor({3, 4}, 1), {0, 1}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("2 targets for logits [3,4] (3 tokens)")));
    EXPECT_THAT(ce.Forward(RandomTensor({2, 4}, 1), {0, 8}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("target 8 at position 1 is outside the vocabulary [0, 8)")));
    EXPECT_THAT(ce.Backward(RandomTensor({2}, 1)),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("before Forward")));
    return absl::OkStatus();
  }));
}

}  // namespace
}  // namespace loom
