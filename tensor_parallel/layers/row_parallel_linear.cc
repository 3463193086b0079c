#include "tensor_parallel/layers/row_parallel_linear.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "tensor_parallel/layers/gemm.h"
#include "tensor_parallel/layers/internal/layer_math.h"
#include "tensor_parallel/layers/internal/sharded_comm.h"

namespace loom {

using tp_layers_internal::AddBias;
using tp_layers_internal::AllGatherV;
using tp_layers_internal::AllReduceSum;
using tp_layers_internal::CheckActivation;
using tp_layers_internal::ComputeValues;
using tp_layers_internal::KeepOperand;
using tp_layers_internal::Product;
using tp_layers_internal::RoundedOperand;
using tp_layers_internal::WeightInput;
using tp_layers_internal::ReduceScatterV;
using tp_layers_internal::ShardCounts;
using tp_layers_internal::SumRows;
using tp_layers_internal::NewOutput;
using tp_layers_internal::ToTensor;

namespace {

constexpr char kName[] = "RowParallelLinear";

absl::Status CheckOptions(const RowParallelOptions& options) {
  return tp_layers_internal::CheckLinearOptions(options.weight_dtype, options.precision,
                                                options.sequence_parallel,
                                                options.sequence_length, kName);
}

}  // namespace

absl::StatusOr<RowParallelLinear> RowParallelLinear::Create(const Tensor& full_weight,
                                                            const Tensor* full_bias,
                                                            Communicator& tp,
                                                            const RowParallelOptions& options) {
  LOOM_RETURN_IF_ERROR(CheckOptions(options));
  if (full_weight.rank() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        kName, ": weight shape ", ShapeString(full_weight.shape()), " must be [out, in]"));
  }
  const ShardExtent extent = ShardExtentOf(full_weight.dim(1), tp.size(), tp.rank(), options.rule);
  LOOM_ASSIGN_OR_RETURN(Tensor weight, full_weight.Slice(1, extent.offset, extent.length));
  return FromShard(weight, full_bias, tp, options);
}

absl::StatusOr<RowParallelLinear> RowParallelLinear::FromShard(const Tensor& local_weight,
                                                               const Tensor* full_bias,
                                                               Communicator& tp,
                                                               const RowParallelOptions& options) {
  LOOM_RETURN_IF_ERROR(CheckOptions(options));
  if (local_weight.rank() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": weight shard shape ",
                                                   ShapeString(local_weight.shape()),
                                                   " must be [out, in_local]"));
  }
  const int64_t out = local_weight.dim(0);
  if (full_bias != nullptr && full_bias->shape() != std::vector<int64_t>{out}) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": bias shape ",
                                                   ShapeString(full_bias->shape()),
                                                   " must be [", out, "] for weight shard ",
                                                   ShapeString(local_weight.shape())));
  }
  RowParallelLinear layer;
  layer.tp_ = &tp;
  layer.rank_ = tp.rank();
  layer.options_ = options;
  layer.out_ = out;
  layer.in_local_ = local_weight.dim(1);
  LOOM_ASSIGN_OR_RETURN(layer.weight_, local_weight.ConvertTo(options.weight_dtype));
  if (full_bias != nullptr) {
    LOOM_ASSIGN_OR_RETURN(layer.bias_, full_bias->ConvertTo(options.weight_dtype));
    layer.has_bias_ = true;
  }
  return layer;
}

