#include "tensor_parallel/layers/internal/layer_math.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/half_convert.h"
#include "core/parallel_for.h"
#include "core/status_macros.h"
#include "core/vector_math.h"

namespace loom {
namespace tp_layers_internal {

absl::Span<const float> F32Values(const Tensor& t, std::vector<float>& scratch) {
  if (t.dtype() == DType::kF32) return *t.As<float>();
  scratch = t.ToF32();
  return scratch;
}

absl::Status Borrow(BorrowedWeights& borrowed, absl::Span<const float> weight,
                    absl::Span<const float> bias, absl::Span<const BFloat16> weight_bf16,
                    int64_t weight_numel, int64_t bias_numel, const std::string& who) {
  // A weight lent in bf16 only (weight empty) is multiplied in bf16 only.
  const bool bf16_only = weight.empty() && static_cast<int64_t>(weight_bf16.size()) == weight_numel;
  if ((!bf16_only && static_cast<int64_t>(weight.size()) != weight_numel) ||
      static_cast<int64_t>(bias.size()) != bias_numel) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": BorrowWeights got ", weight.size(), " weight and ", bias.size(),
        " bias elements; this rank's shards have ", weight_numel, " and ", bias_numel));
  }
  if (!bf16_only && !weight_bf16.empty() && weight_bf16.size() != weight.size()) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": BorrowWeights got ", weight.size(),
                                                   " weight elements but a bf16 copy of ",
                                                   weight_bf16.size()));
  }
  borrowed.active = true;
  borrowed.weight = weight;
  borrowed.bias = bias;
  borrowed.weight_bf16 = weight_bf16;
  return absl::OkStatus();
}

GemmBf16Input LinearOperand::View(int64_t rows, int64_t cols) const {
  if (is_bf16) return ConstBf16MatrixView{bf16, rows, cols, cols};
  return Dense(f32.span(), rows, cols);
}

namespace {

// RoundOnThreads rounds `values` to bf16 into `out` (same size) on the rank's threads.
absl::Status RoundOnThreads(absl::Span<const float> values, absl::Span<BFloat16> out) {
  const int64_t n = static_cast<int64_t>(values.size());
  const int threads = static_cast<int>(
      std::clamp<int64_t>(n / kElementwiseGrain, 1, int64_t{ComputeThreads()}));
  return ParallelFor(n, threads, [&](int64_t first, int64_t last) {
    const size_t at = static_cast<size_t>(first), count = static_cast<size_t>(last - first);
    return ConvertF32ToBF16(values.subspan(at, count), out.subspan(at, count));
  });
}

}  // namespace

absl::StatusOr<LinearOperand> KeepOperand(AlignedBuffer<float> values, GemmPrecision precision) {
  LinearOperand operand;
  if (precision != GemmPrecision::kBf16) {
    operand.f32 = std::move(values);
    return operand;
  }
  return KeepOperand(values.span(), precision);  // rounded; `values` freed
}

absl::StatusOr<LinearOperand> KeepOperand(absl::Span<const float> values,
                                          GemmPrecision precision) {
  if (precision != GemmPrecision::kBf16) {
    LOOM_ASSIGN_OR_RETURN(AlignedBuffer<float> copy, OwnedValues(values));
    return KeepOperand(std::move(copy), precision);
  }
  LinearOperand operand;
  operand.is_bf16 = true;
  operand.bf16.resize(values.size());
  LOOM_RETURN_IF_ERROR(RoundOnThreads(values, absl::MakeSpan(operand.bf16)));
  return operand;
}

absl::StatusOr<GemmBf16Input> RoundedOperand(absl::Span<const float> values, int64_t rows,
                                             int64_t cols, GemmPrecision precision,
                                             std::vector<BFloat16>& rounded) {
  if (precision != GemmPrecision::kBf16) return GemmBf16Input(Dense(values, rows, cols));
  rounded.resize(values.size());
  LOOM_RETURN_IF_ERROR(RoundOnThreads(values, absl::MakeSpan(rounded)));
  return GemmBf16Input(Dense(absl::MakeConstSpan(rounded), rows, cols));
}

