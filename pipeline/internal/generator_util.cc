#include "pipeline/internal/generator_util.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "pipeline/internal/structure.h"

namespace loom {
namespace pipeline_internal {

absl::StatusOr<Schedule> StartSchedule(absl::string_view name, absl::StatusOr<StageLayout> layout,
                                       int64_t num_ranks, int64_t num_microbatches) {
  if (num_ranks < 1 || num_microbatches < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " needs num_ranks >= 1 and num_microbatches >= 1, got num_ranks=", num_ranks,
        ", num_microbatches=", num_microbatches));
  }
  if (!layout.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", layout.status().message()));
  }
  if (num_microbatches > kMaxStageMicrobatches / layout->num_stages()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " with ", layout->num_stages(), " stages allows at most ",
                     kMaxStageMicrobatches / layout->num_stages(),
                     " microbatches, got num_microbatches=", num_microbatches));
  }
  Schedule schedule;
  schedule.name = std::string(name);
  schedule.layout = *std::move(layout);
  schedule.num_microbatches = num_microbatches;
  schedule.ranks.resize(num_ranks);
  return schedule;
}

}  // namespace pipeline_internal
}  // namespace loom
