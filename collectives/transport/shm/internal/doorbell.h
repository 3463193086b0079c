// Doorbell: how a rank blocked in Wait is woken by the processes that feed it. Each
// rank's header holds a futex word (`doorbell`) and a `sleeping` flag. A waiter
// announces itself in `sleeping`, re-checks for work, then sleeps on the futex with a
// short timeout; a producer publishes its work and rings the doorbell only when the
// flag is up, so the fast path costs a fence and a load, no system call. The futex is
// process-shared (no FUTEX_PRIVATE_FLAG): the word lives in shared memory.
#ifndef LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_DOORBELL_H_
#define LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_DOORBELL_H_

#include <atomic>
#include <cstdint>

#include "absl/time/time.h"
#include "collectives/transport/shm/internal/layout.h"

namespace loom {
namespace shm_internal {

// StoreLoadFence orders this thread's earlier stores before its later loads: the
// handshake between a producer (publish, then read `sleeping`) and a waiter (raise
// `sleeping`, then look for work). GCC rejects std::atomic_thread_fence under
// ThreadSanitizer (which does not model fences); there the same hardware fence is
// issued directly.
inline void StoreLoadFence() {
#if defined(__SANITIZE_THREAD__) && (defined(__x86_64__) || defined(__i386__))
  __asm__ __volatile__("mfence" ::: "memory");
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

// Ring wakes `header`'s rank if it may be asleep. Call after publishing the work it
// should notice; the fence orders that publication before reading `sleeping`.
inline void Ring(RankHeader& header);

// Sleeper is the waiting side, used by the rank that owns `header`:
//   const uint32_t ticket = sleeper.Prepare();
//   if (no work is visible now) sleeper.Sleep(ticket, timeout);
//   sleeper.Finish();
class Sleeper {
 public:
  explicit Sleeper(RankHeader& header) : header_(header) {}
  // Prepare raises the sleeping flag and returns the doorbell value to sleep on.
  uint32_t Prepare();
  // Sleep blocks until the doorbell moves past `ticket` or `timeout` passes.
  void Sleep(uint32_t ticket, absl::Duration timeout);
  void Finish() { header_.sleeping.store(0, std::memory_order_relaxed); }

 private:
  RankHeader& header_;
};

// RingAlways wakes `header`'s rank whether or not it announced itself (for Abort,
// which may run on another thread of the sleeping rank).
void RingAlways(RankHeader& header);

void FutexWake(std::atomic<uint32_t>& word);

inline void Ring(RankHeader& header) {
  StoreLoadFence();
  if (header.sleeping.load(std::memory_order_relaxed) != 0) RingAlways(header);
}

}  // namespace shm_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_DOORBELL_H_
