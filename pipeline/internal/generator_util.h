// Helpers shared by the schedule generators. Private to //pipeline:generators.
#ifndef LOOM_PIPELINE_INTERNAL_GENERATOR_UTIL_H_
#define LOOM_PIPELINE_INTERNAL_GENERATOR_UTIL_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pipeline/action.h"
#include "pipeline/schedule.h"
#include "pipeline/stage_layout.h"

namespace loom {
namespace pipeline_internal {

// StartSchedule checks the counts shared by every generator (num_ranks >= 1,
// 1 <= num_microbatches, the stage-microbatch limit of the verifier) and returns an
// empty schedule named `name` on `layout` (which the caller built from num_ranks).
// InvalidArgument naming the schedule and the values otherwise.
absl::StatusOr<Schedule> StartSchedule(absl::string_view name, absl::StatusOr<StageLayout> layout,
                                       int64_t num_ranks, int64_t num_microbatches);

// OneFOneBWarmup: the forwards rank `rank` of `num_ranks` runs before its first
// backward in 1F1B (Megatron-LM: enough to fill the pipeline below it), capped at
// the microbatches there are. ZB-H1 keeps the same warmup, hence the same memory.
inline int64_t OneFOneBWarmup(int64_t num_ranks, int64_t rank, int64_t num_microbatches) {
  const int64_t below = num_ranks - rank - 1;
  return below < num_microbatches ? below : num_microbatches;
}

// Appends a compute action to a rank's list.
inline void Add(std::vector<Action>& actions, ActionKind kind, int64_t stage, int64_t microbatch) {
  actions.push_back(Action{kind, stage, microbatch});
}

}  // namespace pipeline_internal
}  // namespace loom

#endif  // LOOM_PIPELINE_INTERNAL_GENERATOR_UTIL_H_
