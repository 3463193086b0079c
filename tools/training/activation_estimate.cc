#include "tools/training/activation_estimate.h"

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "topology/memory_estimate.h"

namespace loom {

absl::StatusOr<int64_t> EstimatedActivationBytes(const TrainJobOptions& options,
                                                 const StageLayout& layout, int64_t pp_rank) {
  if (pp_rank < 0 || pp_rank >= layout.num_ranks()) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline rank ", pp_rank,
                                                   " is outside a layout of ",
                                                   layout.num_ranks(), " ranks"));
  }
  // The blocks as GptStageModule places them: the layout's, or spread evenly.
  StageLayout blocks = layout;
  if (!blocks.has_layers()) {
    LOOM_ASSIGN_OR_RETURN(blocks, layout.WithEvenLayers(options.model.layers));
  }

  const GptConfig& m = options.model;
  FusedAttentionActivationOptions estimate;
  estimate.hidden_size = m.hidden;
  estimate.num_heads = m.heads;
  estimate.vocab = m.vocab;
  estimate.seq_len = m.seq_len;
  estimate.micro_batch_size = options.micro_batch;
  estimate.tp = options.tp;
  estimate.cp = options.cp;
  estimate.bf16_linear_inputs = options.dtype == DType::kBF16;
  estimate.recompute = options.recompute;
  // Every stage model of the rank may hold a forward's state at once.
  int64_t total = 0;
  for (const int64_t stage : blocks.StagesOf(pp_rank)) {
    estimate.layers = blocks.layers_per_stage()[static_cast<size_t>(stage)];
    estimate.embedding = stage == 0;
    estimate.head = stage == blocks.num_stages() - 1;
    LOOM_ASSIGN_OR_RETURN(const int64_t bytes, EstimateFusedAttentionActivationBytes(estimate));
    total += bytes;
  }
  return total;
}

}  // namespace loom
