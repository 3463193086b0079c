#include "collectives/transport/shm/shared_buffer.h"

#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "collectives/transport/shm/internal/shared_regions.h"
#include "core/posix.h"

namespace loom {

absl::StatusOr<SharedBuffer> SharedBuffer::Allocate(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("SharedBuffer of 0 bytes");
  const int fd = memfd_create("loom-shared-buffer", MFD_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("memfd_create for a SharedBuffer of ", bytes,
                                            " bytes failed: ", StrError(errno)));
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int error = errno;
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat("SharedBuffer of ", bytes,
                                                     " bytes: ftruncate failed: ", StrError(error)));
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    const int error = errno;
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat("SharedBuffer of ", bytes,
                                                     " bytes: mmap failed: ", StrError(error)));
  }
  auto* start = static_cast<std::byte*>(data);
  shm_internal::RegisterSharedRegion(start, bytes, fd);
  return SharedBuffer(start, bytes, fd);
}

SharedBuffer::SharedBuffer(SharedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      fd_(std::exchange(other.fd_, -1)) {}

SharedBuffer& SharedBuffer::operator=(SharedBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

SharedBuffer::~SharedBuffer() { Release(); }

void SharedBuffer::Release() {
  if (data_ == nullptr) return;
  // Unregistered first: no send may pick up the fd number once it is closed. A
  // receiver that mapped the buffer keeps its own mapping (and so the memory) until
  // it drops it; the region's id is never reused, so it cannot confuse the two.
  shm_internal::UnregisterSharedRegion(data_);
  munmap(data_, size_);
  close(fd_);
  data_ = nullptr;
  size_ = 0;
  fd_ = -1;
}

}  // namespace loom
