#include "collectives/transport/shm/internal/liveness.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/mutex.h"
#include "core/posix.h"

namespace loom {
namespace shm_internal {
namespace {

absl::Status PthreadError(const char* call, int error) {
  return ErrnoToStatus(error, call);
}

}  // namespace

absl::Status InitLivenessMutex(pthread_mutex_t* mutex) {
  pthread_mutexattr_t attr;
  int error = pthread_mutexattr_init(&attr);
  if (error != 0) return PthreadError("pthread_mutexattr_init", error);
  error = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  if (error == 0) error = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  if (error == 0) error = pthread_mutex_init(mutex, &attr);
  pthread_mutexattr_destroy(&attr);
  if (error != 0) return PthreadError("pthread_mutex_init(PTHREAD_PROCESS_SHARED, ROBUST)", error);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<LivenessHolder>> LivenessHolder::Start(
    pthread_mutex_t* mutex, std::atomic<int64_t>* heartbeat, absl::Duration interval) {
  heartbeat->store(MonotonicNanos(), std::memory_order_release);
  std::unique_ptr<LivenessHolder> holder(new LivenessHolder(mutex, heartbeat, interval));
  LivenessHolder* const raw = holder.get();
  raw->thread_ = std::thread([raw] { raw->Hold(); });
  int error = 0;
  {
    MutexLock lock(&raw->mu_);
    while (!raw->locked_ && raw->lock_error_ == 0) raw->cv_.Wait(&raw->mu_);
    error = raw->lock_error_;
  }
  if (error != 0) {
    holder->thread_.join();
    holder->thread_ = std::thread();
    return PthreadError("pthread_mutex_lock(liveness mutex)", error);
  }
  return holder;
}

void LivenessHolder::Hold() {
  const int error = pthread_mutex_lock(mutex_);
  MutexLock lock(&mu_);
  if (error != 0) {
    lock_error_ = error;
    cv_.SignalAll();
    return;
  }
  locked_ = true;
  cv_.SignalAll();
  const auto interval = absl::ToChronoNanoseconds(interval_);
  for (;;) {
    const auto next_beat = std::chrono::steady_clock::now() + interval;
    while (!stop_) {
      if (!cv_.WaitUntil(&mu_, next_beat)) break;
    }
    if (stop_) break;
    heartbeat_->store(MonotonicNanos(), std::memory_order_release);
  }
  pthread_mutex_unlock(mutex_);
}

LivenessHolder::~LivenessHolder() {
  if (!thread_.joinable()) return;
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  thread_.join();
}

Liveness ProbeLiveness(const pthread_mutex_t* mutex) {
#ifndef __GLIBC__
#error "ProbeLiveness reads glibc's pthread_mutex_t futex word (__data.__lock)"
#endif
  // The futex word holds the owner's thread id; the kernel's robust-list walk at the
  // owner's death replaces it with FUTEX_OWNER_DIED, which no one here ever clears.
  const int word = __atomic_load_n(&mutex->__data.__lock, __ATOMIC_ACQUIRE);
  if ((word & FUTEX_OWNER_DIED) != 0) return Liveness::kDied;
  if ((word & FUTEX_TID_MASK) != 0) return Liveness::kHeld;
  return Liveness::kReleased;
}

int64_t MonotonicNanos() {
  struct timespec now = {};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

bool ProcessAlive(pid_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // kill() succeeds on zombies; their /proc state is 'Z' (or 'X' while being reaped).
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return true;
  const char state = line[paren + 2];
  return state != 'Z' && state != 'X';
}

}  // namespace shm_internal
}  // namespace loom
