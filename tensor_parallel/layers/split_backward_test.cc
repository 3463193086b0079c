// Split backward (weight_grad_work.h) of every layer with weights, for tp = 1..3
// (3 gives uneven pieces), with and without sequence parallelism, f32 and bf16
// storage: BackwardInput then BackwardWeight gives bitwise the input and weight
// gradients of Backward, with another microbatch's Forward and BackwardInput
// between them and the weight gradients taken in either order; BackwardInput
// frees the layer's forward state; a work of another shape is refused by name.
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor_parallel/layers/column_parallel_linear.h"
#include "tensor_parallel/layers/internal/tp_testing.h"
#include "tensor_parallel/layers/parallel_self_attention.h"
#include "tensor_parallel/layers/row_parallel_linear.h"
#include "tensor_parallel/layers/vocab_parallel_embedding.h"
#include "tensor_parallel/layers/weight_grad_work.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using tp_layers_testing::ExpectAllOk;
using tp_layers_testing::RandomTensor;
using tp_layers_testing::RunTp;

constexpr int64_t kSeq = 5, kBatch = 2, kIn = 6, kOut = 9, kHeads = 3, kHeadDim = 2;

// ExpectSameBits compares two tensors' values bit for bit (so -0 differs from 0).
void ExpectSameBits(const Tensor& actual, const Tensor& expected, const std::string& what) {
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  const std::vector<float> a = actual.ToF32(), e = expected.ToF32();
  ASSERT_EQ(a.size(), e.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t ab, eb;
    std::memcpy(&ab, &a[i], sizeof(ab));
    std::memcpy(&eb, &e[i], sizeof(eb));
    if (ab != eb) {
      ADD_FAILURE() << what << ": element " << i << " is " << a[i] << ", expected " << e[i];
      return;
    }
  }
}

// Clones returns copies of tensors (Tensor is move-only).
std::vector<Tensor> Clones(std::initializer_list<const Tensor*> tensors) {
  std::vector<Tensor> out;
  for (const Tensor* t : tensors) out.push_back(t->Clone());
  return out;
}

// One microbatch's gradients from a plain Backward.
struct Gradients {
  Tensor dx;
  std::vector<Tensor> weights;  // each weight's and bias's gradient, in a fixed order
};

// A layer under test, type-erased: its forward state is the only thing the
// checks below drive.
struct LayerOps {
  std::function<absl::StatusOr<Tensor>(const Tensor& x)> forward;
  std::function<absl::StatusOr<Tensor>(const Tensor& dy)> backward;
  std::function<absl::StatusOr<Tensor>(const Tensor& dy, int mb)> backward_input;
  std::function<absl::Status(int mb)> backward_weight;
  std::function<std::vector<Tensor>()> weight_grads;
  std::function<size_t()> saved_bytes;
};

// CheckSplitMatchesBackward runs microbatches 0 and 1 through `plain` with
// Backward, and through `split` interleaved as a zero-bubble schedule would
// (F0 I0 F1 I1 W then W), and compares every gradient bitwise.
absl::Status CheckSplitMatchesBackward(LayerOps plain, LayerOps split, const Tensor (&x)[2],
                                       const Tensor (&dy)[2], bool weights_reversed,
                                       const std::string& where) {
  Gradients expected[2];
  for (int mb = 0; mb < 2; ++mb) {
    LOOM_RETURN_IF_ERROR(plain.forward(x[mb]).status());
    LOOM_ASSIGN_OR_RETURN(expected[mb].dx, plain.backward(dy[mb]));
    expected[mb].weights = plain.weight_grads();
  }
  Tensor dx[2];
  for (int mb = 0; mb < 2; ++mb) {
    LOOM_RETURN_IF_ERROR(split.forward(x[mb]).status());
    LOOM_ASSIGN_OR_RETURN(dx[mb], split.backward_input(dy[mb], mb));
    EXPECT_EQ(split.saved_bytes(), 0u) << where << " mb " << mb << ": forward state kept";
    EXPECT_THAT(split.backward(dy[mb]), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                 HasSubstr("Backward before Forward")))
        << where;
    ExpectSameBits(dx[mb], expected[mb].dx, absl::StrCat(where, " dx of mb ", mb));
  }
  for (int k = 0; k < 2; ++k) {
    const int mb = weights_reversed ? 1 - k : k;
    LOOM_RETURN_IF_ERROR(split.backward_weight(mb));
    const std::vector<Tensor> got = split.weight_grads();
    EXPECT_EQ(got.size(), expected[mb].weights.size()) << where;
    for (size_t i = 0; i < got.size() && i < expected[mb].weights.size(); ++i) {
      ExpectSameBits(got[i], expected[mb].weights[i],
                     absl::StrCat(where, " weight gradient ", i, " of mb ", mb));
    }
  }
  return absl::OkStatus();
}

