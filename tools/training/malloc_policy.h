// ReuseFreedMemory: the training job's allocator policy. glibc's malloc hands a
// large block (above a threshold that starts at 128 KiB) its own mmap and returns
// it to the kernel on free, and trims the top of its heaps; the next step's
// block of the same size then comes back as fresh pages, one page fault per 4 KiB
// on first touch. The layers make per-call temporaries of the same sizes every
// step, so the job tells malloc to keep what it frees for its next allocations:
// blocks up to glibc's largest threshold (32 MiB on 64-bit) come from the heaps,
// which are never trimmed. Larger blocks glibc maps and unmaps whatever it is told;
// those of core/aligned_buffer.h (every Tensor) go to core/large_block_cache.h's
// cache on free, which the policy turns on, bounded by a quarter of the host's
// memory. The steady state then takes no page faults (the job reports them per
// step) and keeps resident what its largest step needed, which the next step needs
// again.
//
// Example (first thing in main, before any thread starts):
//   loom::ReuseFreedMemory();
#ifndef LOOM_TOOLS_TRAINING_MALLOC_POLICY_H_
#define LOOM_TOOLS_TRAINING_MALLOC_POLICY_H_

namespace loom {

// ReuseFreedMemory sets the policy above (mallopt). It returns false where malloc
// refused a setting (another allocator replaced glibc's, e.g. under a sanitizer,
// which keeps its own pools); the job runs either way.
bool ReuseFreedMemory();

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_MALLOC_POLICY_H_
