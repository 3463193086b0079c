#include "collectives/transport/shm/internal/shared_regions.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>

#include "absl/base/attributes.h"
#include "absl/base/thread_annotations.h"
#include "core/mutex.h"

namespace loom {
namespace shm_internal {
namespace {

struct Region {
  size_t bytes;
  int fd;
  uint64_t id;
};

// Guards the region table: the comm worker allocates scratch while the main thread
// allocates a gradient buffer.
ABSL_CONST_INIT Mutex regions_mutex;
// By start address. A pointer to a function-local static, never destroyed, so that
// buffers freed during static destruction still find it.
std::map<const std::byte*, Region>& Regions() ABSL_EXCLUSIVE_LOCKS_REQUIRED(regions_mutex) {
  static auto* regions = new std::map<const std::byte*, Region>();
  return *regions;
}
std::atomic<uint64_t> next_id{1};
// Lets sends skip the lock while no SharedBuffer exists (the common case).
std::atomic<int64_t> live_regions{0};

std::atomic<uint64_t> mapped_receives{0};
std::atomic<uint64_t> fallback_receives{0};

}  // namespace

MappedReceiveCounts MappedReceives() {
  return {mapped_receives.load(std::memory_order_relaxed),
          fallback_receives.load(std::memory_order_relaxed)};
}

void CountMappedReceive(bool mapped) {
  (mapped ? mapped_receives : fallback_receives).fetch_add(1, std::memory_order_relaxed);
}

uint64_t RegisterSharedRegion(const std::byte* data, size_t bytes, int fd) {
  const uint64_t id = next_id.fetch_add(1, std::memory_order_relaxed);
  MutexLock lock(&regions_mutex);
  Regions()[data] = Region{bytes, fd, id};
  live_regions.fetch_add(1, std::memory_order_release);
  return id;
}

void UnregisterSharedRegion(const std::byte* data) {
  MutexLock lock(&regions_mutex);
  if (Regions().erase(data) > 0) live_regions.fetch_sub(1, std::memory_order_release);
}

std::optional<SharedRegionRef> FindSharedRegion(const std::byte* data, size_t bytes) {
  if (live_regions.load(std::memory_order_acquire) == 0 || data == nullptr) return std::nullopt;
  MutexLock lock(&regions_mutex);
  const auto& regions = Regions();
  auto it = regions.upper_bound(data);
  if (it == regions.begin()) return std::nullopt;
  it = std::prev(it);
  const size_t offset = static_cast<size_t>(data - it->first);
  if (offset > it->second.bytes || bytes > it->second.bytes - offset) return std::nullopt;
  return SharedRegionRef{it->second.fd, it->second.id, it->second.bytes, offset};
}

}  // namespace shm_internal
}  // namespace loom
