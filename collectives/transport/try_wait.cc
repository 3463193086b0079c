// Transport::TryWait's default: a backend that cannot wait without cancelling says so.
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "collectives/transport/transport.h"

namespace loom {

absl::StatusOr<bool> Transport::TryWait(absl::Span<const Request> requests, absl::Time until) {
  (void)requests;
  (void)until;
  return absl::UnimplementedError(
      absl::StrCat("the ", name(), " transport has no TryWait (it cannot wait without cancelling)"));
}

}  // namespace loom