using Param = std::tuple<int /*tp*/, bool /*sequence parallel*/, DType>;

class SplitBackwardTest : public ::testing::TestWithParam<Param> {};

// LinearOps wraps a column- or row-parallel layer and keeps its works.
template <typename Layer>
LayerOps LinearOps(Layer& layer, WeightGradWork (&works)[2]) {
  LayerOps ops;
  ops.forward = [&layer](const Tensor& x) { return layer.Forward(x); };
  ops.backward = [&layer](const Tensor& dy) { return layer.Backward(dy); };
  ops.backward_input = [&layer, &works](const Tensor& dy, int mb) {
    return layer.BackwardInput(dy, works[mb]);
  };
  ops.backward_weight = [&layer, &works](int mb) { return layer.BackwardWeight(works[mb]); };
  ops.weight_grads = [&layer] {
    return Clones({&layer.weight_grad(), &layer.bias_grad()});
  };
  ops.saved_bytes = [&layer] { return layer.saved_activation_bytes(); };
  return ops;
}

// LinearOpsInto is LinearOps with BackwardWeight writing the weight gradient into
// `into` (as into a ParameterSource::GradientSlot), filled with NaN before each
// call so that an element left unwritten shows; weight_grad() must stay empty.
template <typename Layer>
LayerOps LinearOpsInto(Layer& layer, WeightGradWork (&works)[2], std::vector<float>& into) {
  LayerOps ops = LinearOps(layer, works);
  ops.backward_weight = [&layer, &works, &into](int mb) {
    into.assign(static_cast<size_t>(layer.weight().numel()),
                std::numeric_limits<float>::quiet_NaN());
    return layer.BackwardWeight(works[mb], absl::MakeSpan(into));
  };
  ops.weight_grads = [&layer, &into] {
    EXPECT_EQ(layer.weight_grad().numel(), 0) << "a weight gradient written elsewhere is kept";
    std::vector<Tensor> out;
    out.push_back(*Tensor::FromValues(layer.weight().shape(), into));
    out.push_back(layer.bias_grad().Clone());
    return out;
  };
  return ops;
}

TEST_P(SplitBackwardTest, ColumnParallelLinear) {
  // Named copies, not a structured binding: clang 14 cannot capture those in lambdas.
  const auto tp = std::get<0>(GetParam());
  const auto sp = std::get<1>(GetParam());
  const auto dtype = std::get<2>(GetParam());
  const Tensor w = RandomTensor({kOut, kIn}, 1), b = RandomTensor({kOut}, 2);
  for (const bool gather : {false, true}) {
    if (sp && gather) continue;
    ExpectAllOk(RunTp(tp, [&](Communicator& comm) -> absl::Status {
      const std::string where = absl::StrCat("rank ", comm.rank(), gather ? " gather" : "");
      ColumnParallelOptions options;
      options.gather_output = gather;
      options.sequence_parallel = sp;
      options.sequence_length = kSeq;
      options.weight_dtype = dtype;
      LOOM_ASSIGN_OR_RETURN(ColumnParallelLinear plain,
                            ColumnParallelLinear::Create(w, &b, comm, options));
      LOOM_ASSIGN_OR_RETURN(ColumnParallelLinear split,
                            ColumnParallelLinear::Create(w, &b, comm, options));
      const int64_t rows = sp ? ShardExtentOf(kSeq, tp, comm.rank(), options.rule).length : kSeq;
      const int64_t out = gather ? kOut : plain.out_features_local();
      const Tensor x[2] = {RandomTensor({rows, kBatch, kIn}, 3),
                           RandomTensor({rows, kBatch, kIn}, 4)};
      const Tensor dy[2] = {RandomTensor({kSeq, kBatch, out}, 5),
                            RandomTensor({kSeq, kBatch, out}, 6)};
      WeightGradWork plain_works[2], works[2];
      std::vector<float> into;
      for (const bool reversed : {false, true}) {
        LOOM_RETURN_IF_ERROR(CheckSplitMatchesBackward(LinearOps(plain, plain_works),
                                                       LinearOps(split, works), x, dy, reversed,
                                                       where));
        LOOM_RETURN_IF_ERROR(CheckSplitMatchesBackward(LinearOps(plain, plain_works),
                                                       LinearOpsInto(split, works, into), x, dy,
                                                       reversed, where + " into a slot"));
      }
      return absl::OkStatus();
    }));
  }
}

