#include "tools/training/malloc_policy.h"

#include <malloc.h>
#include <unistd.h>

#include <cstddef>

#include "core/large_block_cache.h"

namespace loom {

bool ReuseFreedMemory() {
  // 32 MiB is glibc's upper limit for M_MMAP_THRESHOLD on 64-bit (4 MiB x
  // sizeof(long)); setting it also turns off the threshold's own adjustment.
  constexpr int kLargestHeapBlock = 32 << 20;
  // Never give the top of a heap back: the next step takes it again.
  constexpr int kNeverTrim = 0x7fffffff;
  const bool threshold = mallopt(M_MMAP_THRESHOLD, kLargestHeapBlock) == 1;
  const bool trim = mallopt(M_TRIM_THRESHOLD, kNeverTrim) == 1;
  // Above the threshold glibc maps every block and unmaps it on free: the tensors
  // and buffers keep theirs for the next of the same size, up to a quarter of the
  // host's memory.
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_bytes = sysconf(_SC_PAGESIZE);
  const size_t host_bytes =
      pages > 0 && page_bytes > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page_bytes)
                                  : size_t{8} << 30;
  EnableLargeBlockCache(host_bytes / 4);
  return threshold && trim;
}

}  // namespace loom
