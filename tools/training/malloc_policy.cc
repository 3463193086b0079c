#include "tools/training/malloc_policy.h"

#include <malloc.h>

namespace loom {

bool ReuseFreedMemory() {
  // 32 MiB is glibc's upper limit for M_MMAP_THRESHOLD on 64-bit (4 MiB x
  // sizeof(long)); setting it also turns off the threshold's own adjustment.
  constexpr int kLargestHeapBlock = 32 << 20;
  // Never give the top of a heap back: the next step takes it again.
  constexpr int kNeverTrim = 0x7fffffff;
  const bool threshold = mallopt(M_MMAP_THRESHOLD, kLargestHeapBlock) == 1;
  const bool trim = mallopt(M_TRIM_THRESHOLD, kNeverTrim) == 1;
  return threshold && trim;
}

}  // namespace loom
