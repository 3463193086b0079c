// Small POSIX helpers for the disk tier: pread/pwrite loops that survive short transfers
// and EINTR. The owning file descriptor and errno as a Status are core/posix.h's.
//
// Example:
//   int fd = ::openat(dirfd, "x.0.ldt", O_RDONLY | O_CLOEXEC);
//   if (fd < 0) return ErrnoToStatus(errno, "openat(/nvme0/x.0.ldt, O_RDONLY)");
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
#include "core/posix.h"

namespace loom {
namespace disk_internal {

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
