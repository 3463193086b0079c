#include "offload/disk/internal/posix_file.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace loom {
namespace disk_internal {

absl::StatusOr<size_t> PreadFull(int fd, absl::Span<std::byte> out, uint64_t offset,
                                 absl::string_view path) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n =
        ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, absl::StrCat("pread(", path, ", ", out.size() - done,
                                             " bytes at offset ", offset + done, ")"));
    }
    if (n == 0) break;  // end of file
    done += static_cast<size_t>(n);
  }
  return done;
}

absl::Status PwriteFull(int fd, absl::Span<const std::byte> data, uint64_t offset,
                        absl::string_view path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n =
        ::pwrite(fd, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoToStatus(errno, absl::StrCat("pwrite(", path, ", ", data.size() - done,
                                             " bytes at offset ", offset + done, ")"));
    }
    if (n == 0) {
      return absl::InternalError(absl::StrCat("pwrite(", path, ", ", data.size() - done,
                                              " bytes at offset ", offset + done,
                                              ") wrote nothing"));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> FileSize(int fd, absl::string_view path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoToStatus(errno, absl::StrCat("fstat(", path, ")"));
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace disk_internal
}  // namespace loom