GemmBf16Input WeightInput(GemmPrecision precision, const BorrowedWeights& borrowed,
                          const ConstMatrixView& w) {
  if (precision != GemmPrecision::kBf16 || !borrowed.active || borrowed.weight_bf16.empty()) {
    return w;
  }
  return ConstBf16MatrixView{borrowed.weight_bf16, w.rows, w.cols, w.ld};
}

absl::Status Product(GemmPrecision precision, const GemmBf16Input& a, Transpose trans_a,
                     const GemmBf16Input& b, Transpose trans_b, MatrixView c) {
  if (a.is_bf16() || b.is_bf16()) return GemmBf16(a, trans_a, b, trans_b, c);
  return Gemm(a.f32(), trans_a, b.f32(), trans_b, c, 1.0f, 0.0f, precision);
}

absl::Status ProductWithBias(GemmPrecision precision, const GemmBf16Input& a, Transpose trans_a,
                             const GemmBf16Input& b, Transpose trans_b, MatrixView c,
                             absl::Span<const float> bias) {
  const bool bf16 = a.is_bf16() || b.is_bf16() || precision == GemmPrecision::kBf16;
  if (bf16 && !bias.empty()) return GemmBf16WithBias(a, trans_a, b, trans_b, c, bias);
  LOOM_RETURN_IF_ERROR(Product(precision, a, trans_a, b, trans_b, c));
  if (!bias.empty()) AddBias(c.data.first(static_cast<size_t>(c.rows * c.cols)), bias);
  return absl::OkStatus();
}

absl::StatusOr<absl::Span<const float>> ComputeValues(const BorrowedWeights& borrowed, bool bias,
                                                      const Tensor& own,
                                                      std::vector<float>& scratch,
                                                      const std::string& who) {
  if (borrowed.active) return bias ? borrowed.bias : borrowed.weight;
  if (borrowed.owned_dropped) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, ": its weights are borrowed (DropOwnedWeights) and none are lent now; "
                     "call BorrowWeights before Forward or Backward"));
  }
  return F32Values(own, scratch);
}

void AddBias(absl::Span<float> y, absl::Span<const float> bias) {
  const size_t cols = bias.size();
  if (cols == 0) return;
  const int64_t rows = static_cast<int64_t>(y.size() / cols);
  ParallelForEach(rows, std::max<int64_t>(1, kElementwiseGrain / static_cast<int64_t>(cols)),
                  [&](int64_t first, int64_t last) {
    for (size_t i = static_cast<size_t>(first) * cols; i < static_cast<size_t>(last) * cols;
         i += cols) {
      // Raw pointers: Debian's Abseil is hardened, and a Span's operator[] checks
      // every index, which keeps the loop scalar.
      float* const row = y.data() + i;
      const float* const b = bias.data();
      for (size_t j = 0; j < cols; ++j) row[j] += b[j];
    }
  });
}

std::vector<float> SumRows(absl::Span<const float> g, int64_t cols) {
  std::vector<float> sums(static_cast<size_t>(cols), 0.0f);
  if (cols == 0) return sums;
  const size_t width = static_cast<size_t>(cols);
  const int64_t rows = static_cast<int64_t>(g.size() / width);
  // Split by columns: each column is summed in row order by one thread, so the bits
  // do not depend on the thread count.
  ParallelForEach(cols, std::max<int64_t>(1, kElementwiseGrain / std::max<int64_t>(rows, 1)),
                  [&](int64_t first, int64_t last) {
    // Whole rows and columns within them by construction, so no error can come back.
    AddRowsInto(g.first(static_cast<size_t>(rows) * width), width, static_cast<size_t>(first),
                absl::MakeSpan(sums).subspan(static_cast<size_t>(first),
                                             static_cast<size_t>(last - first)))
        .IgnoreError();
  });
  return sums;
}

