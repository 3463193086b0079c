#ifndef LOOM_CORE_POSIX_H_
#define LOOM_CORE_POSIX_H_

// Loom's one POSIX boundary: an owning file descriptor, and errno turned into a Status
// (or text) safely from any thread.
//
//   LOOM_ASSIGN_OR_RETURN(ScopedFd fd, OpenFile(path, O_WRONLY | O_CREAT, 0644));
//   if (::fsync(fd.get()) != 0) return ErrnoToStatus(errno, absl::StrCat("fsync(", path, ")"));
//   LOOM_RETURN_IF_ERROR(fd.Close(path));   // close's own error, where it matters
//
// ErrnoToStatus's code follows the error: ENOENT NotFound, EACCES and EPERM
// PermissionDenied, ENOSPC and EDQUOT ResourceExhausted, EEXIST AlreadyExists, EINVAL
// InvalidArgument, ETIMEDOUT DeadlineExceeded, EAGAIN and EINTR Unavailable, ... (the
// mapping absl::ErrnoToStatusCode defines), and its message is "<what>: <strerror>".
// The text comes from strerror_r: strerror may share one buffer between threads, and
// absl::ErrnoToStatus fills a table on first use inside Debian's uninstrumented Abseil,
// which ThreadSanitizer reports when several threads fail at once.

#include <sys/types.h>

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom {

// The text of `error_number` ("No such file or directory"), thread-safe.
std::string StrError(int error_number);

// A Status with `error_number`'s code and the message "<what>: <StrError>".
absl::Status ErrnoToStatus(int error_number, absl::string_view what);

// Owns a file descriptor and closes it when destroyed (ignoring close's error; call
// Close where it matters, as after writing a file).
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  ScopedFd& operator=(ScopedFd&& other) noexcept;
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

  // Gives up ownership: the caller closes the returned descriptor.
  int Release() { return std::exchange(fd_, -1); }

  // Closes the descriptor now, if any, ignoring close's error.
  void Reset();

  // Closes the descriptor now; close's error names `path`. Linux releases the
  // descriptor even when close fails, so this object is empty afterwards either way.
  absl::Status Close(absl::string_view path);

 private:
  int fd_ = -1;
};

// open(2) with O_CLOEXEC added; the error names the call and `path`.
absl::StatusOr<ScopedFd> OpenFile(const std::string& path, int flags, mode_t mode = 0);

}  // namespace loom

#endif  // LOOM_CORE_POSIX_H_
