// PeerMappings: one receiver's mappings of a peer's SharedBuffers (kMapped messages).
// The first message out of a buffer takes the buffer's memfd from the sender with
// pidfd_getfd and maps it read-only; later ones reuse the mapping. At most
// kMaxMappings are kept per peer, the least recently used dropped first, so a
// sender that allocates buffer after buffer does not grow the receiver without
// bound (a dropped buffer that is used again is just mapped again).
#ifndef LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_PEER_MAPPINGS_H_
#define LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_PEER_MAPPINGS_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace loom {
namespace shm_internal {

class PeerMappings {
 public:
  static constexpr size_t kMaxMappings = 64;

  explicit PeerMappings(pid_t pid) : pid_(pid) {}
  PeerMappings(const PeerMappings&) = delete;
  PeerMappings& operator=(const PeerMappings&) = delete;
  ~PeerMappings();

  // Map returns this process's address of the peer's region `id` (memfd `fd` in the
  // peer, `bytes` long). Errors (kernel without pidfd_getfd, no ptrace permission,
  // the peer gone) name the call; the caller then falls back to CMA.
  absl::StatusOr<const std::byte*> Map(int fd, uint64_t id, uint64_t bytes);

 private:
  struct Mapping {
    uint64_t id;
    const std::byte* data;
    size_t bytes;
    uint64_t last_used;
  };

  pid_t pid_;
  int pidfd_ = -1;
  bool refused_ = false;  // pidfd_open or pidfd_getfd failed once: do not retry.
  uint64_t uses_ = 0;
  std::vector<Mapping> mappings_;
};

}  // namespace shm_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_PEER_MAPPINGS_H_
