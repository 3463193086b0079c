// Forward-only (evaluation) schedules: GPipe's forward half on any stage layout.
// Every rank runs its stages' forwards in wavefront order, F(s, mb) ranked by
// s + mb and ties going to the lower microbatch. The rank grows by one along every
// dependency (F(s, mb) after F(s-1, mb)), so no rank's order can wait on a later
// action of its own, and Lower places the messages without a deadlock.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "pipeline/generators.h"
#include "pipeline/internal/generator_util.h"

namespace loom {

absl::StatusOr<Schedule> MakeForwardOnlySchedule(const StageLayout& layout,
                                                 int64_t num_microbatches) {
  const int64_t m = num_microbatches;
  LOOM_ASSIGN_OR_RETURN(Schedule schedule, pipeline_internal::StartSchedule("forward-only", layout,
                                                                            layout.num_ranks(), m));
  for (int64_t rank = 0; rank < layout.num_ranks(); ++rank) {
    std::vector<int64_t> stages = layout.StagesOf(rank);
    // Highest stage first: at equal s + mb it carries the lower microbatch.
    std::reverse(stages.begin(), stages.end());
    std::vector<Action>& actions = schedule.ranks[rank];
    actions.reserve(static_cast<size_t>(m) * stages.size());
    for (int64_t wave = stages.back(); wave < stages.front() + m; ++wave) {
      for (const int64_t stage : stages) {
        const int64_t mb = wave - stage;
        if (mb >= 0 && mb < m) pipeline_internal::Add(actions, ActionKind::kForward, stage, mb);
      }
    }
  }
  return schedule;
}

absl::StatusOr<Schedule> MakeForwardOnlySchedule(int64_t num_ranks, int64_t num_microbatches,
                                                 int64_t stages_per_rank) {
  if (num_ranks < 1 || num_microbatches < 1 || stages_per_rank < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "forward-only needs num_ranks >= 1, num_microbatches >= 1 and stages_per_rank >= 1, got "
        "num_ranks=",
        num_ranks, ", num_microbatches=", num_microbatches, ", stages_per_rank=", stages_per_rank));
  }
  absl::StatusOr<StageLayout> layout = StageLayout::Loop(num_ranks, stages_per_rank);
  if (!layout.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("forward-only: ", layout.status().message()));
  }
  return MakeForwardOnlySchedule(*layout, num_microbatches);
}

}  // namespace loom