absl::StatusOr<Tensor> RowParallelLinear::Forward(const Tensor& input) {
  const bool sp = options_.sequence_parallel;
  LOOM_ASSIGN_OR_RETURN(const int64_t rows,
                        CheckActivation(input, in_local_, sp ? options_.sequence_length : -1,
                                        kName));
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> x, input.As<float>());
  LOOM_ASSIGN_OR_RETURN(state_.input, KeepOperand(x, gemm_precision()));
  state_.rows = rows;
  state_.per_position = 1;
  for (int d = 1; d + 1 < input.rank(); ++d) state_.per_position *= input.dim(d);
  std::vector<float> weight_scratch;
  LOOM_ASSIGN_OR_RETURN(const absl::Span<const float> w,
                        ComputeValues(borrowed_, false, weight_, weight_scratch, kName));
  state_.input_shape = input.shape();
  state_.output_shape = input.shape();
  state_.output_shape.back() = out_;
  // The partial product goes straight into the output tensor, which the all-reduce
  // sums in place (under sequence parallelism the scatter returns a new piece).
  LOOM_ASSIGN_OR_RETURN(tp_layers_internal::Output whole, NewOutput(state_.output_shape));
  std::vector<float> bias_scratch;
  absl::Span<const float> b;
  if (has_bias_) {
    LOOM_ASSIGN_OR_RETURN(b, ComputeValues(borrowed_, true, bias_, bias_scratch, kName));
  }
  // One rank sums nothing: its bias goes in the product (a bf16 one adds it in its
  // epilogue, the same bits). Several add it once, after the sum.
  const bool bias_in_product = tp_->size() == 1 && !sp;
  LOOM_RETURN_IF_ERROR(tp_layers_internal::ProductWithBias(
      gemm_precision(), state_.input.View(rows, in_local_), Transpose::kNo,
      WeightInput(gemm_precision(), borrowed_, Dense(w, out_, in_local_)), Transpose::kYes,
      Dense(whole.values, rows, out_), bias_in_product ? b : absl::Span<const float>()));
  Tensor out;
  if (sp) {
    state_.output_shape[0] =
        ShardExtentOf(options_.sequence_length, tp_->size(), rank_, options_.rule).length;
    LOOM_ASSIGN_OR_RETURN(std::vector<float> mine,
                          ReduceScatterV(*tp_, whole.values,
                                         ShardCounts(options_.sequence_length, tp_->size(),
                                                     options_.rule, state_.per_position * out_),
                                         tally_));
    LOOM_ASSIGN_OR_RETURN(out, ToTensor(state_.output_shape, mine));
  } else {
    LOOM_RETURN_IF_ERROR(AllReduceSum(*tp_, whole.values, tally_));
    out = std::move(whole.tensor);
  }
  if (has_bias_ && !bias_in_product) AddBias(*out.As<float>(), b);
  state_.valid = true;
  return out;
}

absl::StatusOr<absl::Span<const float>> RowParallelLinear::WholeGradient(
    const Tensor& grad_output, std::vector<float>& storage) {
  LOOM_RETURN_IF_ERROR(
      tp_layers_internal::CheckGradient(kName, state_.valid, grad_output, state_.output_shape));
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> g, grad_output.As<float>());
  if (!options_.sequence_parallel) return g;
  LOOM_ASSIGN_OR_RETURN(storage, AllGatherV(*tp_, g,
                                            ShardCounts(options_.sequence_length, tp_->size(),
                                                        options_.rule, state_.per_position * out_),
                                            tally_));
  return absl::Span<const float>(storage);
}

std::vector<float> RowParallelLinear::BiasGradient(absl::Span<const float> g) const {
  return has_bias_ ? SumRows(g, out_) : std::vector<float>();
}

absl::Status RowParallelLinear::WeightGradient(const GemmBf16Input& g, const GemmBf16Input& x,
                                               absl::Span<const float> bias_grad,
                                               absl::Span<float> into) {
  // The whole gradient is on every rank (gathered under sequence parallelism), so
  // the bias gradient is complete here and needs no all-reduce.
  if (has_bias_) {
    LOOM_ASSIGN_OR_RETURN(bias_grad_, ToTensor({out_}, bias_grad));
  }
  LOOM_ASSIGN_OR_RETURN(tp_layers_internal::Output dw,
                        tp_layers_internal::WeightGradOutput(into, out_, in_local_, kName));
  LOOM_RETURN_IF_ERROR(Product(gemm_precision(), g, Transpose::kYes, x, Transpose::kNo,
                               Dense(dw.values, out_, in_local_)));
  weight_grad_ = std::move(dw.tensor);
  return absl::OkStatus();
}