TEST_P(SplitBackwardTest, RowParallelLinear) {
  // Named copies, not a structured binding: clang 14 cannot capture those in lambdas.
  const auto tp = std::get<0>(GetParam());
  const auto sp = std::get<1>(GetParam());
  const auto dtype = std::get<2>(GetParam());
  const Tensor w = RandomTensor({kOut, kIn}, 11), b = RandomTensor({kOut}, 12);
  ExpectAllOk(RunTp(tp, [&](Communicator& comm) -> absl::Status {
    const std::string where = absl::StrCat("rank ", comm.rank());
    RowParallelOptions options;
    options.sequence_parallel = sp;
    options.sequence_length = kSeq;
    options.weight_dtype = dtype;
    LOOM_ASSIGN_OR_RETURN(RowParallelLinear plain, RowParallelLinear::Create(w, &b, comm, options));
    LOOM_ASSIGN_OR_RETURN(RowParallelLinear split, RowParallelLinear::Create(w, &b, comm, options));
    const int64_t in = plain.in_features_local();
    const int64_t rows = sp ? ShardExtentOf(kSeq, tp, comm.rank(), options.rule).length : kSeq;
    const Tensor x[2] = {RandomTensor({kSeq, kBatch, in}, 13), RandomTensor({kSeq, kBatch, in}, 14)};
    const Tensor dy[2] = {RandomTensor({rows, kBatch, kOut}, 15),
                          RandomTensor({rows, kBatch, kOut}, 16)};
    WeightGradWork plain_works[2], works[2];
    std::vector<float> into;
    for (const bool reversed : {false, true}) {
      LOOM_RETURN_IF_ERROR(CheckSplitMatchesBackward(
          LinearOps(plain, plain_works), LinearOps(split, works), x, dy, reversed, where));
      LOOM_RETURN_IF_ERROR(CheckSplitMatchesBackward(LinearOps(plain, plain_works),
                                                     LinearOpsInto(split, works, into), x, dy,
                                                     reversed, where + " into a slot"));
    }
    return absl::OkStatus();
  }));
}

TEST_P(SplitBackwardTest, ParallelSelfAttention) {
  // Named copies, not a structured binding: clang 14 cannot capture those in lambdas.
  const auto tp = std::get<0>(GetParam());
  const auto sp = std::get<1>(GetParam());
  const auto dtype = std::get<2>(GetParam());
  constexpr int64_t h = kHeads * kHeadDim;
  const Tensor wqkv = RandomTensor({3 * h, h}, 21), bqkv = RandomTensor({3 * h}, 22);
  const Tensor wo = RandomTensor({h, h}, 23), bo = RandomTensor({h}, 24);
  ExpectAllOk(RunTp(tp, [&](Communicator& comm) -> absl::Status {
    const std::string where = absl::StrCat("rank ", comm.rank());
    ParallelSelfAttentionOptions options;
    options.num_heads = kHeads;
    options.sequence_parallel = sp;
    options.sequence_length = kSeq;
    options.weight_dtype = dtype;
    LOOM_ASSIGN_OR_RETURN(ParallelSelfAttention plain,
                          ParallelSelfAttention::Create(wqkv, &bqkv, wo, &bo, comm, options));
    LOOM_ASSIGN_OR_RETURN(ParallelSelfAttention split,
                          ParallelSelfAttention::Create(wqkv, &bqkv, wo, &bo, comm, options));
    const int64_t rows = sp ? ShardExtentOf(kSeq, tp, comm.rank(), options.rule).length : kSeq;
    const Tensor x[2] = {RandomTensor({rows, kBatch, h}, 25), RandomTensor({rows, kBatch, h}, 26)};
    const Tensor dy[2] = {RandomTensor({rows, kBatch, h}, 27), RandomTensor({rows, kBatch, h}, 28)};
    AttentionWeightGradWork works[2];
    auto ops = [&](ParallelSelfAttention& attn) {
      LayerOps o;
      o.forward = [&attn](const Tensor& in) { return attn.Forward(in); };
      o.backward = [&attn](const Tensor& g) { return attn.Backward(g); };
      o.backward_input = [&attn, &works](const Tensor& g, int mb) {
        return attn.BackwardInput(g, works[mb]);
      };
      o.backward_weight = [&attn, &works](int mb) { return attn.BackwardWeight(works[mb]); };
      o.weight_grads = [&attn] {
        return Clones({&attn.qkv().weight_grad(), &attn.qkv().bias_grad(),
                       &attn.out().weight_grad(), &attn.out().bias_grad()});
      };
      o.saved_bytes = [&attn] { return attn.saved_activation_bytes(); };
      return o;
    };
    for (const bool reversed : {false, true}) {
      LOOM_RETURN_IF_ERROR(
          CheckSplitMatchesBackward(ops(plain), ops(split), x, dy, reversed, where));
    }
    return absl::OkStatus();
  }));
}

