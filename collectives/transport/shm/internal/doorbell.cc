#include "collectives/transport/shm/internal/doorbell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>

#include "absl/time/time.h"

namespace loom {
namespace shm_internal {
namespace {

uint32_t* FutexAddress(std::atomic<uint32_t>& word) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "futex word must be 32 bits");
  return reinterpret_cast<uint32_t*>(&word);
}

}  // namespace

void FutexWake(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, FutexAddress(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void RingAlways(RankHeader& header) {
  header.doorbell.fetch_add(1, std::memory_order_release);
  FutexWake(header.doorbell);
}

uint32_t Sleeper::Prepare() {
  const uint32_t ticket = header_.doorbell.load(std::memory_order_acquire);
  header_.sleeping.store(1, std::memory_order_relaxed);
  // Pairs with the fence in Ring: either the producer sees the flag, or the caller's
  // re-check after this sees the producer's work.
  StoreLoadFence();
  return ticket;
}

void Sleeper::Sleep(uint32_t ticket, absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) return;
  const timespec relative = absl::ToTimespec(timeout);
  // EAGAIN (the doorbell already moved), EINTR and ETIMEDOUT all mean: look again.
  syscall(SYS_futex, FutexAddress(header_.doorbell), FUTEX_WAIT, ticket, &relative, nullptr, 0);
}

}  // namespace shm_internal
}  // namespace loom
