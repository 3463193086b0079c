// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", section 2.1): 1F1B with
// each backward split into I (input gradient) and W (weight gradient). Only I is on
// the pipeline's critical path, so rank r runs its first r I's without their W's;
// the I's then travel up the pipeline without waiting, and the W's owed fill the
// cooldown, where 1F1B's ranks sit idle waiting for gradients. The delay r is
// p - 1 minus the rank's warmup, the paper's "starting points of W adjusted to the
// number of warm-up microbatches" (the construction of PyTorch's zero-bubble 1F1B
// and of the paper's zb-h1 patch for Megatron-LM).

#include <cstdint>
#include <vector>

#include "core/status_macros.h"
#include "pipeline/generators.h"
#include "pipeline/internal/generator_util.h"

namespace loom {

absl::StatusOr<Schedule> MakeZeroBubbleH1Schedule(int64_t num_ranks, int64_t num_microbatches) {
  LOOM_ASSIGN_OR_RETURN(Schedule schedule,
                        pipeline_internal::StartSchedule("zb-h1", StageLayout::Loop(num_ranks),
                                                         num_ranks, num_microbatches));
  const int64_t m = num_microbatches;
  for (int64_t rank = 0; rank < num_ranks; ++rank) {
    std::vector<Action>& actions = schedule.ranks[rank];
    const int64_t warmup = pipeline_internal::OneFOneBWarmup(num_ranks, rank, m);
    const int64_t w_delay = rank;
    for (int64_t mb = 0; mb < warmup; ++mb) {
      pipeline_internal::Add(actions, ActionKind::kForward, rank, mb);
    }
    int64_t next_w = 0;
    for (int64_t j = 0; j < m; ++j) {
      if (j < m - warmup) pipeline_internal::Add(actions, ActionKind::kForward, rank, warmup + j);
      pipeline_internal::Add(actions, ActionKind::kBackwardInput, rank, j);
      if (j >= w_delay)
        pipeline_internal::Add(actions, ActionKind::kBackwardWeight, rank, next_w++);
    }
    while (next_w < m) pipeline_internal::Add(actions, ActionKind::kBackwardWeight, rank, next_w++);
  }
  return schedule;
}

}  // namespace loom
