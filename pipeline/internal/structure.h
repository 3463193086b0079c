// Structural checks shared by Lower, Verify and Simulate: the schedule's shape,
// each action's placement, duplicates and completeness, with errors that carry a
// grid of the schedule marking the offending cells. Private to //pipeline.
#ifndef LOOM_PIPELINE_INTERNAL_STRUCTURE_H_
#define LOOM_PIPELINE_INTERNAL_STRUCTURE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pipeline/internal/action_index.h"
#include "pipeline/schedule.h"

namespace loom {
namespace pipeline_internal {

// Schedules with more stage-microbatch pairs are refused: the tables that index
// them would be large, and no real pipeline comes close.
inline constexpr int64_t kMaxStageMicrobatches = int64_t{1} << 24;

// Step columns of the grid in error messages: enough to see the neighbourhood of
// the offending cell without printing a 400-step schedule.
inline constexpr int64_t kErrorGridColumns = 16;

// ScheduleError returns a status with `code` whose message is `message`, a newline,
// and the grid of `schedule` with `marks` drawn as ">text<".
absl::Status ScheduleError(absl::StatusCode code, const Schedule& schedule,
                           std::vector<ActionPosition> marks, absl::string_view message);

// Describe returns "rank 1 step 4 (1F7)".
std::string Describe(const Schedule& schedule, ActionPosition position);

// IndexSchedule checks the schedule's shape (a row per rank of its layout, at least
// one microbatch, not too large) and every action (stage and microbatch in range, on
// the rank that holds its stage, no message between stages of one rank, no action
// twice) and returns the index of all actions. InvalidArgument naming the first
// offending action (lowest rank, then earliest step), with a grid.
absl::StatusOr<ActionIndex> IndexSchedule(const Schedule& schedule);

// CheckComplete checks that every (stage, microbatch) has one forward and one
// backward (B, or I and W), or, in a forward-only schedule (no B, I or W on any
// rank), one forward and no gradient message; and, when the schedule has any
// message, that every message it needs between stages on different ranks is there
// with both halves. InvalidArgument naming the first missing or extra piece (by
// stage, then microbatch).
absl::Status CheckComplete(const Schedule& schedule, const ActionIndex& index);

}  // namespace pipeline_internal
}  // namespace loom

#endif  // LOOM_PIPELINE_INTERNAL_STRUCTURE_H_
