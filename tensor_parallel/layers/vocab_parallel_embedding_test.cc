// VocabParallelEmbedding against an unsharded lookup, for tp = 1..4 (uneven vocab
// and sequence pieces at 3 and 4), both shard rules, with and without sequence
// parallelism, f32 and bf16 storage. The forward pass is a copy plus sums of exact
// zeros, so it is compared exactly; the weight gradient sums repeated ids' rows in
// the same order as the reference, so it is compared within tp_testing.h's bound.
#include "tensor_parallel/layers/vocab_parallel_embedding.h"

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
using tp_layers_testing::RoundedToStorage;
using tp_layers_testing::RuleName;
using tp_layers_testing::RunTp;
using tp_layers_testing::SliceRows;
using tp_layers_testing::Values;

constexpr int64_t kVocab = 11, kHidden = 5, kSeq = 7, kBatch = 2;

using Param = std::tuple<int /*tp*/, bool /*sp*/, ShardRule, DType>;

class VocabParallelEmbeddingTest : public ::testing::TestWithParam<Param> {};

TEST_P(VocabParallelEmbeddingTest, MatchesUnshardedReference) {
  // Named copies, not a structured binding: clang 14 cannot capture those in lambdas.
  const auto tp = std::get<0>(GetParam());
  const auto sp = std::get<1>(GetParam());
  const auto rule = std::get<2>(GetParam());
  const auto dtype = std::get<3>(GetParam());
  const Tensor table = RandomTensor({kVocab, kHidden}, 21);
  const Tensor dy_full = RandomTensor({kSeq, kBatch, kHidden}, 22);
  std::mt19937 gen(23);
  std::uniform_int_distribution<int64_t> dist(0, kVocab - 1);
  std::vector<int64_t> ids(kSeq * kBatch);
  for (int64_t& id : ids) id = dist(gen);
  ids[3] = ids[0];  // a repeated id accumulates its gradient
  const std::vector<int64_t> ids_shape = {kSeq, kBatch};

  const std::vector<double> td = RoundedToStorage(table, dtype), dyd = Values(dy_full);
  std::vector<double> y_ref, dw_ref(kVocab * kHidden, 0.0);
  for (size_t i = 0; i < ids.size(); ++i) {
    for (int64_t j = 0; j < kHidden; ++j) {
      y_ref.push_back(td[ids[i] * kHidden + j]);
      dw_ref[ids[i] * kHidden + j] += dyd[i * kHidden + j];
    }
  }

  ExpectAllOk(RunTp(tp, [&](Communicator& comm) -> absl::Status {
    const std::string where = absl::StrCat("rank ", comm.rank());
    VocabParallelEmbeddingOptions options;
    options.sequence_parallel = sp;
    options.rule = rule;
    options.weight_dtype = dtype;
    LOOM_ASSIGN_OR_RETURN(VocabParallelEmbedding emb,
                          VocabParallelEmbedding::Create(table, comm, options));
    const ShardExtent vocab = ShardExtentOf(kVocab, tp, comm.rank(), rule);
    const ShardExtent seq = ShardExtentOf(kSeq, tp, comm.rank(), rule);
    EXPECT_EQ(emb.vocab_extent(), vocab);
    LOOM_ASSIGN_OR_RETURN(Tensor y, emb.Forward(ids, ids_shape));
    Tensor grad;
    if (sp) {
      EXPECT_EQ(y.shape(), (std::vector<int64_t>{seq.length, kBatch, kHidden})) << where;
      ExpectClose(y, SliceRows(y_ref, kHidden, seq.offset * kBatch, seq.length * kBatch),
                  where + " y", /*rel=*/0.0);
      LOOM_ASSIGN_OR_RETURN(grad, dy_full.Slice(0, seq.offset, seq.length));
    } else {
      ExpectClose(y, y_ref, where + " y", /*rel=*/0.0);
      grad = dy_full.Clone();
    }
    LOOM_RETURN_IF_ERROR(emb.Backward(grad));
    ExpectClose(emb.weight_grad(), SliceRows(dw_ref, kHidden, vocab.offset, vocab.length),
                where + " dW");
    return absl::OkStatus();
  }));
}

std::vector<Param> Params() {
  std::vector<Param> params;
  for (int tp : {1, 2, 3, 4}) {
    for (bool sp : {false, true}) {
      for (ShardRule rule : {ShardRule::kBalanced, ShardRule::kChunk}) {
        for (DType dtype : {DType::kF32, DType::kBF16}) params.emplace_back(tp, sp, rule, dtype);
      }
    }
  }
  return params;
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const auto [tp, sp, rule, dtype] = info.param;
  return absl::StrCat("tp", tp, sp ? "_sp" : "", "_", RuleName(rule), "_", DTypeName(dtype));
}

INSTANTIATE_TEST_SUITE_P(All, VocabParallelEmbeddingTest, ::testing::ValuesIn(Params()),
                         ParamName);

TEST(VocabParallelEmbeddingErrors, OutOfRangeIdAndBadShapes) {
  ExpectAllOk(RunTp(2, [&](Communicator& comm) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(
        VocabParallelEmbedding emb,
        VocabParallelEmbedding::Create(RandomTensor({kVocab, kHidden}, 1), comm, {}));
    const std::vector<int64_t> bad = {1, 11};
    EXPECT_THAT(emb.Forward(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("id 11 at position 1 is outside the "
                                                     "vocabulary [0, 11)")));
    const std::vector<int64_t> ids = {1, 2, 3};
    const std::vector<int64_t> shape = {2, 2};
    EXPECT_THAT(emb.Forward(ids, shape),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("ids shape [2,2] does not hold 3 ids")));
    LOOM_RETURN_IF_ERROR(emb.Forward(ids).status());
    EXPECT_THAT(emb.Backward(RandomTensor({3, 4}, 2)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("grad_output is f32 [3,4], Forward returned f32 [3,5]")));
    EXPECT_THAT(VocabParallelEmbedding::Create(RandomTensor({kVocab}, 1), comm, {}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("table shape [11]")));
    return absl::OkStatus();
  }));
}

}  // namespace
}  // namespace loom
