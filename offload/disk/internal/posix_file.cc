#include "offload/disk/internal/posix_file.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace loom {
namespace disk_internal {

absl::Status ErrnoStatus(int error_number, absl::string_view what) {
  // The message absl::ErrnoToStatus would give ("what: <strerror>"), but through
  // strerror_r: absl's StrError fills a static table on first use inside the
  // prebuilt (uninstrumented) Abseil library, which ThreadSanitizer reports as a
  // race when several threads of a tier fail at once.
  char buffer[256];
  const char* text = strerror_r(error_number, buffer, sizeof(buffer));  // GNU: may not use buffer
  return absl::Status(absl::ErrnoToStatusCode(error_number), absl::StrCat(what, ": ", text));
}

ScopedFd& ScopedFd::operator=(ScopedFd&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

ScopedFd::~ScopedFd() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status ScopedFd::Close(absl::string_view path) {
  if (fd_ < 0) return absl::OkStatus();
  const int fd = fd_;
  fd_ = -1;
  // Linux releases the descriptor even when close fails, so it is never retried.
  if (::close(fd) != 0) return ErrnoStatus(errno, absl::StrCat("close(", path, ")"));
  return absl::OkStatus();
}

absl::StatusOr<size_t> PreadFull(int fd, absl::Span<std::byte> out, uint64_t offset,
                                 absl::string_view path) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n =
        ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat("pread(", path, ", ", out.size() - done,
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
      return ErrnoStatus(errno, absl::StrCat("pwrite(", path, ", ", data.size() - done,
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
  if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, absl::StrCat("fstat(", path, ")"));
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace disk_internal
}  // namespace loom
