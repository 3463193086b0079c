// ParallelFor: split [0, n) into contiguous ranges and run them on up to `threads`
// threads (the caller's included), for the independent pieces of a rank's work, such
// as the attention heads of a batch or the rows of an element-wise pass, on the cores
// the rank was given (--threads_per_rank). Each index is handled by exactly one call of
// `body`, so a body whose pieces write disjoint memory gives the same bits at every
// thread count.
//
// The ranges run on the calling thread and its own parked helper threads
// (core/internal/helper_team.h), started on first need and kept for the thread's life,
// so a call costs a wake-up (microseconds), not a thread start; each calling thread
// (a tensor-parallel rank running as a thread) has helpers of its own. A ParallelFor
// inside another's body runs inline on that thread: nested work never exceeds the
// rank's threads. A body's error does not stop the other ranges, and the first error
// (by range) is returned.
//
// ComputeThreads() is the process-wide thread count of a rank's compute (1 unless
// SetComputeThreads says more; Gemm's SetGemmThreads sets it too), and
// ParallelForEach is ParallelFor on that many threads for element-wise passes that
// cannot fail, keeping short passes on the caller.
//
// Example (8 heads on 2 threads: [0, 4) here and [4, 8) on a helper):
//   LOOM_RETURN_IF_ERROR(ParallelFor(8, 2, [&](int64_t begin, int64_t end) {
//     for (int64_t head = begin; head < end; ++head) LOOM_RETURN_IF_ERROR(Head(head));
//     return absl::OkStatus();
//   }));
//   ParallelForEach(y.size(), /*grain=*/16384, [&](int64_t begin, int64_t end) {
//     for (int64_t i = begin; i < end; ++i) y[i] += x[i];
//   });
//   ParallelFor(8, 0, body);  // InvalidArgument: "ParallelFor: threads 0 must be in [1, 1024]"
#ifndef LOOM_CORE_PARALLEL_FOR_H_
#define LOOM_CORE_PARALLEL_FOR_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"

namespace loom {

// ParallelFor runs body(begin, end) over min(threads, n) near-equal ranges of [0, n).
// n = 0 runs nothing. InvalidArgument naming the value when n < 0 or threads is
// outside [1, 1024].
absl::Status ParallelFor(int64_t n, int threads,
                         absl::FunctionRef<absl::Status(int64_t begin, int64_t end)> body);

// SetComputeThreads sets the threads a rank's compute uses (its element-wise passes
// and attention heads here, its products through Gemm). Process-wide: the training
// job sets it from --threads_per_rank before its ranks start. InvalidArgument naming
// the value outside [1, 1024].
absl::Status SetComputeThreads(int threads);

// ComputeThreads returns the count set (1 by default).
int ComputeThreads();

// The elements of a streaming pass (a load, an add, a store each) below which one
// more thread costs more than it saves: a wake-up takes a few microseconds, about as
// long as 16 Ki floats take to stream. The grain the element-wise passes use.
inline constexpr int64_t kElementwiseGrain = 16384;

// ParallelForEach runs body(begin, end) over [0, n) on up to ComputeThreads() threads,
// each range at least `grain` indices long (n < 2 * grain stays on the caller, where a
// wake-up would cost more than it saves). n <= 0 runs nothing; grain < 1 counts as 1.
void ParallelForEach(int64_t n, int64_t grain,
                     absl::FunctionRef<void(int64_t begin, int64_t end)> body);

}  // namespace loom

#endif  // LOOM_CORE_PARALLEL_FOR_H_
