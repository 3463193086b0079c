// PredictStep: the time of one training step of a transformer under one parallel
// configuration on a cluster, by simulating the step from its parts:
//  - each layer's matrix products, from their FLOPs and the device's GEMM-efficiency
//    model (device.h), the attention's at the device's attention efficiency, and its
//    element-wise passes over the activation bytes of topology/memory_estimate.h at
//    the memory bandwidth;
//  - tensor parallelism's all-reduces (two per layer in the forward, two in the
//    backward, two more when the forward is recomputed), ring-priced on the link
//    inside a node (between nodes when tp spans them);
//  - context parallelism's ring attention: K and V travel cp - 1 hops forward, and
//    with their gradients cp - 1 hops backward; each hop hides behind one block of
//    attention, and only what it does not hide counts;
//  - the pipeline: the schedule run by pipeline/simulator.h with each stage's costs
//    (the last stage also computes the logits) and the point-to-point transfer of one
//    microbatch's activations as its latency, so the bubble is the simulator's;
//  - data parallelism: the gradient all-reduce (ZeRO 0), reduce-scatter and
//    all-gather (ZeRO 1, 2: the same bytes), and ZeRO-3's all-gathers of the
//    parameters before each microbatch's forward and backward, ring-priced on the
//    link the data-parallel group spans; `dp_overlap` of it hidden behind compute,
//    or (dp_overlaps_last_backward, ZeRO 0) what the last microbatch's backward on
//    rank 0 does not cover, and at least the last unit's share;
//  - the optimizer step: AdamW's 28 bytes per local parameter (reads of the f32
//    master, gradient, m and v, writes of three) at the memory bandwidth;
//  - the device's fitted per-step overhead.
// What it leaves out: kernel launch overheads on a GPU, the embedding's gather,
// imbalance of the first and last stages beyond the logits, contention between
// links, and (on a CPU) the slower clock when every core is busy (tools/docs/plan.md,
// "Accuracy here", says how far each matters).
//
// Example (the Megatron-LM paper's 39.1B row on 512 A100s):
//   StepInput in;
//   in.shape = {.layers = 48, .hidden = 8192, .heads = 64, .seq_len = 2048, .vocab = 51200};
//   in.global_batch = 1536;  in.device = *FindDevice("a100-80gb");  in.gpus_per_node = 8;
//   in.config.dp = 32;  in.config.tp = 8;  in.config.pp = 2;
//   in.config.schedule = PipelineScheduleKind::kInterleaved1F1B;  in.config.virtual_stages = 2;
//   in.config.recompute = Recompute::kFull;
//   LOOM_ASSIGN_OR_RETURN(StepPrediction p, PredictStep(in));
//   p.tflops_per_device;   // about 140 (published: 138)
#ifndef LOOM_TOOLS_PLANNER_STEP_MODEL_H_
#define LOOM_TOOLS_PLANNER_STEP_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/planner/device.h"
#include "tools/planner/model_flops.h"
#include "topology/parallel_config.h"
#include "topology/recompute.h"

namespace loom {
namespace planner {

enum class ComputeDtype { kBf16, kF32 };

// PlanConfig: one point of the search space.
struct PlanConfig {
  int64_t dp = 1;
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t cp = 1;
  int zero = 0;
  PipelineScheduleKind schedule = PipelineScheduleKind::k1F1B;
  int64_t virtual_stages = 1;  // interleaved-1f1b: model chunks per pipeline rank; zb-v: 2
  int64_t microbatch_size = 1;
  Recompute recompute = Recompute::kNone;
  ComputeDtype dtype = ComputeDtype::kBf16;