absl::StatusOr<Tensor> RowParallelLinear::InputGradient(const GemmBf16Input& g) {
  std::vector<float> weight_scratch;
  LOOM_ASSIGN_OR_RETURN(const absl::Span<const float> w,
                        ComputeValues(borrowed_, false, weight_, weight_scratch, kName));
  LOOM_ASSIGN_OR_RETURN(tp_layers_internal::Output dx, NewOutput(state_.input_shape));
  LOOM_RETURN_IF_ERROR(Product(gemm_precision(), g, Transpose::kNo,
                               WeightInput(gemm_precision(), borrowed_, Dense(w, out_, in_local_)),
                               Transpose::kNo, Dense(dx.values, state_.rows, in_local_)));
  return std::move(dx.tensor);
}

// In kBf16 the whole output gradient is rounded once for both of its products (and
// kept so in a split backward's work); the bias gradient is summed from the f32 values.
absl::StatusOr<Tensor> RowParallelLinear::Backward(const Tensor& grad_output) {
  std::vector<float> storage;
  LOOM_ASSIGN_OR_RETURN(const absl::Span<const float> g, WholeGradient(grad_output, storage));
  std::vector<BFloat16> g16;
  LOOM_ASSIGN_OR_RETURN(const GemmBf16Input product_g,
                        RoundedOperand(g, state_.rows, out_, gemm_precision(), g16));
  LOOM_RETURN_IF_ERROR(
      WeightGradient(product_g, state_.input.View(state_.rows, in_local_), BiasGradient(g)));
  return InputGradient(product_g);
}

absl::StatusOr<Tensor> RowParallelLinear::BackwardInput(const Tensor& grad_output,
                                                        WeightGradWork& work) {
  std::vector<float> storage;
  LOOM_ASSIGN_OR_RETURN(const absl::Span<const float> g, WholeGradient(grad_output, storage));
  std::vector<BFloat16> g16;
  LOOM_ASSIGN_OR_RETURN(const GemmBf16Input product_g,
                        RoundedOperand(g, state_.rows, out_, gemm_precision(), g16));
  LOOM_ASSIGN_OR_RETURN(Tensor dx, InputGradient(product_g));
  LOOM_ASSIGN_OR_RETURN(work, tp_layers_internal::LinearWork(std::move(state_.input), g,
                                                              std::move(g16), has_bias_ ? out_ : 0,
                                                              state_.rows));
  ReleaseActivations();
  return dx;
}

absl::Status RowParallelLinear::BackwardWeight(const WeightGradWork& work,
                                               absl::Span<float> weight_grad_into) {
  LOOM_RETURN_IF_ERROR(tp_layers_internal::CheckWeightGradWork(kName, work, in_local_, out_,
                                                               has_bias_ ? out_ : 0));
  return WeightGradient(tp_layers_internal::WorkGradient(work, out_),
                        tp_layers_internal::WorkInput(work, in_local_),
                        tp_layers_internal::WorkBiasGradient(work, has_bias_ ? out_ : 0),
                        weight_grad_into);
}

absl::Status RowParallelLinear::BorrowWeights(absl::Span<const float> weight,
                                          absl::Span<const float> bias,
                                          absl::Span<const BFloat16> weight_bf16) {
  return tp_layers_internal::Borrow(borrowed_, weight, bias, weight_bf16, out_ * in_local_,
                                    has_bias_ ? out_ : 0, kName);
}

absl::Status RowParallelLinear::SetGemmPrecision(GemmPrecision precision) {
  LOOM_RETURN_IF_ERROR(tp_layers_internal::CheckPrecision(precision, kName));
  options_.precision = precision;
  return absl::OkStatus();
}

}  // namespace loom
