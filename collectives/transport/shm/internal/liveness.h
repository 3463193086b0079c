// Liveness: how ranks learn that a peer process is gone, zombies included. Each rank
// holds a process-shared robust mutex in its segment for as long as its endpoint is
// open. When the process dies (kill -9 included) the kernel, tearing it down and
// before it is even a zombie, sets FUTEX_OWNER_DIED in the mutex's futex word. Peers
// only read that word, never lock the mutex: a prober holding it, even for a moment,
// would look like a live owner to the other probers. A probe is one load.
#ifndef LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_LIVENESS_H_
#define LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_LIVENESS_H_

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/mutex.h"

namespace loom {
namespace shm_internal {

// InitLivenessMutex initializes a process-shared robust mutex in shared memory.
absl::Status InitLivenessMutex(pthread_mutex_t* mutex);

// LivenessHolder holds a liveness mutex from a thread of its own. A robust mutex is
// owned by a thread, not a process: held by the thread that called Connect, it would
// read as dead as soon as that thread exited, though the process and endpoint live on.
// The same thread beats: it stores MonotonicNanos() in `*heartbeat` every `interval`,
// so a peer can tell a stopped process (the mutex still held, no beats) from a busy one.
class LivenessHolder {
 public:
  // Start beats once, locks `mutex` on a new thread, and returns once it is held.
  // Internal if the mutex cannot be locked.
  static absl::StatusOr<std::unique_ptr<LivenessHolder>> Start(pthread_mutex_t* mutex,
                                                               std::atomic<int64_t>* heartbeat,
                                                               absl::Duration interval);
  // Unlocks the mutex (peers then read it as released) and joins the thread.
  ~LivenessHolder();

  LivenessHolder(const LivenessHolder&) = delete;
  LivenessHolder& operator=(const LivenessHolder&) = delete;

 private:
  LivenessHolder(pthread_mutex_t* mutex, std::atomic<int64_t>* heartbeat, absl::Duration interval)
      : mutex_(mutex), heartbeat_(heartbeat), interval_(interval) {}
  void Hold() ABSL_LOCKS_EXCLUDED(mu_);

  pthread_mutex_t* const mutex_;
  std::atomic<int64_t>* const heartbeat_;
  const absl::Duration interval_;
  Mutex mu_;
  CondVar cv_;
  bool locked_ ABSL_GUARDED_BY(mu_) = false;
  int lock_error_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

enum class Liveness {
  kHeld,      // The owner process is alive and its endpoint open.
  kReleased,  // The owner unlocked it: its endpoint closed normally (or never opened).
  kDied,      // The owner died holding it.
};

// ProbeLiveness tells whether the owner of a peer's liveness mutex still holds it.
Liveness ProbeLiveness(const pthread_mutex_t* mutex);

// MonotonicNanos: CLOCK_MONOTONIC, the same clock for every process of a host.
int64_t MonotonicNanos();

// ProcessAlive is false when `pid` does not exist or is a zombie.
bool ProcessAlive(pid_t pid);

}  // namespace shm_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_LIVENESS_H_
