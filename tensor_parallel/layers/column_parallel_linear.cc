#include "tensor_parallel/layers/column_parallel_linear.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "tensor_parallel/layers/gemm.h"
#include "tensor_parallel/layers/internal/layer_math.h"
#include "tensor_parallel/layers/internal/sharded_comm.h"

namespace loom {

using tp_layers_internal::AddBias;
using tp_layers_internal::AllGatherVInto;
using tp_layers_internal::AllReduceSum;
using tp_layers_internal::CheckActivation;
using tp_layers_internal::ComputeValues;
using tp_layers_internal::KeepOperand;
using tp_layers_internal::Product;
using tp_layers_internal::RoundedOperand;
using tp_layers_internal::WeightInput;
using tp_layers_internal::GatherLastDim;
using tp_layers_internal::ReduceScatterV;
using tp_layers_internal::ShardCounts;
using tp_layers_internal::SumRows;
using tp_layers_internal::NewOutput;
using tp_layers_internal::ToTensor;

namespace {

constexpr char kName[] = "ColumnParallelLinear";

absl::Status CheckOptions(const ColumnParallelOptions& options) {
  LOOM_RETURN_IF_ERROR(tp_layers_internal::CheckLinearOptions(
      options.weight_dtype, options.precision, options.sequence_parallel, options.sequence_length,
      kName));
  if (options.sequence_parallel && options.gather_output) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": gather_output cannot be combined with sequence_parallel"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ColumnParallelLinear> ColumnParallelLinear::Create(
    const Tensor& full_weight, const Tensor* full_bias, Communicator& tp,
    const ColumnParallelOptions& options) {
  LOOM_RETURN_IF_ERROR(CheckOptions(options));
  if (full_weight.rank() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        kName, ": weight shape ", ShapeString(full_weight.shape()), " must be [out, in]"));
  }
  const int64_t out = full_weight.dim(0);
  if (full_bias != nullptr && full_bias->shape() != std::vector<int64_t>{out}) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": bias shape ",
                                                   ShapeString(full_bias->shape()),
                                                   " must be [", out, "] for weight ",
                                                   ShapeString(full_weight.shape())));
  }
  const ShardExtent extent = ShardExtentOf(out, tp.size(), tp.rank(), options.rule);
  LOOM_ASSIGN_OR_RETURN(Tensor weight, full_weight.Slice(0, extent.offset, extent.length));
  Tensor bias;
  if (full_bias != nullptr) {
    LOOM_ASSIGN_OR_RETURN(bias, full_bias->Slice(0, extent.offset, extent.length));
  }
  return FromShard(weight, full_bias != nullptr ? &bias : nullptr,
                   ShardCounts(out, tp.size(), options.rule, 1), tp, options);
}

absl::StatusOr<ColumnParallelLinear> ColumnParallelLinear::FromShard(
    const Tensor& local_weight, const Tensor* local_bias, std::vector<int64_t> out_widths,
    Communicator& tp, const ColumnParallelOptions& options) {
  LOOM_RETURN_IF_ERROR(CheckOptions(options));
  if (static_cast<int>(out_widths.size()) != tp.size()) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": ", out_widths.size(),
                                                   " output widths for tp = ", tp.size()));
  }
  const int64_t local_out = out_widths[static_cast<size_t>(tp.rank())];
  if (local_weight.rank() != 2 || local_weight.dim(0) != local_out) {
    return absl::InvalidArgumentError(absl::StrCat(
        kName, ": weight shard shape ", ShapeString(local_weight.shape()), " must be [",
        local_out, ", in] on rank ", tp.rank(), " (widths ", absl::StrJoin(out_widths, ","), ")"));
  }
  if (local_bias != nullptr && local_bias->shape() != std::vector<int64_t>{local_out}) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": bias shard shape ",
                                                   ShapeString(local_bias->shape()),
                                                   " must be [", local_out, "]"));
  }
  ColumnParallelLinear layer;
  layer.tp_ = &tp;
  layer.rank_ = tp.rank();
  layer.options_ = options;
  layer.in_ = local_weight.dim(1);
  layer.out_widths_ = std::move(out_widths);
  LOOM_ASSIGN_OR_RETURN(layer.weight_, local_weight.ConvertTo(options.weight_dtype));
  if (local_bias != nullptr) {
    LOOM_ASSIGN_OR_RETURN(layer.bias_, local_bias->ConvertTo(options.weight_dtype));
    layer.has_bias_ = true;
  }
  return layer;
}

