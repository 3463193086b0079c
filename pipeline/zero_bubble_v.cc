// ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", the V schedule; the handcrafted
// form PyTorch builds in ScheduleZBVZeroBubble): two stages per rank in a V, rank r
// holding stage r (chunk 0, on the way down) and stage 2p-1-r (chunk 1, on the way
// back up). Phases on rank r, for n microbatches:
//   warmup   2(p-r)-1 chunk-0 forwards; then r pairs (chunk-1 F, chunk-0 F); then
//            p-r triples (chunk-1 F, I, W);
//   steady   until both chunks have run n forwards: a chunk-0 F (while any are
//            left), chunk-0 I and W, chunk-1 F, chunk-1 I and W;
//   cooldown r pairs of I's (chunk 0, chunk 1), then p-r (chunk-0 I, W), then the W's
//            still owed, chunk 1's first.
// The phases need n >= 2p-1 microbatches to line up; for fewer the schedule is built
// for n = 2p-1 and the actions of the extra microbatches are dropped, which keeps
// every dependency (all of an action's inputs belong to its own microbatch).

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/status_macros.h"
#include "pipeline/generators.h"
#include "pipeline/internal/generator_util.h"

namespace loom {

absl::StatusOr<Schedule> MakeZeroBubbleVSchedule(int64_t num_ranks, int64_t num_microbatches) {
  LOOM_ASSIGN_OR_RETURN(Schedule schedule,
                        pipeline_internal::StartSchedule("zb-v", StageLayout::VShape(num_ranks),
                                                         num_ranks, num_microbatches));
  const int64_t p = num_ranks;
  const int64_t m = num_microbatches;
  const int64_t n = std::max(2 * p - 1, m);
  for (int64_t rank = 0; rank < p; ++rank) {
    std::vector<Action> actions;
    const int64_t s0 = rank;
    const int64_t s1 = 2 * p - 1 - rank;
    int64_t f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    const auto add = [&actions](ActionKind kind, int64_t stage, int64_t mb) {
      pipeline_internal::Add(actions, kind, stage, mb);
    };
    for (int64_t i = 0; i < 2 * (p - rank) - 1; ++i) add(ActionKind::kForward, s0, f0++);
    for (int64_t i = 0; i < rank; ++i) {
      add(ActionKind::kForward, s1, f1++);
      add(ActionKind::kForward, s0, f0++);
    }
    for (int64_t i = 0; i < p - rank; ++i) {
      add(ActionKind::kForward, s1, f1++);
      add(ActionKind::kBackwardInput, s1, b1);
      add(ActionKind::kBackwardWeight, s1, b1++);
    }
    while (f1 < f0 || f0 < n) {
      if (f0 < n) add(ActionKind::kForward, s0, f0++);
      add(ActionKind::kBackwardInput, s0, b0);
      add(ActionKind::kBackwardWeight, s0, b0++);
      add(ActionKind::kForward, s1, f1++);
      add(ActionKind::kBackwardInput, s1, b1);
      add(ActionKind::kBackwardWeight, s1, b1++);
    }
    int64_t w0 = b0, w1 = b1;
    for (int64_t i = 0; i < rank; ++i) {
      add(ActionKind::kBackwardInput, s0, b0++);
      add(ActionKind::kBackwardInput, s1, b1++);
    }
    for (int64_t i = 0; i < p - rank; ++i) {
      add(ActionKind::kBackwardInput, s0, b0++);
      add(ActionKind::kBackwardWeight, s0, w0++);
    }
    while (w1 < b1) add(ActionKind::kBackwardWeight, s1, w1++);
    while (w0 < b0) add(ActionKind::kBackwardWeight, s0, w0++);
    for (const Action& action : actions) {
      if (action.microbatch < m) schedule.ranks[rank].push_back(action);
    }
  }
  return schedule;
}

}  // namespace loom