TEST_P(SplitBackwardTest, VocabParallelEmbedding) {
  // Named copies, not a structured binding: clang 14 cannot capture those in lambdas.
  const auto tp = std::get<0>(GetParam());
  const auto sp = std::get<1>(GetParam());
  const auto dtype = std::get<2>(GetParam());
  constexpr int64_t kVocab = 11, kHidden = 4;
  const Tensor table = RandomTensor({kVocab, kHidden}, 31);
  // Ids as a float tensor [s, b], so the generic forward takes a Tensor; repeated
  // ids accumulate.
  const std::vector<int64_t> ids[2] = {{3, 7, 3, 0, 10, 1, 2, 3, 9, 5},
                                       {4, 4, 8, 6, 0, 10, 1, 7, 2, 2}};
  ExpectAllOk(RunTp(tp, [&](Communicator& comm) -> absl::Status {
    const std::string where = absl::StrCat("rank ", comm.rank());
    VocabParallelEmbeddingOptions options;
    options.sequence_parallel = sp;
    options.weight_dtype = dtype;
    LOOM_ASSIGN_OR_RETURN(VocabParallelEmbedding plain,
                          VocabParallelEmbedding::Create(table, comm, options));
    LOOM_ASSIGN_OR_RETURN(VocabParallelEmbedding split,
                          VocabParallelEmbedding::Create(table, comm, options));
    const int64_t rows = sp ? ShardExtentOf(kSeq, tp, comm.rank(), options.rule).length : kSeq;
    LOOM_ASSIGN_OR_RETURN(const Tensor x0, Tensor::FromValues({2}, {0.0f, 0.0f}));
    LOOM_ASSIGN_OR_RETURN(const Tensor x1, Tensor::FromValues({2}, {1.0f, 1.0f}));
    const Tensor x[2] = {x0.Clone(), x1.Clone()};  // which microbatch's ids
    const Tensor dy[2] = {RandomTensor({rows, kBatch, kHidden}, 33),
                          RandomTensor({rows, kBatch, kHidden}, 34)};
    WeightGradWork works[2];
    auto ops = [&](VocabParallelEmbedding& emb) {
      LayerOps o;
      o.forward = [&emb, &ids](const Tensor& which) {
        return emb.Forward(ids[which.ToF32()[0] != 0.0f ? 1 : 0], {kSeq, kBatch});
      };
      // The embedding has no input gradient: its backward returns an empty tensor.
      o.backward = [&emb](const Tensor& g) -> absl::StatusOr<Tensor> {
        LOOM_RETURN_IF_ERROR(emb.Backward(g));
        return Tensor();
      };
      o.backward_input = [&emb, &works](const Tensor& g, int mb) -> absl::StatusOr<Tensor> {
        LOOM_RETURN_IF_ERROR(emb.BackwardInput(g, works[mb]));
        return Tensor();
      };
      o.backward_weight = [&emb, &works](int mb) { return emb.BackwardWeight(works[mb]); };
      o.weight_grads = [&emb] { return Clones({&emb.weight_grad()}); };
      o.saved_bytes = [&emb] { return emb.saved_activation_bytes(); };
      return o;
    };
    for (const bool reversed : {false, true}) {
      LOOM_RETURN_IF_ERROR(
          CheckSplitMatchesBackward(ops(plain), ops(split), x, dy, reversed, where));
    }
    return absl::OkStatus();
  }));
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  const auto [tp, sp, dtype] = info.param;
  return absl::StrCat("tp", tp, sp ? "_sp" : "", "_", DTypeName(dtype));
}

