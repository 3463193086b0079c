#include "tools/planner/step_model.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "core/status_macros.h"
#include "pipeline/action.h"
#include "pipeline/generators.h"
#include "pipeline/schedule.h"
#include "pipeline/simulator.h"
#include "pipeline/stage_layout.h"
#include "tools/planner/model_flops.h"
#include "topology/memory_estimate.h"

namespace loom {
namespace planner {
namespace {

// A link as the ring formulas see it.
struct Link {
  double latency = 0;    // seconds per message
  double bandwidth = 0;  // bytes per second, each direction
};

double AllReduceSeconds(double bytes, int64_t ranks, const Link& link) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const double n = static_cast<double>(ranks);
  return 2 * (n - 1) * link.latency + 2 * (n - 1) / n * bytes / link.bandwidth;
}

// Reduce-scatter or all-gather of `bytes` in all (each rank holds bytes / ranks).
double HalfRingSeconds(double bytes, int64_t ranks, const Link& link) {
  if (ranks <= 1 || bytes <= 0) return 0;
  const double n = static_cast<double>(ranks);
  return (n - 1) * link.latency + (n - 1) / n * bytes / link.bandwidth;
}

absl::Status AtLeastOne(const char* name, int64_t value) {
  if (value >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(name, " is ", value, "; it must be at least 1"));
}

}  // namespace

absl::Status ValidateStepInput(const StepInput& in) {
  LOOM_RETURN_IF_ERROR(ValidateShape(in.shape));
  const PlanConfig& c = in.config;
  LOOM_RETURN_IF_ERROR(AtLeastOne("dp", c.dp));
  LOOM_RETURN_IF_ERROR(AtLeastOne("tp", c.tp));
  LOOM_RETURN_IF_ERROR(AtLeastOne("pp", c.pp));
  LOOM_RETURN_IF_ERROR(AtLeastOne("cp", c.cp));
  LOOM_RETURN_IF_ERROR(AtLeastOne("virtual_stages", c.virtual_stages));
  LOOM_RETURN_IF_ERROR(AtLeastOne("microbatch_size", c.microbatch_size));
  LOOM_RETURN_IF_ERROR(AtLeastOne("global_batch", in.global_batch));
  LOOM_RETURN_IF_ERROR(AtLeastOne("gpus_per_node", in.gpus_per_node));
  if (c.zero < 0 || c.zero > 3) {
    return absl::InvalidArgumentError(absl::StrCat("zero stage ", c.zero, " is not 0, 1, 2 or 3"));
  }
  const TransformerShape& s = in.shape;
  if (s.heads % c.tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp=", c.tp, " does not divide the ", s.heads, " heads"));
  }
  if (KvHeads(s) % c.tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp=", c.tp, " does not divide the ", KvHeads(s), " key-value heads"));
  }
  if (FfnWidth(s) % c.tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tp=", c.tp, " does not divide the MLP width ", FfnWidth(s)));
  }
  if (s.seq_len % c.cp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cp=", c.cp, " does not divide seq_len ", s.seq_len));
  }
  const int64_t stages = c.pp * c.virtual_stages;
  if (in.even_layers_only ? s.layers % stages != 0 : s.layers < stages) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layers ", s.layers, in.even_layers_only ? " do not split" : " are fewer than the stages",
        " over pp=", c.pp, " x virtual_stages=", c.virtual_stages));
  }
  LOOM_ASSIGN_OR_RETURN(const int64_t m, Microbatches(in.global_batch, c));
  const absl::string_view name = PipelineScheduleName(c.schedule);
  switch (c.schedule) {
    case PipelineScheduleKind::kInterleaved1F1B:
      if (c.virtual_stages < 2) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, " needs virtual_stages >= 2 (got ", c.virtual_stages, ")"));
      }
      if (m % c.pp != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, " needs microbatches a multiple of pp=", c.pp, " (got ", m, ")"));
      }
      break;
    case PipelineScheduleKind::kZeroBubbleV:
      if (c.virtual_stages != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, " needs virtual_stages 2 (got ", c.virtual_stages, ")"));
      }
      if (m < c.pp) {
        return absl::InvalidArgumentError(absl::StrCat(name, " needs at least pp=", c.pp,
                                                       " microbatches (got ", m, ")"));
      }
      break;
    default:
      if (c.virtual_stages != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, " runs one stage per rank; virtual_stages is ", c.virtual_stages));
      }
      if (in.microbatches_at_least_pp && m < c.pp) {
        return absl::InvalidArgumentError(absl::StrCat(name, " needs at least pp=", c.pp,
                                                       " microbatches here (got ", m, ")"));
      }
      break;
  }
  const DeviceSpec& d = in.device;
  const double rates[] = {d.peak_bf16_flops,      d.peak_f32_flops,       d.memory_bandwidth,
                          d.intra_node_bandwidth, d.inter_node_bandwidth, d.gemm_max_efficiency,
                          d.attention_efficiency};
  for (double r : rates) {
    if (!(r > 0) || !std::isfinite(r)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "device ", d.name, ": a rate (peak, bandwidth or efficiency) is ", r,
          "; each must be positive"));
    }
  }
  if (d.gemm_half_width < 0 || d.gemm_half_rows < 0 || d.elementwise_passes < 0 ||
      d.grad_accumulate_passes < 0 || d.intra_node_latency < 0 ||
      d.inter_node_latency < 0 || d.dp_overlap < 0 || d.dp_overlap > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device ", d.name, ": a latency, half width, pass count or overlap is out of range"));
  }
  return absl::OkStatus();
}

