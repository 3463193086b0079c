// 1F1B (PipeDream-Flush, Narayanan et al. 2021; Megatron-LM's
// forward_backward_pipelining_without_interleaving): a warmup of forwards deep enough
// to fill the pipeline below this rank, then one forward and one backward in turn,
// so a rank never holds more than p - r activations.

#include <cstdint>
#include <vector>

#include "core/status_macros.h"
#include "pipeline/generators.h"
#include "pipeline/internal/generator_util.h"

namespace loom {

absl::StatusOr<Schedule> Make1F1BSchedule(int64_t num_ranks, int64_t num_microbatches) {
  LOOM_ASSIGN_OR_RETURN(Schedule schedule,
                        pipeline_internal::StartSchedule("1f1b", StageLayout::Loop(num_ranks),
                                                         num_ranks, num_microbatches));
  const int64_t m = num_microbatches;
  for (int64_t rank = 0; rank < num_ranks; ++rank) {
    std::vector<Action>& actions = schedule.ranks[rank];
    const int64_t warmup = pipeline_internal::OneFOneBWarmup(num_ranks, rank, m);
    for (int64_t mb = 0; mb < warmup; ++mb) {
      pipeline_internal::Add(actions, ActionKind::kForward, rank, mb);
    }
    for (int64_t i = 0; i < m - warmup; ++i) {  // Steady state.
      pipeline_internal::Add(actions, ActionKind::kForward, rank, warmup + i);
      pipeline_internal::Add(actions, ActionKind::kBackward, rank, i);
    }
    for (int64_t mb = m - warmup; mb < m; ++mb) {  // Cooldown.
      pipeline_internal::Add(actions, ActionKind::kBackward, rank, mb);
    }
  }
  return schedule;
}

}  // namespace loom
