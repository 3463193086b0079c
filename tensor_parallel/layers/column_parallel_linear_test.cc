// ColumnParallelLinear against an unsharded double-precision reference, for
// tp = 1..4 (3 and 4 give uneven feature and sequence pieces), both shard rules,
// with and without sequence parallelism and output gathering, f32 and bf16 storage.
// Bound: tp_testing.h (relative 1e-5 of the largest reference magnitude).
#include "tensor_parallel/layers/column_parallel_linear.h"

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

constexpr int64_t kSeq = 7, kBatch = 2, kIn = 6, kOut = 10;

using Param = std::tuple<int /*tp*/, bool /*sp*/, ShardRule, bool /*gather*/, DType>;

class ColumnParallelLinearTest : public ::testing::TestWithParam<Param> {};

TEST_P(ColumnParallelLinearTest, MatchesUnshardedReference) {
  // Named copies, not a structured binding: clang 14 cannot capture those in lambdas.
  const auto tp = std::get<0>(GetParam());
  const auto sp = std::get<1>(GetParam());
  const auto rule = std::get<2>(GetParam());
  const auto gather = std::get<3>(GetParam());
  const auto dtype = std::get<4>(GetParam());
  const Tensor w = RandomTensor({kOut, kIn}, 1);
  const Tensor b = RandomTensor({kOut}, 2);
  const Tensor x = RandomTensor({kSeq, kBatch, kIn}, 3);
  const Tensor dy = RandomTensor({kSeq, kBatch, kOut}, 4);

  const LinearReference ref = DenseLinearReference(w, b, x, dy, dtype);
  const std::vector<double>&y_ref = ref.y, &dx_ref = ref.dx, &dw_ref = ref.dw, &db_ref = ref.db;

  ExpectAllOk(RunTp(tp, [&](Communicator& comm) -> absl::Status {
    const std::string where = absl::StrCat("rank ", comm.rank());
    ColumnParallelOptions options;
    options.gather_output = gather;
    options.sequence_parallel = sp;
    options.sequence_length = kSeq;
    options.rule = rule;
    options.weight_dtype = dtype;
    LOOM_ASSIGN_OR_RETURN(ColumnParallelLinear fc,
                          ColumnParallelLinear::Create(w, &b, comm, options));
    const ShardExtent feat = ShardExtentOf(kOut, tp, comm.rank(), rule);
    const ShardExtent seq = ShardExtentOf(kSeq, tp, comm.rank(), rule);
    Tensor input;
    if (sp) {
      LOOM_ASSIGN_OR_RETURN(input, x.Slice(0, seq.offset, seq.length));
    } else {
      input = x.Clone();
    }
    LOOM_ASSIGN_OR_RETURN(Tensor y, fc.Forward(input));
    Tensor grad;
    if (gather) {
      EXPECT_EQ(y.shape(), (std::vector<int64_t>{kSeq, kBatch, kOut})) << where;
      ExpectClose(y, y_ref, where + " y");
      grad = dy.Clone();
    } else {
      EXPECT_EQ(y.shape(), (std::vector<int64_t>{kSeq, kBatch, feat.length})) << where;
      ExpectClose(y, SliceCols(y_ref, kOut, feat.offset, feat.length), where + " y");
      LOOM_ASSIGN_OR_RETURN(grad, dy.Slice(2, feat.offset, feat.length));
    }
    LOOM_ASSIGN_OR_RETURN(Tensor dx, fc.Backward(grad));
    if (sp) {
      EXPECT_EQ(dx.shape(), (std::vector<int64_t>{seq.length, kBatch, kIn})) << where;
      ExpectClose(dx, SliceRows(dx_ref, kIn, seq.offset * kBatch, seq.length * kBatch),
                  where + " dx");
    } else {
      ExpectClose(dx, dx_ref, where + " dx");
    }
    ExpectClose(fc.weight_grad(), SliceRows(dw_ref, kIn, feat.offset, feat.length),
                where + " dW");
    ExpectClose(fc.bias_grad(), SliceRows(db_ref, 1, feat.offset, feat.length), where + " db");
    return absl::OkStatus();
  }));
}

std::vector<Param> Params() {
  std::vector<Param> params;
  for (int tp : {1, 2, 3, 4}) {
    for (bool sp : {false, true}) {
      for (ShardRule rule : {ShardRule::kBalanced, ShardRule::kChunk}) {
        for (bool gather : {false, true}) {
          if (sp && gather) continue;
          for (DType dtype : {DType::kF32, DType::kBF16}) {
            params.emplace_back(tp, sp, rule, gather, dtype);
          }
        }
      }
    }
  }
  return params;
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const auto [tp, sp, rule, gather, dtype] = info.param;
  return absl::StrCat("tp", tp, sp ? "_sp" : "", "_", RuleName(rule), gather ? "_gather" : "",
                      "_", DTypeName(dtype));
}

