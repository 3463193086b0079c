#include "pipeline/generators.h"

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom {

absl::StatusOr<Schedule> MakeSchedule(PipelineScheduleKind kind, int64_t num_ranks,
                                      int64_t num_microbatches, int64_t virtual_stages) {
  const bool v_ok = kind == PipelineScheduleKind::kInterleaved1F1B || virtual_stages == 1 ||
                    (kind == PipelineScheduleKind::kZeroBubbleV && virtual_stages == 2);
  if (!v_ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(PipelineScheduleName(kind), " does not take virtual_stages=", virtual_stages,
                     kind == PipelineScheduleKind::kZeroBubbleV ? " (it places 2 stages per rank)"
                                                                : " (it places 1 stage per rank)"));
  }
  switch (kind) {
    case PipelineScheduleKind::kGPipe:
      return MakeGPipeSchedule(num_ranks, num_microbatches);
    case PipelineScheduleKind::k1F1B:
      return Make1F1BSchedule(num_ranks, num_microbatches);
    case PipelineScheduleKind::kInterleaved1F1B:
      return MakeInterleaved1F1BSchedule(num_ranks, num_microbatches, virtual_stages);
    case PipelineScheduleKind::kZeroBubbleH1:
      return MakeZeroBubbleH1Schedule(num_ranks, num_microbatches);
    case PipelineScheduleKind::kZeroBubbleV:
      return MakeZeroBubbleVSchedule(num_ranks, num_microbatches);
  }
  return absl::InvalidArgumentError("unknown pipeline schedule kind");
}

}  // namespace loom
