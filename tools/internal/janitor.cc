#include "tools/internal/janitor.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom {
namespace {

// Deeper trees than this are left (the job makes two levels; offload a few more).
constexpr int kMaxDepth = 24;

struct LinuxDirent64 {
  ino64_t d_ino;
  off64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

// Removes everything inside the directory `dir_fd` (closed here). Returns 0 or an errno.
int EmptyDirectory(int dir_fd, int depth) {
  int first_error = 0;
  alignas(8) char buffer[4096];
  while (true) {
    const long got = syscall(SYS_getdents64, dir_fd, buffer, sizeof(buffer));
    if (got <= 0) {
      if (got < 0 && first_error == 0) first_error = errno;
      break;
    }
    bool removed_any = false;
    for (long offset = 0; offset < got;) {
      const auto* entry = reinterpret_cast<const LinuxDirent64*>(buffer + offset);
      offset += entry->d_reclen;
      const char* name = entry->d_name;
      if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0) continue;
      bool is_dir = entry->d_type == DT_DIR;
      if (entry->d_type == DT_UNKNOWN) {
        struct stat st;
        is_dir = fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
      }
      if (is_dir) {
        if (depth >= kMaxDepth) {
          if (first_error == 0) first_error = ELOOP;
          continue;
        }
        const int child = openat(dir_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (child >= 0) {
          const int error = EmptyDirectory(child, depth + 1);
          if (error != 0 && first_error == 0) first_error = error;
        }
      }
      if (unlinkat(dir_fd, name, is_dir ? AT_REMOVEDIR : 0) == 0) {
        removed_any = true;
      } else if (errno != ENOENT && first_error == 0) {
        first_error = errno;
      }
    }
    // Removing entries while reading may skip some: read again from the start.
    if (removed_any) lseek(dir_fd, 0, SEEK_SET);
  }
  close(dir_fd);
  return first_error;
}

void IgnoreSignal(int sig) {
  struct sigaction action;
  memset(&action, 0, sizeof(action));
  action.sa_handler = SIG_IGN;
  sigemptyset(&action.sa_mask);
  sigaction(sig, &action, nullptr);
}

// Builds "<a>/<b>" into `out` (PATH_MAX); false when it does not fit.
bool JoinPath(char* out, const char* a, const char* b) {
  const size_t la = strlen(a), lb = strlen(b);
  if (la + 1 + lb + 1 > PATH_MAX) return false;
  memcpy(out, a, la);
  out[la] = '/';
  memcpy(out + la + 1, b, lb + 1);
  return true;
}

}  // namespace

int RemoveTree(const char* path) {
  struct stat st;
  if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : errno;
  if (!S_ISDIR(st.st_mode)) return unlink(path) == 0 || errno == ENOENT ? 0 : errno;
  const int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? 0 : errno;
  const int error = EmptyDirectory(fd, 1);
  if (rmdir(path) != 0 && errno != ENOENT) return error != 0 ? error : errno;
  return error;
}

int RemoveJobTree(const char* job_dir, const char* shm_prefix) {
  int first_error = 0;
  char path[PATH_MAX];
  char target[PATH_MAX];
  // Owned paths first: links in <job_dir>/owned name directories outside the job's.
  if (JoinPath(path, job_dir, "owned")) {
    const int owned = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (owned >= 0) {
      alignas(8) char buffer[4096];
      long got;
      while ((got = syscall(SYS_getdents64, owned, buffer, sizeof(buffer))) > 0) {
        for (long offset = 0; offset < got;) {
          const auto* entry = reinterpret_cast<const LinuxDirent64*>(buffer + offset);
          offset += entry->d_reclen;
          if (entry->d_name[0] == '.') continue;
          const ssize_t n = readlinkat(owned, entry->d_name, target, sizeof(target) - 1);
          if (n <= 0) continue;
          target[n] = '\0';
          const int error = RemoveTree(target);
          if (error != 0 && first_error == 0) first_error = error;
        }
      }
      close(owned);
    }
  }
  const int error = RemoveTree(job_dir);
  if (error != 0 && first_error == 0) first_error = error;
  const size_t prefix_length = shm_prefix == nullptr ? 0 : strlen(shm_prefix);
  if (prefix_length > 0) {
    const int shm = open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (shm >= 0) {
      alignas(8) char buffer[4096];
      long got;
      while ((got = syscall(SYS_getdents64, shm, buffer, sizeof(buffer))) > 0) {
        for (long offset = 0; offset < got;) {
          const auto* entry = reinterpret_cast<const LinuxDirent64*>(buffer + offset);
          offset += entry->d_reclen;
          if (strncmp(entry->d_name, shm_prefix, prefix_length) != 0) continue;
          if (unlinkat(shm, entry->d_name, 0) != 0 && errno != ENOENT && first_error == 0) {
            first_error = errno;
          }
        }
      }
      close(shm);
    }
  }
  return first_error;
}

Janitor::Janitor(Janitor&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), pipe_fd_(std::exchange(other.pipe_fd_, -1)) {}

Janitor& Janitor::operator=(Janitor&& other) noexcept {
  if (this != &other) {
    Finish();
    pid_ = std::exchange(other.pid_, -1);
    pipe_fd_ = std::exchange(other.pipe_fd_, -1);
  }
  return *this;
}

Janitor::~Janitor() { Finish(); }

void Janitor::Finish() {
  if (pipe_fd_ >= 0) close(pipe_fd_);
  pipe_fd_ = -1;
  if (pid_ <= 0) return;
  // The janitor's work is a few unlinks: give it 10 s, polling, then kill it.
  for (int i = 0; i < 1000; ++i) {
    int status = 0;
    const pid_t got = waitpid(pid_, &status, WNOHANG);
    if (got == pid_ || (got < 0 && errno != EINTR)) {
      pid_ = -1;
      return;
    }
    const struct timespec pause = {0, 10 * 1000 * 1000};
    nanosleep(&pause, nullptr);
  }
  kill(pid_, SIGKILL);
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

absl::StatusOr<Janitor> StartJanitor(const std::string& job_dir, const std::string& shm_prefix) {
  if (job_dir.empty() || job_dir[0] != '/' || job_dir.size() >= PATH_MAX - 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("janitor: job directory \"", job_dir, "\" is not an absolute path"));
  }
  if (shm_prefix.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("janitor: shm prefix \"", shm_prefix, "\" holds a slash"));
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::ErrnoToStatus(errno, "janitor: pipe2");
  // Everything the child needs, prepared before fork: it may not allocate.
  const std::string dir = job_dir;
  const std::string prefix = shm_prefix;
  const pid_t starter = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    close(fds[0]);
    close(fds[1]);
    return absl::ErrnoToStatus(error, "janitor: fork");
  }
  if (pid == 0) {
    close(fds[1]);
    IgnoreSignal(SIGINT);
    IgnoreSignal(SIGTERM);
    IgnoreSignal(SIGHUP);
    IgnoreSignal(SIGPIPE);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    // Out of the job's process group: a signal to the group does not reach it.
    setpgid(0, 0);
    // Hold none of the parent's files: a reader waiting for the end of the job's
    // output must not wait for the janitor.
    const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null_fd >= 0) {
      for (int fd = 0; fd < 3; ++fd) dup2(null_fd, fd);
    }
    for (int fd = 3; fd < 1024; ++fd) {
      if (fd != fds[0]) close(fd);
    }
    // The starter is gone when the pipe reads end-of-file, or when this process was
    // reparented: a dying process's files may close late (io_uring workers share its
    // file table and hold it for a while), but reparenting happens as it exits.
    while (getppid() == starter) {
      struct pollfd wake = {fds[0], POLLIN, 0};
      if (poll(&wake, 1, 100) > 0) {
        char byte;
        const ssize_t got = read(fds[0], &byte, 1);
        if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) break;
      }
    }
    RemoveJobTree(dir.c_str(), prefix.c_str());
    _exit(0);
  }
  close(fds[0]);
  Janitor janitor;
  janitor.pid_ = pid;
  janitor.pipe_fd_ = fds[1];
  return janitor;
}

}  // namespace loom