namespace {

}  // namespace

bool UsesSequenceParallelism(const StepInput& in) {
  const PlanConfig& c = in.config;
  return in.device.sequence_parallel && c.tp > 1 && (in.shape.seq_len / c.cp) % c.tp == 0;
}

namespace {

// Activation bytes one layer moves through memory per microbatch, once.
absl::StatusOr<double> LayerActivationBytes(const StepInput& in) {
  const TransformerShape& s = in.shape;
  const PlanConfig& c = in.config;
  if (in.device.fused_attention) {
    FusedAttentionActivationOptions o;
    o.hidden_size = s.hidden;
    o.num_heads = s.heads;
    o.vocab = s.vocab;
    o.seq_len = s.seq_len;
    o.micro_batch_size = c.microbatch_size;
    o.layers = 1;
    o.tp = c.tp;
    o.cp = c.cp;
    o.bf16_linear_inputs = c.dtype == ComputeDtype::kBf16;
    LOOM_ASSIGN_OR_RETURN(int64_t bytes, EstimateFusedAttentionActivationBytes(o));
    return static_cast<double>(bytes);
  }
  ActivationOptions o;
  o.hidden_size = s.hidden;
  o.seq_len = s.seq_len;
  o.micro_batch_size = c.microbatch_size;
  o.num_heads = s.heads;
  o.layers = 1;
  o.tp = c.tp;
  o.cp = c.cp;
  // Without stored scores the layer keeps what selective recompute keeps.
  if (in.device.flash_attention) o.recompute = Recompute::kSelective;
  o.sequence_parallel = UsesSequenceParallelism(in);
  LOOM_ASSIGN_OR_RETURN(int64_t bytes, ActivationBytesPerLayer(o));
  // Korthikanti et al. count 16-bit activations.
  return static_cast<double>(bytes) * (c.dtype == ComputeDtype::kF32 ? 2 : 1);
}

}  // namespace

std::vector<int64_t> StageLayerCounts(int64_t layers, int64_t stages) {
  return BalancedLayerCounts(layers, stages);
}

namespace {

// Which link a group of `size` ranks spaced `stride` apart on the mesh runs on.
Link GroupLink(const StepInput& in, int64_t stride, int64_t size) {
  const DeviceSpec& d = in.device;
  if (stride * size <= in.gpus_per_node) return {d.intra_node_latency, d.intra_node_bandwidth};
  return {d.inter_node_latency, d.inter_node_bandwidth};
}

}  // namespace

std::string PlanConfig::ToString() const {
  std::string name(PipelineScheduleName(schedule));
  if (this->schedule == PipelineScheduleKind::kInterleaved1F1B) {
    absl::StrAppend(&name, "(v=", virtual_stages, ")");
  }
  const char* r = recompute == Recompute::kFull        ? "full"
                  : recompute == Recompute::kSelective ? "selective"
                                                       : "none";
  return absl::StrCat("dp=", dp, " tp=", tp, " pp=", pp, " cp=", cp, " zero=", zero, " ",
                      name, " mbs=", microbatch_size, " recompute=", r, " ",
                      dtype == ComputeDtype::kBf16 ? "bf16" : "f32");
}

