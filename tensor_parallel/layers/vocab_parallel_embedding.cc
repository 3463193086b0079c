#include "tensor_parallel/layers/vocab_parallel_embedding.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "tensor_parallel/layers/internal/layer_math.h"
#include "tensor_parallel/layers/internal/sharded_comm.h"

namespace loom {

using tp_layers_internal::AllGatherV;
using tp_layers_internal::AllReduceSum;
using tp_layers_internal::ComputeValues;
using tp_layers_internal::ReduceScatterV;
using tp_layers_internal::ShardCounts;
using tp_layers_internal::ToTensor;

namespace {
constexpr char kName[] = "VocabParallelEmbedding";
}  // namespace

absl::StatusOr<VocabParallelEmbedding> VocabParallelEmbedding::Create(
    const Tensor& full_table, Communicator& tp, const VocabParallelEmbeddingOptions& options) {
  LOOM_RETURN_IF_ERROR(tp_layers_internal::CheckStorage(options.weight_dtype, kName));
  if (full_table.rank() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        kName, ": table shape ", ShapeString(full_table.shape()), " must be [vocab, hidden]"));
  }
  VocabParallelEmbedding layer;
  layer.tp_ = &tp;
  layer.rank_ = tp.rank();
  layer.options_ = options;
  layer.vocab_ = full_table.dim(0);
  layer.hidden_ = full_table.dim(1);
  layer.extent_ = ShardExtentOf(layer.vocab_, tp.size(), tp.rank(), options.rule);
  LOOM_ASSIGN_OR_RETURN(layer.weight_, tp_layers_internal::StoreSlice(
                                           full_table, 0, layer.extent_.offset,
                                           layer.extent_.length, options.weight_dtype));
  return layer;
}

absl::StatusOr<Tensor> VocabParallelEmbedding::Forward(absl::Span<const int64_t> ids,
                                                       absl::Span<const int64_t> ids_shape) {
  std::vector<int64_t> shape(ids_shape.begin(), ids_shape.end());
  if (shape.empty()) shape = {static_cast<int64_t>(ids.size())};
  if (NumElements(shape) != static_cast<int64_t>(ids.size())) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": ids shape ", ShapeString(shape),
                                                   " does not hold ", ids.size(), " ids"));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_) {
      return absl::InvalidArgumentError(absl::StrCat(kName, ": id ", ids[i], " at position ", i,
                                                     " is outside the vocabulary [0, ", vocab_,
                                                     ")"));
    }
  }
  // Masked lookup: ids owned by other ranks contribute zero rows to the sum.
  std::vector<float> scratch;
  LOOM_ASSIGN_OR_RETURN(const absl::Span<const float> table,
                        ComputeValues(borrowed_, false, weight_, scratch, kName));
  std::vector<float> y(ids.size() * static_cast<size_t>(hidden_), 0.0f);
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t local = ids[i] - extent_.offset;
    if (local < 0 || local >= extent_.length) continue;
    std::copy_n(table.begin() + local * hidden_, hidden_, y.begin() + i * hidden_);
  }
  state_.output_shape = shape;
  state_.output_shape.push_back(hidden_);
  if (options_.sequence_parallel) {
    const int64_t per_position = static_cast<int64_t>(ids.size()) / std::max<int64_t>(shape[0], 1);
    LOOM_ASSIGN_OR_RETURN(
        y, ReduceScatterV(*tp_, y,
                          ShardCounts(shape[0], tp_->size(), options_.rule, per_position * hidden_), tally_));
    state_.output_shape[0] = ShardExtentOf(shape[0], tp_->size(), rank_, options_.rule).length;
  } else {
    LOOM_RETURN_IF_ERROR(AllReduceSum(*tp_, absl::MakeSpan(y), tally_));
  }
  state_.ids.assign(ids.begin(), ids.end());
  state_.ids_shape = std::move(shape);
  state_.valid = true;
  return ToTensor(state_.output_shape, y);
}

absl::StatusOr<absl::Span<const float>> VocabParallelEmbedding::WholeGradient(
    const Tensor& grad_output, std::vector<float>& storage) {
  LOOM_RETURN_IF_ERROR(
      tp_layers_internal::CheckGradient(kName, state_.valid, grad_output, state_.output_shape));
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> g, grad_output.As<float>());
  if (!options_.sequence_parallel) return g;
  const int64_t per_position =
      static_cast<int64_t>(state_.ids.size()) / std::max<int64_t>(state_.ids_shape[0], 1);
  LOOM_ASSIGN_OR_RETURN(
      storage, AllGatherV(*tp_, g,
                          ShardCounts(state_.ids_shape[0], tp_->size(), options_.rule,
                                      per_position * hidden_),
                          tally_));
  return absl::Span<const float>(storage);
}

absl::Status VocabParallelEmbedding::ScatterGradient(absl::Span<const int64_t> ids,
                                                     absl::Span<const float> g) {
  // Summed straight into the gradient tensor (zeroed; a Tensor's large block the
  // job's core/large_block_cache.h reuses, 64 MiB at vocabulary 32768 x 512).
  LOOM_ASSIGN_OR_RETURN(Tensor grad, Tensor::Create({extent_.length, hidden_}, DType::kF32));
  LOOM_ASSIGN_OR_RETURN(absl::Span<float> dw, grad.As<float>());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t local = ids[i] - extent_.offset;
    if (local < 0 || local >= extent_.length) continue;
    for (int64_t j = 0; j < hidden_; ++j) dw[local * hidden_ + j] += g[i * hidden_ + j];
  }
  weight_grad_ = std::move(grad);
  return absl::OkStatus();
}

absl::Status VocabParallelEmbedding::Backward(const Tensor& grad_output) {
  std::vector<float> storage;
  LOOM_ASSIGN_OR_RETURN(const absl::Span<const float> g, WholeGradient(grad_output, storage));
  return ScatterGradient(state_.ids, g);
}

absl::Status VocabParallelEmbedding::BackwardInput(const Tensor& grad_output,
                                                   WeightGradWork& work) {
  std::vector<float> storage;
  LOOM_ASSIGN_OR_RETURN(const absl::Span<const float> g, WholeGradient(grad_output, storage));
  work = WeightGradWork();
  work.rows = static_cast<int64_t>(state_.ids.size());
  work.ids = std::move(state_.ids);
  LOOM_ASSIGN_OR_RETURN(work.grad_output, tp_layers_internal::OwnedValues(g));
  ReleaseActivations();
  return absl::OkStatus();
}

absl::Status VocabParallelEmbedding::BackwardWeight(const WeightGradWork& work) {
  if (static_cast<int64_t>(work.ids.size()) != work.rows || !work.input.empty() ||
      static_cast<int64_t>(work.grad_output.size()) != work.rows * hidden_) {
    return absl::InvalidArgumentError(absl::StrCat(
        kName, ": weight-gradient work of ", work.rows, " rows holds ", work.ids.size(),
        " ids, ", work.grad_output.size(), " gradient values and ", work.input.size(),
        " input values; this layer needs one id and ", hidden_,
        " gradient values per row and no input (a work from BackwardInput of this layer)"));
  }
  return ScatterGradient(work.ids, work.grad_output);
}

absl::Status VocabParallelEmbedding::BorrowWeights(absl::Span<const float> table) {
  return tp_layers_internal::Borrow(borrowed_, table, {}, {}, extent_.length * hidden_, 0, kName);
}

}  // namespace loom
