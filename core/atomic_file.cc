#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "core/posix.h"

namespace loom {
namespace {

absl::Status Errno(int error, const std::string& path, absl::string_view call,
                   absl::string_view file) {
  return ErrnoToStatus(
      error, absl::StrCat("WriteFileAtomically ", path, ": ", call, "(", file, ")"));
}

// A name no other writer uses: the pid tells processes apart, the counter threads
// and calls of one process.
std::string TemporaryName(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(path, ".tmp.", getpid(), ".", counter.fetch_add(1));
}

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// WriteAndClose writes `contents` to `fd`, fsyncs and closes it, whatever happens.
absl::Status WriteAndClose(int fd, const std::string& path, const std::string& tmp,
                           absl::string_view contents) {
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = write(fd, contents.data() + done, contents.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      close(fd);
      return Errno(error, path, "write", tmp);
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    const int error = errno;
    close(fd);
    return Errno(error, path, "fsync", tmp);
  }
  // close can report a delayed write error (NFS); the data is not known safe without it.
  if (close(fd) != 0) return Errno(errno, path, "close", tmp);
  return absl::OkStatus();
}

absl::Status FsyncDirectory(const std::string& path) {
  const std::string dir = DirectoryOf(path);
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno(errno, path, "open", dir);
  if (fsync(fd) != 0) {
    const int error = errno;
    close(fd);
    return Errno(error, path, "fsync", dir);
  }
  close(fd);  // read-only: nothing left to report
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFileAtomically(
    const std::string& path, absl::string_view contents,
    const std::function<absl::Status(absl::string_view temp_path)>& before_rename) {
  const std::string tmp = TemporaryName(path);
  // O_EXCL: never write through a file (or a planted symlink) already at that name.
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Errno(errno, path, "open", tmp);
  absl::Status status = WriteAndClose(fd, path, tmp, contents);
  if (status.ok() && before_rename) status = before_rename(tmp);
  if (status.ok() && rename(tmp.c_str(), path.c_str()) != 0) {
    status = Errno(errno, path, "rename", tmp);
  }
  if (!status.ok()) {
    unlink(tmp.c_str());
    return status;
  }
  return FsyncDirectory(path);
}

}  // namespace loom