absl::StatusOr<int64_t> Microbatches(int64_t global_batch, const PlanConfig& c) {
  if (c.dp < 1 || c.microbatch_size < 1 || global_batch % (c.dp * c.microbatch_size) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("global batch ", global_batch, " does not split into microbatches of ",
                     c.microbatch_size, " over dp=", c.dp));
  }
  return global_batch / (c.dp * c.microbatch_size);
}

std::string StepPrediction::Breakdown() const {
  std::string out;
  absl::StrAppendFormat(&out,
                        "  step %.4g s = pipeline %.4g s + exposed dp %.4g s + optimizer %.4g s + "
                        "overhead %.4g s\n",
                        step_seconds, pipeline_seconds, dp_exposed_seconds, optimizer_seconds,
                        overhead_seconds);
  absl::StrAppendFormat(&out, "  pipeline: %d microbatches, bubble %.1f%% of device time, p2p %.3g ms a hop\n",
                        microbatches, 100 * bubble_ratio, 1e3 * p2p_seconds);
  absl::StrAppendFormat(&out,
                        "  one layer, one microbatch: forward %.3g ms, backward %.3g ms "
                        "(products %.3g ms at %.0f%% GEMM efficiency, element-wise %.3g ms, "
                        "tp %.3g ms, cp exposed %.3g ms)\n",
                        1e3 * layer_forward_seconds, 1e3 * layer_backward_seconds,
                        1e3 * layer_gemm_seconds, 100 * gemm_efficiency,
                        1e3 * layer_elementwise_seconds, 1e3 * layer_tp_seconds,
                        1e3 * layer_cp_seconds);
  if (layer_grad_accumulate_seconds > 0) {
    absl::StrAppendFormat(&out, "  of that backward: %.3g ms adding the weight gradients into the accumulators\n",
                          1e3 * layer_grad_accumulate_seconds);
  }
  absl::StrAppendFormat(&out, "  logits %.3g ms a microbatch; dp traffic %.4g s, %.4g s of it exposed\n",
                        1e3 * logits_seconds, dp_seconds, dp_exposed_seconds);
  absl::StrAppendFormat(&out, "  %.4g tokens/s, %.1f TFLOP/s per device (Megatron count), MFU %.3f\n",
                        tokens_per_second, tflops_per_device, mfu);
  return out;
}

