#include "core/posix.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace loom {

std::string StrError(int error_number) {
  char buffer[256];
  // The GNU strerror_r returns the text, in `buffer` or in a static string.
  const char* text = strerror_r(error_number, buffer, sizeof(buffer));
  return text;
}

absl::Status ErrnoToStatus(int error_number, absl::string_view what) {
  return absl::Status(absl::ErrnoToStatusCode(error_number),
                      absl::StrCat(what, ": ", StrError(error_number)));
}

ScopedFd& ScopedFd::operator=(ScopedFd&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void ScopedFd::Reset() {
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
}

absl::Status ScopedFd::Close(absl::string_view path) {
  if (fd_ < 0) return absl::OkStatus();
  if (::close(std::exchange(fd_, -1)) != 0) {
    return ErrnoToStatus(errno, absl::StrCat("close(", path, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<ScopedFd> OpenFile(const std::string& path, int flags, mode_t mode) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoToStatus(errno, absl::StrCat("open(", path, ")"));
  return ScopedFd(fd);
}

}  // namespace loom
