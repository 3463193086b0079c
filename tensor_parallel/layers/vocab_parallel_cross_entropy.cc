#include "tensor_parallel/layers/vocab_parallel_cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/vector_math.h"
#include "tensor_parallel/layers/internal/layer_math.h"
#include "tensor_parallel/layers/internal/sharded_comm.h"

namespace loom {

using tp_layers_internal::AllReduceSum;
using tp_layers_internal::CheckActivation;
using tp_layers_internal::ToTensor;

namespace {
constexpr char kName[] = "VocabParallelCrossEntropy";
}  // namespace

absl::StatusOr<VocabParallelCrossEntropy> VocabParallelCrossEntropy::Create(int64_t vocab_size,
                                                                            Communicator& tp,
                                                                            ShardRule rule) {
  if (vocab_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": vocab_size must be at least 1, got ", vocab_size));
  }
  VocabParallelCrossEntropy loss;
  loss.tp_ = &tp;
  loss.vocab_ = vocab_size;
  loss.extent_ = ShardExtentOf(vocab_size, tp.size(), tp.rank(), rule);
  return loss;
}

absl::StatusOr<Tensor> VocabParallelCrossEntropy::Forward(const Tensor& logits,
                                                          absl::Span<const int64_t> targets) {
  const int64_t width = extent_.length;
  LOOM_ASSIGN_OR_RETURN(const int64_t tokens, CheckActivation(logits, width, -1, kName));
  if (static_cast<int64_t>(targets.size()) != tokens) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": ", targets.size(),
                                                   " targets for logits ",
                                                   ShapeString(logits.shape()), " (", tokens,
                                                   " tokens)"));
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i] < 0 || targets[i] >= vocab_) {
      return absl::InvalidArgumentError(absl::StrCat(kName, ": target ", targets[i],
                                                     " at position ", i,
                                                     " is outside the vocabulary [0, ", vocab_,
                                                     ")"));
    }
  }
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> z, logits.As<float>());
  // 1. The row maxima, for a stable exp. An empty shard contributes -inf.
  std::vector<float> row_max(static_cast<size_t>(tokens), -std::numeric_limits<float>::infinity());
  for (int64_t t = 0; t < tokens; ++t) {
    row_max[t] = MaxValue(z.subspan(static_cast<size_t>(t * width), static_cast<size_t>(width)));
  }
  LOOM_RETURN_IF_ERROR(tp_layers_internal::AllReduceMax(*tp_, absl::MakeSpan(row_max), tally_));
  // 2. One sum for two values per token: [target logit - max | sum of exp], so the
  // two reductions cost one call's latency.
  std::vector<float> sums(static_cast<size_t>(2 * tokens), 0.0f);
  LOOM_ASSIGN_OR_RETURN(state_.softmax, AlignedBuffer<float>::CreateUninitialized(z.size()));
  std::copy(z.begin(), z.end(), state_.softmax.data());
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t local_target = targets[t] - extent_.offset;
    if (local_target >= 0 && local_target < width) {
      sums[t] = z[t * width + local_target] - row_max[t];
    }
    sums[tokens + t] = ExpShiftInPlace(
        state_.softmax.span().subspan(static_cast<size_t>(t * width),
                                      static_cast<size_t>(width)),
        row_max[t]);
  }
  LOOM_RETURN_IF_ERROR(AllReduceSum(*tp_, absl::MakeSpan(sums), tally_));
  std::vector<float> loss(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) {
    const float sum_exp = sums[tokens + t];
    loss[t] = std::log(sum_exp) - sums[t];
    ScaleInPlace(state_.softmax.span().subspan(static_cast<size_t>(t * width),
                                               static_cast<size_t>(width)),
                 1.0f / sum_exp);
  }
  state_.targets.assign(targets.begin(), targets.end());
  state_.logits_shape = logits.shape();
  state_.loss_shape.assign(state_.logits_shape.begin(), state_.logits_shape.end() - 1);
  state_.valid = true;
  return ToTensor(state_.loss_shape, loss);
}

absl::StatusOr<Tensor> VocabParallelCrossEntropy::Backward(const Tensor& grad_loss) {
  LOOM_RETURN_IF_ERROR(
      tp_layers_internal::CheckGradient(kName, state_.valid, grad_loss, state_.loss_shape, "grad_loss"));
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> g, grad_loss.As<float>());
  const int64_t width = extent_.length;
  // Written straight into the returned tensor (every element, so uninitialized).
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::CreateUninitialized(state_.logits_shape, DType::kF32));
  LOOM_ASSIGN_OR_RETURN(absl::Span<float> dz, out.As<float>());
  for (size_t t = 0; t < state_.targets.size(); ++t) {
    for (int64_t j = 0; j < width; ++j) dz[t * width + j] = state_.softmax[t * width + j] * g[t];
    const int64_t local_target = state_.targets[t] - extent_.offset;
    if (local_target >= 0 && local_target < width) dz[t * width + local_target] -= g[t];
  }
  return out;
}

}  // namespace loom
