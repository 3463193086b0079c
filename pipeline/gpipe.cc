// GPipe (Huang et al. 2019): every microbatch's forward, then every backward.

#include <cstdint>
#include <vector>

#include "core/status_macros.h"
#include "pipeline/generators.h"
#include "pipeline/internal/generator_util.h"

namespace loom {

absl::StatusOr<Schedule> MakeGPipeSchedule(int64_t num_ranks, int64_t num_microbatches) {
  LOOM_ASSIGN_OR_RETURN(Schedule schedule,
                        pipeline_internal::StartSchedule("gpipe", StageLayout::Loop(num_ranks),
                                                         num_ranks, num_microbatches));
  for (int64_t rank = 0; rank < num_ranks; ++rank) {
    std::vector<Action>& actions = schedule.ranks[rank];
    for (int64_t mb = 0; mb < num_microbatches; ++mb) {
      pipeline_internal::Add(actions, ActionKind::kForward, rank, mb);
    }
    for (int64_t mb = 0; mb < num_microbatches; ++mb) {
      pipeline_internal::Add(actions, ActionKind::kBackward, rank, mb);
    }
  }
  return schedule;
}

}  // namespace loom
