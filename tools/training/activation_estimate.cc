#include "tools/training/activation_estimate.h"

#include <algorithm>
#include <cstdint>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "pipeline/action.h"
#include "topology/memory_estimate.h"

namespace loom {

absl::StatusOr<int64_t> EstimatedActivationBytes(const TrainJobOptions& options,
                                                 const Schedule& schedule, int64_t pp_rank) {
  const StageLayout& layout = schedule.layout;
  if (pp_rank < 0 || pp_rank >= layout.num_ranks() || pp_rank >= schedule.num_ranks()) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline rank ", pp_rank,
                                                   " is outside a layout of ",
                                                   layout.num_ranks(), " ranks"));
  }
  // The blocks as GptStageModule places them: the layout's, or balanced.
  StageLayout blocks = layout;
  if (!blocks.has_layers()) {
    LOOM_ASSIGN_OR_RETURN(blocks, layout.WithBalancedLayers(options.model.layers));
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
  std::map<int64_t, FusedAttentionStageBytes> stage_bytes;
  for (const int64_t stage : blocks.StagesOf(pp_rank)) {
    estimate.layers = blocks.layers_per_stage()[static_cast<size_t>(stage)];
    estimate.embedding = stage == 0;
    estimate.head = stage == blocks.num_stages() - 1;
    LOOM_ASSIGN_OR_RETURN(stage_bytes[stage], EstimateFusedAttentionStageBytes(estimate));
  }
  // Walk the rank's actions: every microbatch in flight holds its context, every
  // split backward its weight work until the weight pass.
  int64_t held = 0, peak = 0;
  for (const Action& action : schedule.ranks[static_cast<size_t>(pp_rank)]) {
    auto it = stage_bytes.find(action.stage);
    if (it == stage_bytes.end()) continue;  // communication with another rank's stage
    const FusedAttentionStageBytes& b = it->second;
    switch (action.kind) {
      case ActionKind::kForward:
        peak = std::max(peak, held + b.forward_peak);
        held += b.context;
        break;
      case ActionKind::kBackward:
        peak = std::max(peak, held - b.context + b.forward_peak);
        held -= b.context;
        break;
      case ActionKind::kBackwardInput:
        peak = std::max(peak, held - b.context + b.backward_input_peak);
        held += b.weight_work - b.context;
        break;
      case ActionKind::kBackwardWeight:
        held -= b.weight_work;
        break;
      default:
        break;
    }
  }
  return peak;
}

}  // namespace loom