absl::StatusOr<Tensor> ColumnParallelLinear::Forward(const Tensor& input) {
  const bool sp = options_.sequence_parallel;
  const int64_t expected_dim0 =
      sp ? ShardExtentOf(options_.sequence_length, tp_->size(), rank_, options_.rule).length : -1;
  LOOM_RETURN_IF_ERROR(CheckActivation(input, in_, expected_dim0, kName).status());
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> x, input.As<float>());
  std::vector<int64_t> full_shape = input.shape();
  if (sp) {
    // Rows of one sequence position (the batch): the unit of the sequence split.
    int64_t per_position = 1;
    for (int d = 1; d + 1 < input.rank(); ++d) per_position *= input.dim(d);
    full_shape[0] = options_.sequence_length;
    const std::vector<int64_t> counts =
        ShardCounts(options_.sequence_length, tp_->size(), options_.rule, per_position * in_);
    LOOM_ASSIGN_OR_RETURN(AlignedBuffer<float> whole,
                          AlignedBuffer<float>::CreateUninitialized(
                              static_cast<size_t>(options_.sequence_length * per_position * in_)));
    LOOM_RETURN_IF_ERROR(AllGatherVInto(*tp_, x, counts, tally_, whole.span()));
    LOOM_ASSIGN_OR_RETURN(state_.input, KeepOperand(std::move(whole), gemm_precision()));
  } else {
    LOOM_ASSIGN_OR_RETURN(state_.input, KeepOperand(x, gemm_precision()));
  }
  state_.rows = 1;
  for (size_t d = 0; d + 1 < full_shape.size(); ++d) state_.rows *= full_shape[d];
  const int64_t rows = state_.rows;
  const int64_t out_local = out_features_local();
  std::vector<float> weight_scratch;
  LOOM_ASSIGN_OR_RETURN(const absl::Span<const float> w,
                        ComputeValues(borrowed_, false, weight_, weight_scratch, kName));
  state_.input_shape = input.shape();
  state_.output_shape = full_shape;
  state_.output_shape.back() = out_local;
  // The product goes straight into the output tensor (no copy) unless it is gathered.
  LOOM_ASSIGN_OR_RETURN(tp_layers_internal::Output local, NewOutput(state_.output_shape));
  std::vector<float> bias_scratch;
  absl::Span<const float> b;
  if (has_bias_) {
    LOOM_ASSIGN_OR_RETURN(b, ComputeValues(borrowed_, true, bias_, bias_scratch, kName));
  }
  // The bias in the product (a bf16 one adds it in its epilogue; the same bits).
  LOOM_RETURN_IF_ERROR(tp_layers_internal::ProductWithBias(
      gemm_precision(), state_.input.View(rows, in_), Transpose::kNo,
      WeightInput(gemm_precision(), borrowed_, Dense(w, out_local, in_)), Transpose::kYes,
      Dense(local.values, rows, out_local), b));
  if (options_.gather_output) {
    LOOM_ASSIGN_OR_RETURN(std::vector<float> y,
                          GatherLastDim(*tp_, local.values, rows, out_widths_, tally_));
    state_.output_shape.back() = 0;
    for (int64_t width : out_widths_) state_.output_shape.back() += width;
    state_.valid = true;
    return ToTensor(state_.output_shape, y);
  }
  state_.valid = true;
  return std::move(local.tensor);
}

absl::StatusOr<absl::Span<const float>> ColumnParallelLinear::LocalGradient(
    const Tensor& grad_output, std::vector<float>& storage) const {
  LOOM_RETURN_IF_ERROR(
      tp_layers_internal::CheckGradient(kName, state_.valid, grad_output, state_.output_shape));
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> g_all, grad_output.As<float>());
  if (!options_.gather_output) return g_all;
  // The gather's backward: keep this rank's columns (no communication).
  const int64_t out_local = out_features_local();
  int64_t col = 0;
  for (int r = 0; r < rank_; ++r) col += out_widths_[static_cast<size_t>(r)];
  const int64_t width = state_.output_shape.back();
  storage.resize(static_cast<size_t>(state_.rows * out_local));
  for (int64_t i = 0; i < state_.rows; ++i) {
    std::copy_n(g_all.begin() + i * width + col, out_local, storage.begin() + i * out_local);
  }
  return absl::Span<const float>(storage);
}

std::vector<float> ColumnParallelLinear::BiasGradient(absl::Span<const float> g) const {
  return has_bias_ ? SumRows(g, out_features_local()) : std::vector<float>();
}