INSTANTIATE_TEST_SUITE_P(All, ColumnParallelLinearTest, ::testing::ValuesIn(Params()), ParamName);

TEST(ColumnParallelLinearErrors, WrongInputShapeNamesShapes) {
  ExpectAllOk(RunTp(2, [&](Communicator& comm) -> absl::Status {
    const Tensor w = RandomTensor({kOut, kIn}, 1);
    LOOM_ASSIGN_OR_RETURN(ColumnParallelLinear fc,
                          ColumnParallelLinear::Create(w, nullptr, comm, {}));
    EXPECT_THAT(fc.Forward(RandomTensor({5, 7}, 2)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("input shape [5,7] must be [..., 6]")));
    EXPECT_THAT(fc.Backward(RandomTensor({5, 5}, 2)),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("before Forward")));
    LOOM_RETURN_IF_ERROR(fc.Forward(RandomTensor({5, kIn}, 3)).status());
    EXPECT_THAT(fc.Backward(RandomTensor({5, 4}, 2)),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[5,4]")));
    return absl::OkStatus();
  }));
}

// A layer that borrows its weights computes bitwise what it computes with its
// own (bf16 storage widens to exactly the values lent), and refuses to run when
// it dropped its own and borrows none.
TEST(ColumnParallelLinearBorrow, BorrowedWeightsGiveTheOwnedResultsBitwise) {
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    ExpectAllOk(RunTp(2, [&](Communicator& comm) -> absl::Status {
      const Tensor w = RandomTensor({kOut, kIn}, 1);
      const Tensor b = RandomTensor({kOut}, 2);
      const Tensor x = RandomTensor({kSeq, kBatch, kIn}, 3);
      ColumnParallelOptions options;
      options.weight_dtype = dtype;
      LOOM_ASSIGN_OR_RETURN(ColumnParallelLinear owner,
                            ColumnParallelLinear::Create(w, &b, comm, options));
      LOOM_ASSIGN_OR_RETURN(ColumnParallelLinear borrower,
                            ColumnParallelLinear::Create(w, &b, comm, options));
      const std::vector<float> lent_w = owner.weight().ToF32();
      const std::vector<float> lent_b = owner.bias().ToF32();
      borrower.DropOwnedWeights();
      EXPECT_EQ(borrower.weight().numel(), 0);
      EXPECT_THAT(borrower.Forward(x),
                  StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("BorrowWeights")));
      EXPECT_THAT(borrower.BorrowWeights(lent_w, {}),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           HasSubstr(absl::StrCat("have ", lent_w.size(), " and ", lent_b.size()))));
      LOOM_RETURN_IF_ERROR(borrower.BorrowWeights(lent_w, lent_b));
      LOOM_ASSIGN_OR_RETURN(Tensor y_owned, owner.Forward(x));
      LOOM_ASSIGN_OR_RETURN(Tensor y_borrowed, borrower.Forward(x));
      EXPECT_EQ(y_owned.ToF32(), y_borrowed.ToF32());
      LOOM_ASSIGN_OR_RETURN(Tensor dx_owned, owner.Backward(y_owned));
      LOOM_ASSIGN_OR_RETURN(Tensor dx_borrowed, borrower.Backward(y_borrowed));
      EXPECT_EQ(dx_owned.ToF32(), dx_borrowed.ToF32());
      EXPECT_EQ(owner.weight_grad().ToF32(), borrower.weight_grad().ToF32());
      borrower.ReturnWeights();
      EXPECT_THAT(borrower.Forward(x),
                  StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("none are lent")));
      borrower.ReleaseWeightGradients();
      EXPECT_EQ(borrower.weight_grad().numel(), 0);
      return absl::OkStatus();
    }));
  }
}

TEST(ColumnParallelLinearErrors, BadCreateArguments) {
  ExpectAllOk(RunTp(1, [&](Communicator& comm) -> absl::Status {
    const Tensor w = RandomTensor({kOut, kIn}, 1);
    const Tensor bad_bias = RandomTensor({kOut + 1}, 2);
    EXPECT_THAT(ColumnParallelLinear::Create(w, &bad_bias, comm, {}),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("bias shape [11] must be [10] for weight [10,6]")));
    ColumnParallelOptions sp;
    sp.sequence_parallel = true;
    EXPECT_THAT(ColumnParallelLinear::Create(w, nullptr, comm, sp),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sequence_length > 0")));
    return absl::OkStatus();
  }));
}

