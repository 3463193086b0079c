// Built without CUDA: nothing can be pinned for device copies.
#include "offload/internal/pinned_memory.h"

namespace loom {
namespace offload_internal {

absl::Status PinningAvailable() {
  return absl::FailedPreconditionError(
      "pinned host memory needs CUDA, and Loom was built without it (--config=cuda)");
}

absl::Status Pin(void*, size_t) { return PinningAvailable(); }

void Unpin(void*) {}

}  // namespace offload_internal
}  // namespace loom