absl::StatusOr<Tensor> StoreSlice(const Tensor& full, int dim, int64_t offset, int64_t length,
                                  DType dtype) {
  LOOM_ASSIGN_OR_RETURN(Tensor piece, full.Slice(dim, offset, length));
  if (piece.dtype() == dtype) return piece;
  return piece.ConvertTo(dtype);
}

absl::StatusOr<Tensor> ToTensor(std::vector<int64_t> shape, absl::Span<const float> values) {
  return Tensor::FromValues(std::move(shape), values);
}

absl::StatusOr<Output> WeightGradOutput(absl::Span<float> into, int64_t rows, int64_t cols,
                                        const std::string& who) {
  if (into.empty()) return NewOutput({rows, cols});
  if (static_cast<int64_t>(into.size()) != rows * cols) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": BackwardWeight was given ", into.size(),
                                                   " elements for the weight gradient, which has ",
                                                   rows, " x ", cols));
  }
  Output out;
  out.values = into;
  return out;
}

absl::StatusOr<Output> NewOutput(std::vector<int64_t> shape) {
  Output out;
  LOOM_ASSIGN_OR_RETURN(out.tensor, Tensor::CreateUninitialized(std::move(shape)));
  // An f32 tensor, so As<float> cannot fail.
  out.values = *out.tensor.As<float>();
  return out;
}

absl::StatusOr<int64_t> CheckActivation(const Tensor& x, int64_t features, int64_t expected_dim0,
                                        const std::string& who) {
  if (x.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": input must be f32, got ",
                                                   DTypeName(x.dtype()), " of shape ",
                                                   ShapeString(x.shape())));
  }
  if (x.rank() < 2 || x.dim(x.rank() - 1) != features) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": input shape ", ShapeString(x.shape()),
                                                   " must be [..., ", features, "]"));
  }
  if (expected_dim0 >= 0 && x.dim(0) != expected_dim0) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": sequence-parallel input shape ", ShapeString(x.shape()), " must have dim 0 = ",
        expected_dim0, " (this rank's piece of the sequence)"));
  }
  int64_t rows = 1;
  for (int d = 0; d + 1 < x.rank(); ++d) rows *= x.dim(d);
  return rows;
}

absl::Status CheckStorage(DType dtype, const std::string& who) {
  if (dtype == DType::kF32 || dtype == DType::kBF16) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(who, ": weight storage must be f32 or bf16, got ", DTypeName(dtype)));
}

absl::Status CheckPrecision(GemmPrecision precision, const std::string& who) {
  if (precision == GemmPrecision::kF32 || precision == GemmPrecision::kBf16) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(who, ": GEMM precision ",
                                                 static_cast<int>(precision),
                                                 " is neither kF32 nor kBf16"));
}

absl::Status CheckSequenceParallel(bool sequence_parallel, int64_t sequence_length,
                                   const std::string& who) {
  if (!sequence_parallel || sequence_length > 0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(who, ": sequence_parallel needs sequence_length > 0, got ", sequence_length));
}

absl::Status CheckLinearOptions(DType weight_dtype, GemmPrecision precision,
                                bool sequence_parallel, int64_t sequence_length,
                                const std::string& who) {
  LOOM_RETURN_IF_ERROR(CheckStorage(weight_dtype, who));
  LOOM_RETURN_IF_ERROR(CheckPrecision(precision, who));
  return CheckSequenceParallel(sequence_parallel, sequence_length, who);
}

absl::Status CheckGradient(const std::string& who, bool has_forward, const Tensor& grad,
                           const std::vector<int64_t>& forward_shape, const std::string& name) {
  if (!has_forward) {
    return absl::FailedPreconditionError(absl::StrCat(who, ": Backward before Forward"));
  }
  if (grad.dtype() != DType::kF32 || grad.shape() != forward_shape) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ", name, " is ",
                                                   DTypeName(grad.dtype()), " ",
                                                   ShapeString(grad.shape()),
                                                   ", Forward returned f32 ",
                                                   ShapeString(forward_shape)));
  }
  return absl::OkStatus();
}

