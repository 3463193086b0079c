// Small POSIX helpers for the disk tier: an owning file descriptor, errno wrapped into a
// Status that names the call and the file, and pread/pwrite loops that survive short
// transfers and EINTR.
//
// Example:
//   int fd = ::openat(dirfd, "x.0.ldt", O_RDONLY | O_CLOEXEC);
//   if (fd < 0) return ErrnoStatus(errno, "openat(/nvme0/x.0.ldt, O_RDONLY)");
//        // NotFound: "openat(/nvme0/x.0.ldt, O_RDONLY): No such file or directory"
//   ScopedFd file(fd);                                     // closed on scope exit
//   LOOM_ASSIGN_OR_RETURN(size_t n, PreadFull(file.get(), buffer, 0, path));
#ifndef LOOM_OFFLOAD_DISK_INTERNAL_POSIX_FILE_H_
#define LOOM_OFFLOAD_DISK_INTERNAL_POSIX_FILE_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace loom {
namespace disk_internal {

// ErrnoStatus returns a Status whose code follows `error_number` (ENOENT: NotFound,
// EACCES: PermissionDenied, ENOSPC: ResourceExhausted, ...) and whose message is
// "<what>: <strerror(error_number)>".
absl::Status ErrnoStatus(int error_number, absl::string_view what);

// ScopedFd owns a file descriptor and closes it when destroyed (ignoring close
// errors; call Close() where they matter).
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  ScopedFd& operator=(ScopedFd&& other) noexcept;
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd();

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

  // Close closes the descriptor now; returns the close(2) error, naming `path`.
  absl::Status Close(absl::string_view path);

 private:
  int fd_ = -1;
};

// PreadFull reads out.size() bytes at `offset`, retrying short reads and EINTR; returns
// the number of bytes read, less than out.size() only at end of file. Errors name
// `path`.
absl::StatusOr<size_t> PreadFull(int fd, absl::Span<std::byte> out, uint64_t offset,
                                 absl::string_view path);

// PwriteFull writes all of `data` at `offset`, retrying short writes and EINTR.
absl::Status PwriteFull(int fd, absl::Span<const std::byte> data, uint64_t offset,
                        absl::string_view path);

// FileSize returns fstat's st_size of `fd`.
absl::StatusOr<uint64_t> FileSize(int fd, absl::string_view path);

}  // namespace disk_internal
}  // namespace loom

#endif  // LOOM_OFFLOAD_DISK_INTERNAL_POSIX_FILE_H_
