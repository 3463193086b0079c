// Devices the planner prices a step on: a small table of published figures, each
// overridable, and the constants of its GEMM-efficiency and element-wise models.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(DeviceSpec a100, FindDevice("a100-80gb"));
//   a100.peak_bf16_flops;   // 312e12
//   FindDevice("tpu");      // InvalidArgument: "unknown device "tpu"; known: a100-80gb, ..."
#ifndef LOOM_TOOLS_PLANNER_DEVICE_H_
#define LOOM_TOOLS_PLANNER_DEVICE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom {
namespace planner {

// DeviceSpec: one accelerator (or CPU socket share) and the links around it. Rates in
// FLOP/s and bytes/s, latencies in seconds, sizes in bytes.
struct DeviceSpec {
  std::string name;
  double peak_bf16_flops = 0;  // dense matrix-product peak in 16-bit inputs
  double peak_f32_flops = 0;
  double memory_bytes = 0;
  double memory_bandwidth = 0;  // HBM (or DRAM) bytes/s
  // Per device, each direction: NVLink (or shared memory) inside a node, the
  // device's share of the network between nodes.
  double intra_node_bandwidth = 0;
  double intra_node_latency = 0;
  double inter_node_bandwidth = 0;
  double inter_node_latency = 0;
  // The GEMM-efficiency model: a layer's matrix products run at
  //   peak * gemm_max_efficiency * w / (w + gemm_half_width)
  // where w = h / tp is the narrowest dimension of the shard's products: small shards
  // keep fewer tensor cores busy and spend more of their time loading operands.
  double gemm_max_efficiency = 0.7;
  double gemm_half_width = 300;
  // And times rows / (rows + gemm_half_rows), rows = the microbatch's tokens (over
  // cp): a product of few rows reuses each loaded weight less. 0: rows do not
  // matter (the GPU presets, whose microbatches are wide); fitted on a CPU from two
  // calibration runs of different microbatch sizes (this_cpu.h).
  double gemm_half_rows = 0;
  // Each microbatch's backward adds its weight gradients into the step's
  // accumulators: the stage's f32 gradients move this many times through memory per
  // microbatch, at memory_bandwidth (Loom's CPU layers write a fresh gradient
  // tensor and add it in). 0 where the products accumulate in place (Megatron's
  // gradient-accumulation fusion); fitted like gemm_half_rows.
  double grad_accumulate_passes = 0;
  // The element-wise model: layer norms, softmax, dropout, GELU and residuals move
  // their activations this many times through memory (forward, recompute and
  // backward), at memory_bandwidth.
  double elementwise_passes = 4;
  // The attention's score and context products run at this fraction of the GEMM
  // rate (batched small products on a GPU; Loom's fused kernel on a CPU).
  double attention_efficiency = 1;
  // Loom's model keeps fused attention (no s x s scores in memory): the element-wise
  // and memory models use topology's fused-attention formula instead of
  // Korthikanti et al.'s.
  bool fused_attention = false;
  // The s x s attention scores are never stored (FlashAttention, in the software of
  // the H100 and H200 runs): memory and element-wise traffic by Korthikanti et al.'s
  // formula without its 5as/h term, as under selective recompute, which then costs
  // nothing more than no recompute.
  bool flash_attention = false;
  // Sequence parallelism with tp (Korthikanti et al.): the norms' and dropouts'
  // activations split over tp too; the same bytes move (reduce-scatter and
  // all-gather in place of each all-reduce). In the H100 and H200 runs' software.
  bool sequence_parallel = false;
  // The share of data-parallel traffic the framework hides behind compute (0: the
  // Megatron-LM runs of 2021 reduced gradients after the backward).
  double dp_overlap = 0;
  // Whether the job all-reduces (ZeRO 0) each unit's gradient beside the step's last
  // backward, as DDP and Loom's train (--overlap_grad_reduce) do: what that backward
  // on the rank's first stage does not cover is exposed, and at least the last
  // unit's share (the first block and the embeddings, reduced after the backward is
  // done). Replaces dp_overlap at ZeRO 0.
  bool dp_overlaps_last_backward = false;
  // Seconds a step costs beyond its compute, communication and optimizer (the job's
  // bookkeeping, loss reduction, thread hand-offs): fitted on a CPU, 0 on the GPUs.
  double step_overhead_seconds = 0;
};

// KnownDevices returns the table, in order: a100-80gb, h100-80gb, h200.
const std::vector<DeviceSpec>& KnownDevices();

// FindDevice returns the table entry named `name`; InvalidArgument naming it and the
// known names otherwise. ("this-cpu" is measured, not looked up: see the CLI.)
absl::StatusOr<DeviceSpec> FindDevice(absl::string_view name);

}  // namespace planner
}  // namespace loom

#endif  // LOOM_TOOLS_PLANNER_DEVICE_H_