absl::StatusOr<AlignedBuffer<float>> OwnedValues(absl::Span<const float> view) {
  LOOM_ASSIGN_OR_RETURN(AlignedBuffer<float> out,
                        AlignedBuffer<float>::CreateUninitialized(view.size()));
  // On the rank's threads: a weight-gradient work keeps each linear layer's output
  // gradient, a copy on the critical path between two products.
  ParallelForEach(static_cast<int64_t>(view.size()), kElementwiseGrain,
                  [&](int64_t first, int64_t last) {
    std::copy(view.data() + first, view.data() + last, out.data() + first);
  });
  return out;
}

absl::StatusOr<WeightGradWork> LinearWork(LinearOperand input, absl::Span<const float> g,
                                          std::vector<BFloat16> g16, int64_t bias_cols,
                                          int64_t rows) {
  WeightGradWork work;
  work.input = std::move(input.f32);
  work.input_bf16 = std::move(input.bf16);
  if (g16.empty()) {
    LOOM_ASSIGN_OR_RETURN(work.grad_output, OwnedValues(g));
  } else {
    // The work keeps no f32 gradient, so its bias gradient is summed now.
    if (bias_cols > 0) work.bias_grad = SumRows(g, bias_cols);
    work.grad_output_bf16 = std::move(g16);
  }
  work.rows = rows;
  return work;
}

std::vector<float> WorkBiasGradient(const WeightGradWork& work, int64_t bias_cols) {
  if (bias_cols == 0) return {};
  return work.grad_output_bf16.empty() ? SumRows(work.grad_output, bias_cols) : work.bias_grad;
}

GemmBf16Input WorkInput(const WeightGradWork& work, int64_t in) {
  if (!work.input_bf16.empty()) return Dense(absl::MakeConstSpan(work.input_bf16), work.rows, in);
  return Dense(work.input.span(), work.rows, in);
}

GemmBf16Input WorkGradient(const WeightGradWork& work, int64_t out) {
  if (!work.grad_output_bf16.empty()) {
    return Dense(absl::MakeConstSpan(work.grad_output_bf16), work.rows, out);
  }
  return Dense(absl::MakeConstSpan(work.grad_output), work.rows, out);
}

absl::Status CheckWeightGradWork(const std::string& who, const WeightGradWork& work, int64_t in,
                                 int64_t out, int64_t bias_numel) {
  const auto size = [](const auto& v) { return static_cast<int64_t>(v.size()); };
  const int64_t inputs = size(work.input) + size(work.input_bf16);
  const int64_t grads = size(work.grad_output) + size(work.grad_output_bf16);
  const bool one_each = (work.input.empty() || work.input_bf16.empty()) &&
                        (work.grad_output.empty() || work.grad_output_bf16.empty());
  // A bf16 gradient comes with its bias gradient summed; an f32 one without.
  const int64_t bias_expected = work.grad_output_bf16.empty() ? 0 : bias_numel;
  if (work.rows < 0 || inputs != work.rows * in || grads != work.rows * out || !one_each ||
      size(work.bias_grad) != bias_expected || !work.ids.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": weight-gradient work of ", work.rows, " rows holds ", work.input.size(), " + ",
        work.input_bf16.size(), " (bf16) input values, ", work.grad_output.size(), " + ",
        work.grad_output_bf16.size(), " (bf16) gradient values, ", work.bias_grad.size(),
        " bias gradient values and ", work.ids.size(), " ids; this layer needs rows x ", in,
        " input values, rows x ", out, " gradient values (each f32 or bf16; with a bf16 one ",
        bias_numel, " bias gradient values) and no ids (a work from BackwardInput of this "
        "layer)"));
  }
  return absl::OkStatus();
}

}  // namespace tp_layers_internal
}  // namespace loom
