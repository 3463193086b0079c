#include "collectives/transport/shm/internal/peer_mappings.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/posix.h"

// Syscall numbers for kernels whose headers predate them (x86-64 and the generic
// table agree on both).
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif

namespace loom {
namespace shm_internal {

PeerMappings::~PeerMappings() {
  for (const Mapping& m : mappings_) munmap(const_cast<std::byte*>(m.data), m.bytes);
  if (pidfd_ >= 0) close(pidfd_);
}

absl::StatusOr<const std::byte*> PeerMappings::Map(int fd, uint64_t id, uint64_t bytes) {
  ++uses_;
  for (Mapping& m : mappings_) {
    if (m.id == id) {
      m.last_used = uses_;
      return m.data;
    }
  }
  if (refused_) return absl::UnavailableError("mapping the peer's buffers was refused before");
  if (pidfd_ < 0) {
    pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
    if (pidfd_ < 0) {
      refused_ = true;
      return absl::UnavailableError(
          absl::StrCat("pidfd_open(pid ", pid_, ") failed: ", StrError(errno)));
    }
  }
  const int local = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd_, fd, 0));
  if (local < 0) {
    const int error = errno;
    // A kernel without the call or a refused ptrace check stays that way; a bad fd
    // (a buffer freed under its send) is this message's problem only.
    if (error == ENOSYS || error == EPERM) refused_ = true;
    return absl::UnavailableError(absl::StrCat("pidfd_getfd(pid ", pid_, ", fd ", fd,
                                               ") failed: ", StrError(error)));
  }
  // The fd number may have been reused for something else by the time it was taken:
  // it must be a memfd of at least the announced size.
  struct stat info;
  if (fstat(local, &info) != 0 || !S_ISREG(info.st_mode) ||
      static_cast<uint64_t>(info.st_size) < bytes) {
    close(local);
    return absl::UnavailableError(absl::StrCat("fd ", fd, " of pid ", pid_,
                                               " is not the announced shared buffer"));
  }
  void* data = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, local, 0);
  close(local);  // The mapping keeps the memory.
  if (data == MAP_FAILED) {
    return absl::UnavailableError(absl::StrCat("mmap of pid ", pid_, "'s shared buffer (", bytes,
                                               " bytes) failed: ", StrError(errno)));
  }
  if (mappings_.size() >= kMaxMappings) {
    auto oldest = std::min_element(
        mappings_.begin(), mappings_.end(),
        [](const Mapping& a, const Mapping& b) { return a.last_used < b.last_used; });
    munmap(const_cast<std::byte*>(oldest->data), oldest->bytes);
    mappings_.erase(oldest);
  }
  mappings_.push_back(Mapping{id, static_cast<const std::byte*>(data), bytes, uses_});
  return static_cast<const std::byte*>(data);
}

}  // namespace shm_internal
}  // namespace loom
