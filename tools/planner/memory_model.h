// MemoryPerDevice: the bytes the busiest device of a configuration holds at its peak,
// from topology/memory_estimate.h: the ZeRO paper's model states (bytes per
// parameter by precision, sharded by stage), and activations by Korthikanti et al.'s
// formula times the schedule's in-flight microbatches on the first pipeline rank, or
// (a device whose model keeps fused attention, as Loom's does) by topology's
// fused-attention formula per stage model, which no in-flight count multiplies.
// The last pipeline rank also holds the logits of a microbatch in f32.
//
// Example (the 1.7B row of the Megatron-LM paper, dp 32, mbs 1, full recompute, bf16):
//   MemoryEstimate mem = *MemoryPerDevice(input);
//   mem.ToString();         // "27.7 GB = states 26.4 GB + activations 890.2 MB +
//                           //  logits 419.4 MB" (16 bytes per parameter at ZeRO 0)
//   mem.Fits(input.device); // true on an 80 GB A100
#ifndef LOOM_TOOLS_PLANNER_MEMORY_MODEL_H_
#define LOOM_TOOLS_PLANNER_MEMORY_MODEL_H_

#include <string>

#include "absl/status/statusor.h"
#include "tools/planner/step_model.h"

namespace loom {
namespace planner {

struct MemoryEstimate {
  double model_states = 0;  // parameters, gradients, optimizer states
  double zero_buffers = 0;  // ZeRO-3's gathered layers (the one in use, the next)
  double activations = 0;   // the busiest pipeline rank's
  double logits = 0;        // the last rank's f32 logits of one microbatch
  double total() const { return model_states + zero_buffers + activations + logits; }
  // Fits is true when the total is at most the device's memory.
  bool Fits(const DeviceSpec& device) const { return total() <= device.memory_bytes; }
  // ToString: "27.7 GB = states 26.4 GB + activations 890.2 MB + logits 419.4 MB".
  std::string ToString() const;
};

// MemoryPerDevice returns the estimate; the errors of PredictStep's checks and of
// topology's estimates (sizes not splitting).
absl::StatusOr<MemoryEstimate> MemoryPerDevice(const StepInput& input);

}  // namespace planner
}  // namespace loom

#endif  // LOOM_TOOLS_PLANNER_MEMORY_MODEL_H_