  // ToString returns "dp=32 tp=8 pp=2 cp=1 zero=0 interleaved-1f1b(v=2) mbs=1 recompute=full bf16".
  std::string ToString() const;
};

struct StepInput {
  TransformerShape shape;
  int64_t global_batch = 0;  // sequences per step
  DeviceSpec device;
  int64_t gpus_per_node = 8;
  PlanConfig config;
  // Layers split evenly over the stages only (a framework without uneven splits).
  // Otherwise a split that does not divide gives the extra layers to the inner
  // stages first (StageLayerCounts), as Megatron-LM's uneven first and last stages,
  // Llama 3's runs and Loom's job do.
  bool even_layers_only = false;
  // Every schedule needs at least pp microbatches (Loom's job: its executor runs a
  // schedule only once every stage has work); otherwise GPipe, 1F1B and ZB-H1 may run
  // fewer, with the pipeline never full.
  bool microbatches_at_least_pp = false;
};

// UsesSequenceParallelism: the device's software splits activations over tp
// (DeviceSpec::sequence_parallel), tp > 1, and the local sequence splits over tp.
bool UsesSequenceParallelism(const StepInput& input);

// StageLayerCounts returns the layers of each of `stages` stages: layers / stages
// each, the rest one more each to the inner stages first, then to the first stage,
// then to the last (126 over 16: 7, then 8 fourteen times, then 7).
std::vector<int64_t> StageLayerCounts(int64_t layers, int64_t stages);

// StepPrediction: the predicted step and its parts, in seconds.
struct StepPrediction {
  double step_seconds = 0;
  double pipeline_seconds = 0;       // the simulated makespan of forward and backward
  double bubble_ratio = 0;           // the simulator's, idle over the device time
  double layer_forward_seconds = 0;  // one layer, one microbatch, everything but tp
  double layer_backward_seconds = 0; // with the recomputed forward
  double layer_gemm_seconds = 0;     // of those: the products, forward + backward
  double layer_elementwise_seconds = 0;
  double layer_grad_accumulate_seconds = 0;  // one layer, one microbatch (in backward)
  double layer_tp_seconds = 0;       // one layer, one microbatch: tp all-reduces
  double layer_cp_seconds = 0;       // one layer, one microbatch: exposed ring hops
  double logits_seconds = 0;         // the last stage's head, one microbatch
  double p2p_seconds = 0;            // one microbatch's activations between stages
  double dp_seconds = 0;             // data-parallel traffic, before overlap
  double dp_exposed_seconds = 0;     // what of it the step waits for
  double optimizer_seconds = 0;
  double overhead_seconds = 0;       // the device's step_overhead_seconds
  double gemm_efficiency = 0;        // the model's, for this shard width
  int64_t microbatches = 0;          // per pipeline, per step
  double tokens_per_second = 0;
  double tflops_per_device = 0;      // Megatron's count (MegatronFlopsPerIteration)
  double mfu = 0;                    // ModelFlopsPerToken * tokens/s / devices / peak

  // Breakdown returns the parts as lines, for --explain.
  std::string Breakdown() const;
};

// PredictStep returns the prediction. InvalidArgument naming the value for a bad
// shape (ValidateShape), a degree below 1, a batch that does not split into whole
// microbatches over dp, heads, key-value heads or the MLP not splitting over tp, the
// sequence not splitting over cp, fewer layers than stages (or, even_layers_only,
// layers not splitting over pp * virtual_stages), a zero stage
// outside 0..3, or a device with a rate that is not positive; the schedule
// generators' and simulator's errors (e.g. interleaved-1f1b with microbatches not a
// multiple of pp).
absl::StatusOr<StepPrediction> PredictStep(const StepInput& input);

// ValidateStepInput returns PredictStep's InvalidArgument checks alone.
absl::Status ValidateStepInput(const StepInput& input);

// StepLowerBound returns PredictStep's step time with the pipeline's bubble left
// out (the busiest rank's compute alone): never above PredictStep's, and cheap,
// so a search simulates only the candidates whose bound can still rank.
absl::StatusOr<double> StepLowerBound(const StepInput& input);

// Microbatches returns global_batch / (dp * microbatch_size), or InvalidArgument
// naming the three when it does not divide.
absl::StatusOr<int64_t> Microbatches(int64_t global_batch, const PlanConfig& config);

}  // namespace planner
}  // namespace loom

#endif  // LOOM_TOOLS_PLANNER_STEP_MODEL_H_