absl::Status ColumnParallelLinear::WeightGradient(const GemmBf16Input& g, const GemmBf16Input& x,
                                                  absl::Span<const float> bias_grad,
                                                  absl::Span<float> into) {
  const int64_t out_local = out_features_local();
  // dW_local = g^T x: [out_local, rows] x [rows, in].
  LOOM_ASSIGN_OR_RETURN(tp_layers_internal::Output dw,
                        tp_layers_internal::WeightGradOutput(into, out_local, in_, kName));
  LOOM_RETURN_IF_ERROR(Product(gemm_precision(), g, Transpose::kYes, x, Transpose::kNo,
                               Dense(dw.values, out_local, in_)));
  weight_grad_ = std::move(dw.tensor);
  if (has_bias_) {
    LOOM_ASSIGN_OR_RETURN(bias_grad_, ToTensor({out_local}, bias_grad));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> ColumnParallelLinear::InputGradient(const GemmBf16Input& g) {
  const int64_t out_local = out_features_local();
  const int64_t rows = state_.rows;
  // dx = g W_local: this rank's share of the input gradient, summed over ranks.
  std::vector<float> weight_scratch;
  LOOM_ASSIGN_OR_RETURN(const absl::Span<const float> w,
                        ComputeValues(borrowed_, false, weight_, weight_scratch, kName));
  const std::vector<int64_t> whole_shape =
      options_.sequence_parallel ? std::vector<int64_t>{rows, in_} : state_.input_shape;
  LOOM_ASSIGN_OR_RETURN(tp_layers_internal::Output dx, NewOutput(whole_shape));
  LOOM_RETURN_IF_ERROR(Product(gemm_precision(), g, Transpose::kNo,
                               WeightInput(gemm_precision(), borrowed_, Dense(w, out_local, in_)),
                               Transpose::kNo, Dense(dx.values, rows, in_)));
  if (options_.sequence_parallel) {
    const int64_t per_position = rows / options_.sequence_length;
    LOOM_ASSIGN_OR_RETURN(std::vector<float> mine,
                          ReduceScatterV(*tp_, dx.values,
                                         ShardCounts(options_.sequence_length, tp_->size(),
                                                     options_.rule, per_position * in_),
                                         tally_));
    return ToTensor(state_.input_shape, mine);
  }
  LOOM_RETURN_IF_ERROR(AllReduceSum(*tp_, dx.values, tally_));
  return std::move(dx.tensor);
}

// In kBf16 the output gradient is rounded once for both of its products (and kept
// so in a split backward's work); the bias gradient is summed from the f32 values.
absl::StatusOr<Tensor> ColumnParallelLinear::Backward(const Tensor& grad_output) {
  std::vector<float> storage;
  LOOM_ASSIGN_OR_RETURN(const absl::Span<const float> g, LocalGradient(grad_output, storage));
  std::vector<BFloat16> g16;
  LOOM_ASSIGN_OR_RETURN(const GemmBf16Input product_g,
                        RoundedOperand(g, state_.rows, out_features_local(), gemm_precision(), g16));
  LOOM_RETURN_IF_ERROR(
      WeightGradient(product_g, state_.input.View(state_.rows, in_), BiasGradient(g)));
  return InputGradient(product_g);
}

absl::StatusOr<Tensor> ColumnParallelLinear::BackwardInput(const Tensor& grad_output,
                                                           WeightGradWork& work) {
  std::vector<float> storage;
  LOOM_ASSIGN_OR_RETURN(const absl::Span<const float> g, LocalGradient(grad_output, storage));
  std::vector<BFloat16> g16;
  LOOM_ASSIGN_OR_RETURN(const GemmBf16Input product_g,
                        RoundedOperand(g, state_.rows, out_features_local(), gemm_precision(), g16));
  LOOM_ASSIGN_OR_RETURN(Tensor dx, InputGradient(product_g));
  LOOM_ASSIGN_OR_RETURN(work, tp_layers_internal::LinearWork(std::move(state_.input), g,
                                                              std::move(g16), has_bias_ ? out_features_local() : 0,
                                                              state_.rows));
  ReleaseActivations();
  return dx;
}

absl::Status ColumnParallelLinear::BackwardWeight(const WeightGradWork& work,
                                                  absl::Span<float> weight_grad_into) {
  const int64_t out_local = out_features_local();
  LOOM_RETURN_IF_ERROR(tp_layers_internal::CheckWeightGradWork(
      kName, work, in_, out_local, has_bias_ ? out_local : 0));
  return WeightGradient(tp_layers_internal::WorkGradient(work, out_local),
                        tp_layers_internal::WorkInput(work, in_),
                        tp_layers_internal::WorkBiasGradient(work, has_bias_ ? out_local : 0),
                        weight_grad_into);
}

absl::Status ColumnParallelLinear::BorrowWeights(absl::Span<const float> weight,
                                          absl::Span<const float> bias,
                                          absl::Span<const BFloat16> weight_bf16) {
  return tp_layers_internal::Borrow(borrowed_, weight, bias, weight_bf16,
                                    out_features_local() * in_,
                                    has_bias_ ? out_features_local() : 0, kName);
}

absl::Status ColumnParallelLinear::SetGemmPrecision(GemmPrecision precision) {
  LOOM_RETURN_IF_ERROR(tp_layers_internal::CheckPrecision(precision, kName));
  options_.precision = precision;
  return absl::OkStatus();
}

}  // namespace loom
