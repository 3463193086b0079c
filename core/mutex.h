#ifndef LOOM_CORE_MUTEX_H_
#define LOOM_CORE_MUTEX_H_

// Loom's one mutex: a std::mutex that clang's thread-safety analysis can check.
//
//   class Counter {
//    public:
//     void Add(int n) {
//       loom::MutexLock lock(&mu_);
//       total_ += n;
//       changed_.SignalAll();
//     }
//     // Waits until the total reaches `n` or `deadline` passes; false on timeout.
//     bool AwaitAtLeast(int n, absl::Time deadline) {
//       loom::MutexLock lock(&mu_);
//       while (total_ < n) {
//         if (!changed_.WaitWithDeadline(&mu_, deadline)) return total_ >= n;
//       }
//       return true;
//     }
//
//    private:
//     loom::Mutex mu_;
//     loom::CondVar changed_;
//     int total_ ABSL_GUARDED_BY(mu_) = 0;
//   };
//
// Why not absl::Mutex, whose annotations these mirror: Debian's Abseil is a prebuilt
// library without ThreadSanitizer instrumentation, so TSan cannot see the ordering an
// absl::Mutex gives and reports races on everything it guards (CI's tsan step did, on
// the shm transport's region table). std::mutex is intercepted by TSan, and the
// annotations below let `--config=clang` (-Wthread-safety, fatal) prove that every
// ABSL_GUARDED_BY member is touched only under its lock.
//
// Waits re-check their condition in a loop (`while (!ready) cv.Wait(&mu);`) rather than
// taking a predicate: the analysis sees the guarded reads in the loop under the lock,
// where it could not see them inside a lambda handed to a template.

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace loom {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }

  // Tells the analysis the caller holds the lock where it cannot follow (a callback
  // documented to run under it). Checks nothing at run time.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` for its scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable over Mutex. Each wait releases `mu` while it sleeps and holds it
// again when it returns; wake-ups may be spurious, so callers loop on their condition.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }

  // False when `deadline` passed (the caller still re-checks its condition: it may
  // have become true as the time ran out). absl::InfiniteFuture() waits forever.
  bool WaitWithDeadline(Mutex* mu, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (deadline == absl::InfiniteFuture()) {
      Wait(mu);
      return true;
    }
    return WaitWithTimeout(mu, deadline - absl::Now());
  }

  // False when `timeout` passed. Measured on the steady clock.
  bool WaitWithTimeout(Mutex* mu, absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (timeout == absl::InfiniteDuration()) {
      Wait(mu);
      return true;
    }
    if (timeout <= absl::ZeroDuration()) return false;
    // A wait longer than a day sleeps a day and reports a (permitted) spurious wake-up:
    // steady_clock::now() plus centuries of nanoseconds would overflow into the past and
    // turn the caller's loop into a spin.
    const bool capped = timeout > absl::Hours(24);
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const std::cv_status status =
        cv_.wait_for(lock, absl::ToChronoNanoseconds(capped ? absl::Hours(24) : timeout));
    lock.release();
    return capped || status == std::cv_status::no_timeout;
  }

  // False when the steady-clock `deadline` passed.
  bool WaitUntil(Mutex* mu, std::chrono::steady_clock::time_point deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
    const std::cv_status status = cv_.wait_until(lock, deadline);
    lock.release();
    return status == std::cv_status::no_timeout;
  }

  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace loom

#endif  // LOOM_CORE_MUTEX_H_
