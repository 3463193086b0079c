// The process-wide table of SharedBuffers, which the shm transport consults for
// every large send: a send that lies inside one travels as kMapped (the receiver
// maps the buffer's memfd and copies with memcpy) instead of kPull (CMA).
#ifndef LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_SHARED_REGIONS_H_
#define LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_SHARED_REGIONS_H_

#include <cstddef>
#include <cstdint>
#include <optional>

namespace loom {
namespace shm_internal {

struct SharedRegionRef {
  int fd = -1;         // The memfd, in the sending process.
  uint64_t id = 0;     // Unique in the process for its lifetime (fds get reused).
  uint64_t bytes = 0;  // The whole region's size.
  uint64_t offset = 0;  // Where the looked-up range starts in it.
};

// RegisterSharedRegion records [data, data + bytes) as memfd `fd` and returns the
// region's id; UnregisterSharedRegion forgets it.
uint64_t RegisterSharedRegion(const std::byte* data, size_t bytes, int fd);
void UnregisterSharedRegion(const std::byte* data);

// FindSharedRegion returns the region holding all of [data, data + bytes), if any.
std::optional<SharedRegionRef> FindSharedRegion(const std::byte* data, size_t bytes);

// Receives of kMapped messages in this process: copied out of a mapping, or, where
// the kernel refused the mapping, with CMA. For tests and benchmarks.
struct MappedReceiveCounts {
  uint64_t mapped = 0;
  uint64_t fell_back = 0;
};
MappedReceiveCounts MappedReceives();
void CountMappedReceive(bool mapped);

}  // namespace shm_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_SHARED_REGIONS_H_
