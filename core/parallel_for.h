// ParallelFor: split [0, n) into contiguous ranges and run them on up to `threads`
// threads (the caller's included), for the independent pieces of a rank's work, such
// as the attention heads of a batch, on the cores the rank was given
// (--threads_per_rank). Each index is handled by exactly one call of `body`, so a body
// whose pieces write disjoint memory gives the same bits at every thread count.
//
// Threads are started for the call and joined before it returns; a body's error
// does not stop the other ranges, and the first error (by range) is returned.
//
// Example (8 heads on 2 threads: [0, 4) here and [4, 8) on a second thread):
//   LOOM_RETURN_IF_ERROR(ParallelFor(8, 2, [&](int64_t begin, int64_t end) {
//     for (int64_t head = begin; head < end; ++head) LOOM_RETURN_IF_ERROR(Head(head));
//     return absl::OkStatus();
//   }));
//   ParallelFor(8, 0, body);  // InvalidArgument: "ParallelFor: threads 0 must be in [1, 1024]"
#ifndef LOOM_CORE_PARALLEL_FOR_H_
#define LOOM_CORE_PARALLEL_FOR_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"

namespace loom {

// ParallelFor runs body(begin, end) over min(threads, n) near-equal ranges of [0, n).
// n = 0 runs nothing. InvalidArgument naming the value when n < 0 or threads is
// outside [1, 1024].
absl::Status ParallelFor(int64_t n, int threads,
                         const std::function<absl::Status(int64_t begin, int64_t end)>& body);

}  // namespace loom

#endif  // LOOM_CORE_PARALLEL_FOR_H_