TEST(ColumnParallelLinearErrors, WrongSequencePieceNamesShape) {
  ExpectAllOk(RunTp(2, [&](Communicator& comm) -> absl::Status {
    ColumnParallelOptions options;
    options.sequence_parallel = true;
    options.sequence_length = kSeq;  // pieces 4 and 3
    LOOM_ASSIGN_OR_RETURN(
        ColumnParallelLinear fc,
        ColumnParallelLinear::Create(RandomTensor({kOut, kIn}, 1), nullptr, comm, options));
    EXPECT_THAT(fc.Forward(RandomTensor({kSeq, kBatch, kIn}, 2)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("input shape [7,2,6] must have dim 0 = ",
                                                comm.rank() == 0 ? 4 : 3))));
    return absl::OkStatus();
  }));
}

// f32 storage with bf16 products (a bf16 model's borrowed f32 views of bf16 values)
// computes bitwise what bf16 storage computes: Gemm rounds the weight as storage
// would have, and the input and output gradient as a bf16 layer does. Set at Create
// or later (SetGemmPrecision); a precision outside the enum is refused by value.
TEST(ColumnParallelLinearPrecision, F32StorageWithBf16ProductsEqualsBf16Storage) {
  ExpectAllOk(RunTp(2, [&](Communicator& comm) -> absl::Status {
    // bf16-exact weight and bias, so that f32 storage holds what bf16 storage does.
    LOOM_ASSIGN_OR_RETURN(const Tensor w16, RandomTensor({kOut, kIn}, 1).ConvertTo(DType::kBF16));
    LOOM_ASSIGN_OR_RETURN(const Tensor b16, RandomTensor({kOut}, 2).ConvertTo(DType::kBF16));
    LOOM_ASSIGN_OR_RETURN(const Tensor w, w16.ConvertTo(DType::kF32));
    LOOM_ASSIGN_OR_RETURN(const Tensor b, b16.ConvertTo(DType::kF32));
    const Tensor x = RandomTensor({kSeq, kBatch, kIn}, 3);
    ColumnParallelOptions storage;
    storage.weight_dtype = DType::kBF16;
    ColumnParallelOptions products;
    products.precision = GemmPrecision::kBf16;
    LOOM_ASSIGN_OR_RETURN(ColumnParallelLinear by_storage,
                          ColumnParallelLinear::Create(w, &b, comm, storage));
    LOOM_ASSIGN_OR_RETURN(ColumnParallelLinear by_option,
                          ColumnParallelLinear::Create(w, &b, comm, products));
    LOOM_ASSIGN_OR_RETURN(ColumnParallelLinear by_setter,
                          ColumnParallelLinear::Create(w, &b, comm, {}));
    EXPECT_EQ(by_setter.gemm_precision(), GemmPrecision::kF32);
    LOOM_RETURN_IF_ERROR(by_setter.SetGemmPrecision(GemmPrecision::kBf16));
    for (ColumnParallelLinear* layer : {&by_storage, &by_option, &by_setter}) {
      EXPECT_EQ(layer->gemm_precision(), GemmPrecision::kBf16);
    }
    LOOM_ASSIGN_OR_RETURN(Tensor y, by_storage.Forward(x));
    for (ColumnParallelLinear* layer : {&by_option, &by_setter}) {
      LOOM_ASSIGN_OR_RETURN(Tensor y2, layer->Forward(x));
      EXPECT_EQ(y2.ToF32(), y.ToF32());
    }
    // A bf16 layer keeps its input for the weight gradient as bf16 only.
    for (ColumnParallelLinear* layer : {&by_storage, &by_option, &by_setter}) {
      EXPECT_EQ(layer->saved_activation_bytes(), kSeq * kBatch * kIn * sizeof(BFloat16));
    }
    LOOM_ASSIGN_OR_RETURN(Tensor dx, by_storage.Backward(y));
    for (ColumnParallelLinear* layer : {&by_option, &by_setter}) {
      LOOM_ASSIGN_OR_RETURN(Tensor dx2, layer->Backward(y));
      EXPECT_EQ(dx2.ToF32(), dx.ToF32());
      EXPECT_EQ(layer->weight_grad().ToF32(), by_storage.weight_grad().ToF32());
    }
    const GemmPrecision bad = static_cast<GemmPrecision>(9);
    EXPECT_THAT(
        by_setter.SetGemmPrecision(bad),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 HasSubstr("ColumnParallelLinear: GEMM precision 9 is neither kF32 nor kBf16")));
    products.precision = bad;
    EXPECT_THAT(ColumnParallelLinear::Create(w, &b, comm, products),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("GEMM precision 9")));
    return absl::OkStatus();
  }));
}

}  // namespace
}  // namespace loom
