#include "tools/planner/memory_model.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "tools/planner/model_flops.h"
#include "topology/memory_estimate.h"

namespace loom {
namespace planner {
namespace {

std::string Gb(double bytes) { return FormatBytes(static_cast<int64_t>(bytes)); }

// Korthikanti et al.: per layer and in-flight chunk-microbatch, times what the
// schedule keeps in flight on pipeline rank 0 (the most).
absl::StatusOr<double> UnfusedActivations(const StepInput& in, int64_t microbatches) {
  const PlanConfig& c = in.config;
  ActivationOptions o;
  o.hidden_size = in.shape.hidden;
  o.seq_len = in.shape.seq_len;
  o.micro_batch_size = c.microbatch_size;
  o.num_heads = in.shape.heads;
  o.layers = 1;
  o.tp = c.tp;
  o.cp = c.cp;
  o.recompute = c.recompute;
  o.sequence_parallel = UsesSequenceParallelism(in);
  // Without stored scores the layer keeps what selective recompute keeps.
  const Recompute whole = in.device.flash_attention ? Recompute::kSelective : Recompute::kNone;
  if (in.device.flash_attention && c.recompute == Recompute::kNone) o.recompute = whole;
  LOOM_ASSIGN_OR_RETURN(const int64_t per_layer, ActivationBytesPerLayer(o));
  const int64_t v = c.schedule == PipelineScheduleKind::kZeroBubbleV ? 2 : c.virtual_stages;
  LOOM_ASSIGN_OR_RETURN(const int64_t in_flight,
                        InFlightMicrobatches(c.schedule, c.pp, 0, microbatches, v));
  // The busiest chunk's layers (an uneven split gives the inner stages more).
  const std::vector<int64_t> counts = StageLayerCounts(in.shape.layers, c.pp * v);
  int64_t most = 0;
  for (int64_t n : counts) most = std::max(most, n);
  const double layers_per_chunk = static_cast<double>(most);
  double bytes = static_cast<double>(per_layer) * layers_per_chunk * static_cast<double>(in_flight);
  if (c.recompute == Recompute::kFull) {
    // The layer being recomputed holds its whole state for its backward.
    o.recompute = whole;
    LOOM_ASSIGN_OR_RETURN(const int64_t layer_state, ActivationBytesPerLayer(o));
    bytes += static_cast<double>(layer_state);
  }
  return bytes;
}

// Loom's model: each in-flight microbatch keeps its own context
// (models/gpt/gpt_stage_module.h), so a rank holds its chunks' mean state times the
// schedule's in-flight count (InFlightMicrobatches, in chunk-microbatches); rank 0
// holds the embedding's stage and (zb-v) the head's, the last rank the head's
// otherwise. The job's own estimate walks the schedule's actions
// (tools/training/activation_estimate.h); this is its closed form.
absl::StatusOr<double> FusedActivations(const StepInput& in, int64_t microbatches) {
  const PlanConfig& c = in.config;
  const int64_t v = c.schedule == PipelineScheduleKind::kZeroBubbleV ? 2 : c.virtual_stages;
  const int64_t stages = c.pp * v;
  FusedAttentionActivationOptions o;
  o.hidden_size = in.shape.hidden;
  o.num_heads = in.shape.heads;
  o.vocab = in.shape.vocab;
  o.seq_len = in.shape.seq_len;
  o.micro_batch_size = c.microbatch_size;
  const std::vector<int64_t> counts = StageLayerCounts(in.shape.layers, stages);
  o.tp = c.tp;
  o.cp = c.cp;
  o.bf16_linear_inputs = c.dtype == ComputeDtype::kBf16;
  o.recompute = c.recompute == Recompute::kFull ? Recompute::kFull : Recompute::kNone;
  double busiest = 0;
  for (int64_t rank = 0; rank < c.pp; ++rank) {
    double bytes = 0;
    for (int64_t chunk = 0; chunk < v; ++chunk) {
      // Loop layout: stage rank + chunk * pp; the V shape's second chunk comes back.
      const int64_t stage = c.schedule == PipelineScheduleKind::kZeroBubbleV && chunk == 1
                                ? 2 * c.pp - 1 - rank
                                : rank + chunk * c.pp;
      o.layers = counts[static_cast<size_t>(stage)];
      o.embedding = stage == 0;
      o.head = stage == stages - 1;
      LOOM_ASSIGN_OR_RETURN(const int64_t b, EstimateFusedAttentionActivationBytes(o));
      bytes += static_cast<double>(b);
    }
    LOOM_ASSIGN_OR_RETURN(const int64_t in_flight,
                          InFlightMicrobatches(c.schedule, c.pp, rank, microbatches, v));
    bytes = bytes / static_cast<double>(v) * static_cast<double>(in_flight);
    busiest = std::max(busiest, bytes);
  }
  return busiest;
}

}  // namespace

std::string MemoryEstimate::ToString() const {
  std::string out = absl::StrCat(Gb(total()), " = states ", Gb(model_states));
  if (zero_buffers > 0) absl::StrAppend(&out, " + gathered ", Gb(zero_buffers));
  absl::StrAppend(&out, " + activations ", Gb(activations));
  if (logits > 0) absl::StrAppend(&out, " + logits ", Gb(logits));
  return out;
}

absl::StatusOr<MemoryEstimate> MemoryPerDevice(const StepInput& in) {
  LOOM_RETURN_IF_ERROR(ValidateStepInput(in));
  LOOM_ASSIGN_OR_RETURN(const int64_t m, Microbatches(in.global_batch, in.config));
  const PlanConfig& c = in.config;
  const bool bf16 = c.dtype == ComputeDtype::kBf16;
  MemoryEstimate mem;
  ModelStateOptions states;
  states.num_parameters = static_cast<int64_t>(ParameterCount(in.shape));
  states.precision = bf16 ? PrecisionPolicy::kMixedPrecisionAdam : PrecisionPolicy::kFp32Adam;
  states.zero_stage = c.zero;
  states.dp = c.dp;
  states.tp = c.tp;
  states.pp = c.pp;
  LOOM_ASSIGN_OR_RETURN(const ModelStateBytes state_bytes, EstimateModelStateBytes(states));
  mem.model_states = static_cast<double>(state_bytes.total());
  if (c.zero == 3) {
    // The layer in use and the one prefetched, whole on this tp rank.
    const double layer = LayerMatrixParameters(in.shape) / static_cast<double>(c.tp);
    mem.zero_buffers = 2 * layer * (bf16 ? 2 : 4);
  }
  if (in.device.fused_attention) {
    // The head's softmax is in the last stage model's count.
    LOOM_ASSIGN_OR_RETURN(mem.activations, FusedActivations(in, m));
  } else {
    LOOM_ASSIGN_OR_RETURN(mem.activations, UnfusedActivations(in, m));
    mem.logits = 4.0 * static_cast<double>(c.microbatch_size * in.shape.seq_len / c.cp) *
                 static_cast<double>(in.shape.vocab) / static_cast<double>(c.tp);
  }
  return mem;
}

}  // namespace planner
}  // namespace loom
