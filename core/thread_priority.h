// ThreadPriority: the calling thread's scheduling weight on Linux (its nice value),
// for threads whose work is short and latency-bound, such as a communication
// progress thread (collectives/comm_worker.h).
//
// Why: on a host with more busy threads than cores (8 rank processes on 2 cores), a
// progress thread woken by its peer waits for the running compute thread's time
// slice to end, at every hand-shake of a collective; an all-reduce of a few MiB that
// needs about a millisecond of CPU then takes tens of milliseconds. At a higher
// weight the kernel runs the woken thread at once, and the little CPU it needs is
// taken from compute only while it has work.
//
// Example:
//   absl::Status raised = RaiseThisThreadPriority(10);   // nice 0 -> -10
//   // OK; or PermissionDenied "setpriority(thread 4711, nice 0 -> -10): Permission
//   //   denied (needs CAP_SYS_NICE or RLIMIT_NICE)" for an unprivileged process
//   ThisThreadNice();   // -10 after the raise, 0 after a refusal
#ifndef LOOM_CORE_THREAD_PRIORITY_H_
#define LOOM_CORE_THREAD_PRIORITY_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom {

// ThisThreadNice returns the calling thread's nice value (-20..19); the errno as a
// Status where the kernel refuses to say.
absl::StatusOr<int> ThisThreadNice();

// RaiseThisThreadPriority lowers the calling thread's nice value by `steps` (clamped
// at -20), relative to its current one, so a process started under `nice` keeps its
// place. The thread's priority is unchanged on error: InvalidArgument for steps < 0;
// PermissionDenied where the process may not raise priorities (no CAP_SYS_NICE, and
// RLIMIT_NICE too low). Other threads are not affected.
absl::Status RaiseThisThreadPriority(int steps);

}  // namespace loom

#endif  // LOOM_CORE_THREAD_PRIORITY_H_