INSTANTIATE_TEST_SUITE_P(All, SplitBackwardTest,
                         ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Bool(),
                                            ::testing::Values(DType::kF32, DType::kBF16)),
                         ParamName);

TEST(SplitBackwardErrors, WorkOfAnotherShapeOrLayerIsRefused) {
  ExpectAllOk(RunTp(2, [&](Communicator& comm) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(ColumnParallelLinear fc,
                          ColumnParallelLinear::Create(RandomTensor({kOut, kIn}, 41), nullptr,
                                                       comm, {}));
    LOOM_ASSIGN_OR_RETURN(VocabParallelEmbedding emb,
                          VocabParallelEmbedding::Create(RandomTensor({7, kIn}, 42), comm, {}));
    LOOM_RETURN_IF_ERROR(fc.Forward(RandomTensor({3, kIn}, 43)).status());
    WeightGradWork work;
    EXPECT_THAT(fc.BackwardInput(RandomTensor({3, kOut}, 44), work),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("grad_output is f32 [3,9], Forward returned f32 [3,")));
    LOOM_RETURN_IF_ERROR(
        fc.BackwardInput(RandomTensor({3, fc.out_features_local()}, 44), work).status());
    EXPECT_EQ(work.rows, 3);
    EXPECT_EQ(work.bytes(), (3 * kIn + 3 * fc.out_features_local()) * sizeof(float));
    WeightGradWork short_work;
    short_work.rows = work.rows;
    LOOM_ASSIGN_OR_RETURN(short_work.input, AlignedBuffer<float>::Create(work.input.size()));
    std::copy(work.input.span().begin(), work.input.span().end(), short_work.input.data());
    LOOM_ASSIGN_OR_RETURN(short_work.grad_output,
                          AlignedBuffer<float>::Create(work.grad_output.size() - 1));
    EXPECT_THAT(fc.BackwardWeight(short_work),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("ColumnParallelLinear: weight-gradient work of 3 "
                                                "rows holds 18 + 0 (bf16) input values, ",
                                                3 * fc.out_features_local() - 1,
                                                " + 0 (bf16) gradient values, 0 bias gradient "
                                                "values and 0 ids"))));
    // The embedding refuses a linear layer's work, and the reverse.
    EXPECT_THAT(emb.BackwardWeight(work),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("VocabParallelEmbedding: weight-gradient work of 3 rows holds "
                                   "0 ids")));
    LOOM_RETURN_IF_ERROR(emb.Forward({1, 2, 6}).status());
    WeightGradWork emb_work;
    LOOM_RETURN_IF_ERROR(emb.BackwardInput(RandomTensor({3, kIn}, 45), emb_work));
    EXPECT_EQ(emb_work.ids, (std::vector<int64_t>{1, 2, 6}));
    EXPECT_THAT(fc.BackwardWeight(emb_work),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("and 3 ids")));
    // A place for the weight gradient of another size is refused by its counts.
    std::vector<float> wrong(static_cast<size_t>(fc.weight().numel()) + 1);
    EXPECT_THAT(fc.BackwardWeight(work, absl::MakeSpan(wrong)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("ColumnParallelLinear: BackwardWeight was given ",
                                                wrong.size(), " elements for the weight "
                                                "gradient, which has ",
                                                fc.out_features_local(), " x ", kIn))));
    LOOM_RETURN_IF_ERROR(fc.BackwardWeight(work));
    LOOM_RETURN_IF_ERROR(emb.BackwardWeight(emb_work));
    EXPECT_THAT(fc.BackwardInput(RandomTensor({3, fc.out_features_local()}, 44), work),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("before Forward")));
    return absl::OkStatus();
  }));
}

}  // namespace
}  // namespace loom