namespace {

absl::StatusOr<StepPrediction> Predict(const StepInput& in, bool simulate) {
  LOOM_RETURN_IF_ERROR(ValidateStepInput(in));
  LOOM_ASSIGN_OR_RETURN(const int64_t m, Microbatches(in.global_batch, in.config));
  const TransformerShape& s = in.shape;
  const PlanConfig& c = in.config;
  const DeviceSpec& d = in.device;
  const bool bf16 = c.dtype == ComputeDtype::kBf16;
  const double peak = bf16 ? d.peak_bf16_flops : d.peak_f32_flops;
  const double elem_bytes = bf16 ? 2 : 4;
  const double h = static_cast<double>(s.hidden);
  const double tp = static_cast<double>(c.tp);
  const double tokens = static_cast<double>(c.microbatch_size * s.seq_len / c.cp);

  StepPrediction p;
  p.microbatches = m;
  // The products of one layer, one microbatch, forward. A shard's narrowest
  // dimension is h / tp: the efficiency model's width.
  const double width = h / tp;
  p.gemm_efficiency = d.gemm_max_efficiency * width / (width + d.gemm_half_width);
  if (d.gemm_half_rows > 0) p.gemm_efficiency *= tokens / (tokens + d.gemm_half_rows);
  const double gemm_rate = peak * p.gemm_efficiency;
  const double dense_seconds = tokens * 2 * LayerMatrixParameters(s) / tp / gemm_rate;
  const double attention_seconds = tokens * 4 * static_cast<double>(s.seq_len) * h / tp /
                                   (gemm_rate * d.attention_efficiency);
  LOOM_ASSIGN_OR_RETURN(const double activation_bytes, LayerActivationBytes(in));
  const double elementwise = d.elementwise_passes * activation_bytes / d.memory_bandwidth;
  // One microbatch adding one layer's weight gradients (f32) into the accumulators.
  const double grad_accumulate =
      d.grad_accumulate_passes * 4 * LayerMatrixParameters(s) / tp / d.memory_bandwidth;

  // Tensor parallelism: two all-reduces of the layer's output per pass.
  const Link tp_link = GroupLink(in, 1, c.tp);
  const double tp_all_reduce = AllReduceSeconds(tokens * h * elem_bytes, c.tp, tp_link);
  // Context parallelism: K and V of the local chunk per hop, hidden behind one
  // block of attention; backward sends their gradients too.
  double cp_forward = 0, cp_backward = 0;
  if (c.cp > 1) {
    const Link cp_link = GroupLink(in, c.tp, c.cp);
    const double kv_bytes = 2 * tokens * h / tp * elem_bytes;
    const double hop = cp_link.latency + kv_bytes / cp_link.bandwidth;
    const double block = attention_seconds / static_cast<double>(c.cp);
    const double hops = static_cast<double>(c.cp - 1);
    cp_forward = hops * std::max(0.0, hop - block);
    cp_backward = hops * std::max(0.0, 2 * hop - 2 * block) + 2 * hop;
  }

  const double forward = dense_seconds + attention_seconds + elementwise / 3;
  double backward = 2 * (dense_seconds + attention_seconds) + 2 * elementwise / 3 + grad_accumulate;
  double backward_tp = 2 * tp_all_reduce;
  double backward_cp = cp_backward;
  if (c.recompute == Recompute::kFull) {
    backward += forward;
    backward_tp += 2 * tp_all_reduce;
    backward_cp += cp_forward;
  } else if (c.recompute == Recompute::kSelective && !d.flash_attention) {
    backward += attention_seconds;
  }
  p.layer_forward_seconds = forward;
  p.layer_backward_seconds = backward;
  p.layer_gemm_seconds = 3 * (dense_seconds + attention_seconds);
  p.layer_elementwise_seconds = elementwise;
  p.layer_grad_accumulate_seconds = grad_accumulate;
  p.layer_tp_seconds = 2 * tp_all_reduce + backward_tp;
  p.layer_cp_seconds = cp_forward + backward_cp;
  // The head: logits over the vocabulary (vocab-parallel over tp), not recomputed.
  p.logits_seconds = 3 * 2 * tokens * h * static_cast<double>(s.vocab) / tp / gemm_rate;

  // The pipeline, simulated.
  const bool v_shape = c.schedule == PipelineScheduleKind::kZeroBubbleV;
  LOOM_ASSIGN_OR_RETURN(const StageLayout layout,
                        v_shape ? StageLayout::VShape(c.pp)
                                : StageLayout::Loop(c.pp, c.virtual_stages));
  const int64_t stages = layout.num_stages();
  SimulationCosts costs;
  for (const int64_t layers : StageLayerCounts(s.layers, stages)) {
    StageCosts sc;
    const double n = static_cast<double>(layers);
    sc.forward = n * (forward + 2 * tp_all_reduce + cp_forward);
    sc.backward = n * (backward + backward_tp + backward_cp);
    // Zero-bubble split: the weight gradients are the forward's dense products again.
    sc.backward_weight = n * (dense_seconds + grad_accumulate);
    sc.backward_input = sc.backward - sc.backward_weight;
    costs.per_stage.push_back(sc);
  }
  StageCosts& last = costs.per_stage.back();
  last.forward += p.logits_seconds / 3;
  last.backward += 2 * p.logits_seconds / 3;
  last.backward_input += p.logits_seconds / 3;
  last.backward_weight += p.logits_seconds / 3;
  std::optional<Schedule> schedule;
  if (simulate) {
    LOOM_ASSIGN_OR_RETURN(schedule, MakeSchedule(c.schedule, c.pp, m, c.virtual_stages));
  }
  if (c.pp > 1) {
    // Neighbouring stages sit dp * cp * tp ranks apart; between nodes, Megatron
    // sends 1/tp of the activations and all-gathers them inside the node.
    const int64_t stride = c.dp * c.cp * c.tp;
    const bool across = stride >= in.gpus_per_node;
    const double bytes = tokens * h * elem_bytes;
    p.p2p_seconds = across ? d.inter_node_latency + bytes / tp / d.inter_node_bandwidth
                           : d.intra_node_latency + bytes / d.intra_node_bandwidth;
  }
  costs.p2p_latency = p.p2p_seconds;
  if (simulate) {
    LOOM_ASSIGN_OR_RETURN(const SimulationResult run, Simulate(*schedule, costs));
    p.pipeline_seconds = run.makespan;
    p.bubble_ratio = run.bubble_ratio;
  } else {
    // Every rank runs each of its stages' work once per microbatch.
    std::vector<double> busy(static_cast<size_t>(c.pp), 0.0);
    for (int64_t stage = 0; stage < stages; ++stage) {
      const StageCosts& sc = costs.ForStage(stage);
      busy[static_cast<size_t>(layout.RankOf(stage))] +=
          static_cast<double>(m) * (sc.forward + sc.backward);
    }
    for (double b : busy) p.pipeline_seconds = std::max(p.pipeline_seconds, b);
  }

  // Data parallelism over the rank's parameter shard.
  const double local_parameters = ParameterCount(s) / static_cast<double>(c.tp * c.pp);
  const Link dp_link = GroupLink(in, c.tp * c.cp, c.dp);
  const double shard_bytes = local_parameters * elem_bytes;
  switch (c.zero) {
    case 0:
      p.dp_seconds = AllReduceSeconds(shard_bytes, c.dp, dp_link);
      break;
    case 1:
    case 2:
      p.dp_seconds = 2 * HalfRingSeconds(shard_bytes, c.dp, dp_link);
      break;
    default:
      // Parameters gathered for each microbatch's forward and backward.
      p.dp_seconds = (2 * static_cast<double>(m) + 1) * HalfRingSeconds(shard_bytes, c.dp, dp_link);
      break;
  }
  p.dp_exposed_seconds = p.dp_seconds * (1 - d.dp_overlap);
  if (c.zero == 0 && d.dp_overlaps_last_backward && p.dp_seconds > 0) {
    // The last microbatch's backward on rank 0's stages hides the all-reduces of
    // the units it has finished; the last unit's waits for its end.
    const std::vector<int64_t> stage_layers = StageLayerCounts(s.layers, stages);
    int64_t rank_layers = 0;
    double covered = 0;
    for (int64_t stage = 0; stage < stages; ++stage) {
      if (layout.RankOf(stage) != 0) continue;
      rank_layers += stage_layers[static_cast<size_t>(stage)];
      covered += costs.ForStage(stage).backward;
    }
    const double last_unit = p.dp_seconds / static_cast<double>(rank_layers + 1);
    p.dp_exposed_seconds = std::max(p.dp_seconds - covered, last_unit);
  }
  const double optimizer_parameters =
      c.zero >= 1 ? local_parameters / static_cast<double>(c.dp) : local_parameters;
  p.optimizer_seconds = 28 * optimizer_parameters / d.memory_bandwidth;
  p.overhead_seconds = d.step_overhead_seconds;
  p.step_seconds = p.pipeline_seconds + p.dp_exposed_seconds + p.optimizer_seconds +
                   d.step_overhead_seconds;

  const double devices = static_cast<double>(c.dp * c.tp * c.pp * c.cp);
  p.tokens_per_second =
      static_cast<double>(in.global_batch * s.seq_len) / p.step_seconds;
  p.tflops_per_device = MegatronFlopsPerIteration(s, in.global_batch, c.recompute) /
                        p.step_seconds / devices / 1e12;
  p.mfu = ModelFlopsPerToken(s) * p.tokens_per_second / devices / peak;
  return p;
}

}  // namespace

absl::StatusOr<StepPrediction> PredictStep(const StepInput& in) {
  return Predict(in, /*simulate=*/true);
}

absl::StatusOr<double> StepLowerBound(const StepInput& in) {
  LOOM_ASSIGN_OR_RETURN(const StepPrediction p, Predict(in, /*simulate=*/false));
  return p.step_seconds;
}

}  // namespace planner
}  // namespace loom
