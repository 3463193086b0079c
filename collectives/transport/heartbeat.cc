#include "collectives/transport/heartbeat.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace loom {

absl::Duration HeartbeatInterval(absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return absl::Seconds(1);
  return std::clamp(timeout / 10, absl::Milliseconds(10), absl::Seconds(1));
}

absl::Status ValidateHeartbeatTimeout(absl::Duration timeout, absl::string_view what) {
  if (timeout == absl::InfiniteDuration() || timeout >= kMinHeartbeatTimeout) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      what, " ", absl::FormatDuration(timeout), " is below ",
      absl::FormatDuration(kMinHeartbeatTimeout), " (use inf to turn heartbeats off)"));
}

}  // namespace loom
