#include "core/aligned_buffer.h"

#include <cstdlib>
#include <cstring>

#include "core/large_block_cache.h"

namespace loom {
namespace aligned_buffer_internal {

absl::StatusOr<std::unique_ptr<void, FreeDeleter>> AllocateAlignedBytes(size_t bytes,
                                                                       size_t alignment,
                                                                       bool zero) {
  // aligned_alloc needs a size that is a multiple of the alignment; a zero-size buffer
  // still gets one aligned block so data() is a valid, distinct pointer.
  const size_t rounded = bytes == 0 ? alignment : (bytes + alignment - 1) / alignment * alignment;
  if (rounded < bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(bytes, " bytes rounded up to alignment ", alignment, " overflows size_t"));
  }
  void* memory = large_block_cache_internal::TakeBlock(rounded, alignment);
  if (memory == nullptr) memory = std::aligned_alloc(alignment, rounded);
  if (memory == nullptr && rounded >= kLargeBlockBytes) {
    // The cache's blocks may be what the system lacks: give them back, once.
    ReleaseLargeBlockCache();
    memory = std::aligned_alloc(alignment, rounded);
  }
  if (memory == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("aligned_alloc(", alignment, ", ", rounded,
                                                     ") failed: out of host memory"));
  }
  if (zero) std::memset(memory, 0, rounded);
  return std::unique_ptr<void, FreeDeleter>(memory, FreeDeleter{rounded});
}

void FreeDeleter::operator()(void* p) const {
  if (!large_block_cache_internal::GiveBlock(p, bytes)) std::free(p);
}

}  // namespace aligned_buffer_internal
}  // namespace loom
