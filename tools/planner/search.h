// Plan: the planner's search. Enumerates dp x tp x pp x cp over the world, the ZeRO
// stage, the pipeline schedule and its virtual stages, the microbatch size and the
// recompute policy, each left free or fixed by the caller; drops what does not fit
// in the device's memory (memory_model.h); and ranks the rest by the step time
// PredictStep simulates (step_model.h). Only candidates whose StepLowerBound could
// still reach the top `keep` are simulated, so the ranking is exact and a search over
// thousands of GPUs takes seconds.
//
// Example (the Megatron-LM paper's 39.1B model on 512 A100s, mesh fixed):
//   PlanRequest req;
//   req.shape = {.layers = 48, .hidden = 8192, .heads = 64, .seq_len = 2048, .vocab = 51200};
//   req.global_batch = 1536;  req.world = 512;  req.gpus_per_node = 8;
//   req.device = *FindDevice("a100-80gb");
//   req.fixed.tp = 8;  req.fixed.pp = 2;  req.fixed.recompute = Recompute::kFull;
//   LOOM_ASSIGN_OR_RETURN(PlanResult plan, Plan(req));
//   plan.ranked[0].config.ToString();
//     // "dp=32 tp=8 pp=2 cp=1 zero=2 zb-v mbs=2 recompute=full bf16"
//   plan.ranked[0].prediction.tflops_per_device;   // 140.3 (published: 138)
#ifndef LOOM_TOOLS_PLANNER_SEARCH_H_
#define LOOM_TOOLS_PLANNER_SEARCH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/planner/device.h"
#include "tools/planner/memory_model.h"
#include "tools/planner/model_flops.h"
#include "tools/planner/step_model.h"

namespace loom {
namespace planner {

// FixedChoices: what the caller pins; an empty field is searched.
struct FixedChoices {
  std::optional<int64_t> dp, tp, pp, cp;
  std::optional<int> zero;
  std::optional<PipelineScheduleKind> schedule;
  std::optional<int64_t> virtual_stages;
  std::optional<int64_t> microbatch_size;
  std::optional<Recompute> recompute;
};

struct PlanRequest {
  TransformerShape shape;
  int64_t global_batch = 0;  // sequences
  int64_t world = 0;         // devices (GPUs, or ranks on a CPU)
  int64_t gpus_per_node = 8;
  DeviceSpec device;
  ComputeDtype dtype = ComputeDtype::kBf16;
  FixedChoices fixed;
  // Searched microbatch sizes: powers of two up to this.
  int64_t max_microbatch_size = 16;
  // Searched virtual stages of interleaved-1f1b: 2 up to this.
  int64_t max_virtual_stages = 8;
  // Candidates ranked (and simulated) at the most.
  int64_t keep = 20;
  // StepInput::even_layers_only: for a framework that splits layers evenly only
  // (Loom's job balances them: StageLayout::WithBalancedLayers).
  bool even_layers_only = false;
  // StepInput::microbatches_at_least_pp: true for Loom's job.
  bool microbatches_at_least_pp = false;
};

struct Candidate {
  PlanConfig config;
  MemoryEstimate memory;
  StepPrediction prediction;
};

struct PlanResult {
  std::vector<Candidate> ranked;  // fastest first, at most `keep`
  int64_t enumerated = 0;         // candidates that are valid configurations
  int64_t too_large = 0;          // of those, candidates that do not fit
  int64_t simulated = 0;          // candidates PredictStep ran on
  // Of the candidates that do not fit, the one needing the least memory.
  std::optional<Candidate> smallest;
};

// Plan returns the ranking. InvalidArgument naming the value for a bad shape or
// request (world or batch below 1, heads not dividing hidden, a fixed choice that no
// valid configuration has: "no configuration of 24 devices runs this model and batch:
// tp=3 does not divide the 32 heads, and so on"), or when nothing
// fits: "the model fits nowhere on 8 x a100-80gb: the smallest configuration
// (dp=1 tp=8 ...) needs 95.2 GB of 80 GB".
absl::StatusOr<PlanResult> Plan(const PlanRequest& request);

}  // namespace planner
}  // namespace loom

#endif  // LOOM_TOOLS_PLANNER_SEARCH_H_
