// RowParallelLinear against an unsharded double-precision reference, for tp = 1..4
// (3 and 4 give uneven feature and sequence pieces), both shard rules, with and
// without sequence parallelism, f32 and bf16 storage. Bound: tp_testing.h.
#include "tensor_parallel/layers/row_parallel_linear.h"

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
using tp_layers_testing::DenseLinearReference;
using tp_layers_testing::ExpectClose;
using tp_layers_testing::LinearReference;
using tp_layers_testing::RandomTensor;
using tp_layers_testing::RuleName;
using tp_layers_testing::RunTp;
using tp_layers_testing::SliceCols;
using tp_layers_testing::SliceRows;

constexpr int64_t kSeq = 7, kBatch = 2, kIn = 10, kOut = 6;

using Param = std::tuple<int /*tp*/, bool /*sp*/, ShardRule, DType>;

class RowParallelLinearTest : public ::testing::TestWithParam<Param> {};

TEST_P(RowParallelLinearTest, MatchesUnshardedReference) {
  // Named copies, not a structured binding: clang 14 cannot capture those in lambdas.
  const auto tp = std::get<0>(GetParam());
  const auto sp = std::get<1>(GetParam());
  const auto rule = std::get<2>(GetParam());
  const auto dtype = std::get<3>(GetParam());
  const Tensor w = RandomTensor({kOut, kIn}, 11);
  const Tensor b = RandomTensor({kOut}, 12);
  const Tensor x = RandomTensor({kSeq, kBatch, kIn}, 13);
  const Tensor dy = RandomTensor({kSeq, kBatch, kOut}, 14);

  const LinearReference ref = DenseLinearReference(w, b, x, dy, dtype);
  const std::vector<double>&y_ref = ref.y, &dx_ref = ref.dx, &dw_ref = ref.dw, &db_ref = ref.db;

  ExpectAllOk(RunTp(tp, [&](Communicator& comm) -> absl::Status {
    const std::string where = absl::StrCat("rank ", comm.rank());
    RowParallelOptions options;
    options.sequence_parallel = sp;
    options.sequence_length = kSeq;
    options.rule = rule;
    options.weight_dtype = dtype;
    LOOM_ASSIGN_OR_RETURN(RowParallelLinear proj, RowParallelLinear::Create(w, &b, comm, options));
    const ShardExtent feat = ShardExtentOf(kIn, tp, comm.rank(), rule);
    const ShardExtent seq = ShardExtentOf(kSeq, tp, comm.rank(), rule);
    LOOM_ASSIGN_OR_RETURN(Tensor input, x.Slice(2, feat.offset, feat.length));
    LOOM_ASSIGN_OR_RETURN(Tensor y, proj.Forward(input));
    Tensor grad;
    if (sp) {
      EXPECT_EQ(y.shape(), (std::vector<int64_t>{seq.length, kBatch, kOut})) << where;
      ExpectClose(y, SliceRows(y_ref, kOut, seq.offset * kBatch, seq.length * kBatch),
                  where + " y");
      LOOM_ASSIGN_OR_RETURN(grad, dy.Slice(0, seq.offset, seq.length));
    } else {
      ExpectClose(y, y_ref, where + " y");
      grad = dy.Clone();
    }
    LOOM_ASSIGN_OR_RETURN(Tensor dx, proj.Backward(grad));
    EXPECT_EQ(dx.shape(), (std::vector<int64_t>{kSeq, kBatch, feat.length})) << where;
    ExpectClose(dx, SliceCols(dx_ref, kIn, feat.offset, feat.length), where + " dx");
    ExpectClose(proj.weight_grad(), SliceCols(dw_ref, kIn, feat.offset, feat.length),
                where + " dW");
    ExpectClose(proj.bias_grad(), db_ref, where + " db");
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

INSTANTIATE_TEST_SUITE_P(All, RowParallelLinearTest, ::testing::ValuesIn(Params()), ParamName);

// The layer's tally counts logical payloads: without SP one all-reduce of the
// output forward and nothing backward; with SP a reduce-scatter of the full output
// forward and an all-gather of the full gradient backward, uneven pieces (tp = 3,
// s = 7) counted unpadded.
TEST(RowParallelLinearTally, CountsLogicalPayloads) {
  for (bool sp : {false, true}) {
    ExpectAllOk(RunTp(3, [&](Communicator& comm) -> absl::Status {
      RowParallelOptions options;
      options.sequence_parallel = sp;
      options.sequence_length = kSeq;
      LOOM_ASSIGN_OR_RETURN(
          RowParallelLinear proj,
          RowParallelLinear::Create(RandomTensor({kOut, kIn}, 1), nullptr, comm, options));
      const ShardExtent feat = ShardExtentOf(kIn, 3, comm.rank(), ShardRule::kBalanced);
      const ShardExtent seq = ShardExtentOf(kSeq, 3, comm.rank(), ShardRule::kBalanced);
      LOOM_RETURN_IF_ERROR(proj.Forward(RandomTensor({kSeq, kBatch, feat.length}, 2)).status());
      LOOM_RETURN_IF_ERROR(
          proj.Backward(RandomTensor({sp ? seq.length : kSeq, kBatch, kOut}, 3)).status());
      const uint64_t full = kSeq * kBatch * kOut * sizeof(float);
      const CommTally& tally = proj.comm_tally();
      EXPECT_EQ(tally.all_reduce_bytes, sp ? 0 : full);
      EXPECT_EQ(tally.reduce_scatter_bytes, sp ? full : 0);
      EXPECT_EQ(tally.all_gather_bytes, sp ? full : 0);
      EXPECT_EQ(tally.calls, sp ? 2u : 1u);
      return absl::OkStatus();
    }));
  }
}

TEST(RowParallelLinearErrors, WrongInputShapeNamesShapes) {
  ExpectAllOk(RunTp(2, [&](Communicator& comm) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(
        RowParallelLinear proj,
        RowParallelLinear::Create(RandomTensor({kOut, kIn}, 1), nullptr, comm, {}));
    EXPECT_THAT(proj.Forward(RandomTensor({5, kIn}, 2)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("input shape [5,10] must be [..., 5]")));
    LOOM_RETURN_IF_ERROR(proj.Forward(RandomTensor({5, 5}, 3)).status());
    EXPECT_THAT(proj.Backward(RandomTensor({4, kOut}, 2)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("grad_output is f32 [4,6], Forward returned f32 [5,6]")));
    return absl::OkStatus();
  }));
}

TEST(RowParallelLinearErrors, SequenceParallelInputMustBeWholeSequence) {
  ExpectAllOk(RunTp(2, [&](Communicator& comm) -> absl::Status {
    RowParallelOptions options;
    options.sequence_parallel = true;
    options.sequence_length = kSeq;
    LOOM_ASSIGN_OR_RETURN(
        RowParallelLinear proj,
        RowParallelLinear::Create(RandomTensor({kOut, kIn}, 1), nullptr, comm, options));
    EXPECT_THAT(proj.Forward(RandomTensor({3, kBatch, 5}, 2)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("input shape [3,2,5] must have dim 0 = 7")));
    return absl::OkStatus();
  }));
}

// f32 storage with bf16 products (a bf16 model's borrowed f32 views of bf16 values)
// computes bitwise what bf16 storage computes: Gemm rounds the weight as storage
// would have, and the input and output gradient as a bf16 layer does. Set at Create
// or later (SetGemmPrecision); a precision outside the enum is refused by value.
TEST(RowParallelLinearPrecision, F32StorageWithBf16ProductsEqualsBf16Storage) {
  ExpectAllOk(RunTp(2, [&](Communicator& comm) -> absl::Status {
    // bf16-exact weight and bias, so that f32 storage holds what bf16 storage does.
    LOOM_ASSIGN_OR_RETURN(const Tensor w16, RandomTensor({kOut, kIn}, 1).ConvertTo(DType::kBF16));
    LOOM_ASSIGN_OR_RETURN(const Tensor b16, RandomTensor({kOut}, 2).ConvertTo(DType::kBF16));
    LOOM_ASSIGN_OR_RETURN(const Tensor w, w16.ConvertTo(DType::kF32));
    LOOM_ASSIGN_OR_RETURN(const Tensor b, b16.ConvertTo(DType::kF32));
    const Tensor x = RandomTensor({kSeq, kBatch, kIn / 2}, 3);
    RowParallelOptions storage;
    storage.weight_dtype = DType::kBF16;
    RowParallelOptions products;
    products.precision = GemmPrecision::kBf16;
    LOOM_ASSIGN_OR_RETURN(RowParallelLinear by_storage,
                          RowParallelLinear::Create(w, &b, comm, storage));
    LOOM_ASSIGN_OR_RETURN(RowParallelLinear by_option,
                          RowParallelLinear::Create(w, &b, comm, products));
    LOOM_ASSIGN_OR_RETURN(RowParallelLinear by_setter, RowParallelLinear::Create(w, &b, comm, {}));
    EXPECT_EQ(by_setter.gemm_precision(), GemmPrecision::kF32);
    LOOM_RETURN_IF_ERROR(by_setter.SetGemmPrecision(GemmPrecision::kBf16));
    for (RowParallelLinear* layer : {&by_storage, &by_option, &by_setter}) {
      EXPECT_EQ(layer->gemm_precision(), GemmPrecision::kBf16);
    }
    LOOM_ASSIGN_OR_RETURN(Tensor y, by_storage.Forward(x));
    for (RowParallelLinear* layer : {&by_option, &by_setter}) {
      LOOM_ASSIGN_OR_RETURN(Tensor y2, layer->Forward(x));
      EXPECT_EQ(y2.ToF32(), y.ToF32());
    }
    LOOM_ASSIGN_OR_RETURN(Tensor dx, by_storage.Backward(y));
    for (RowParallelLinear* layer : {&by_option, &by_setter}) {
      LOOM_ASSIGN_OR_RETURN(Tensor dx2, layer->Backward(y));
      EXPECT_EQ(dx2.ToF32(), dx.ToF32());
      EXPECT_EQ(layer->weight_grad().ToF32(), by_storage.weight_grad().ToF32());
    }
    const GemmPrecision bad = static_cast<GemmPrecision>(9);
    EXPECT_THAT(
        by_setter.SetGemmPrecision(bad),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 HasSubstr("RowParallelLinear: GEMM precision 9 is neither kF32 nor kBf16")));
    products.precision = bad;
    EXPECT_THAT(RowParallelLinear::Create(w, &b, comm, products),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("GEMM precision 9")));
    return absl::OkStatus();
  }));
}

}  // namespace
}  // namespace loom
