// Janitor: a small process that removes a job's files when the process that started
// it is gone, however it went (exit, a signal, SIGKILL included).
//
// StartJanitor forks a child that ignores SIGINT, SIGTERM and SIGHUP (a Ctrl-C that
// reaches the whole process group must not stop the cleaner before it has cleaned),
// then waits on a pipe whose only write end the starting process holds. When that
// process dies (the pipe closes, or the janitor is reparented), the janitor removes the job's
// directory tree, the targets of the symbolic links in its `owned/` folder (offload
// directories elsewhere), and /dev/shm entries starting with the shm prefix, and
// exits. Between fork and exit it makes system calls only (no allocation, no locks),
// so it is safe to start from a process with threads.
//
// Example:
//   absl::StatusOr<Janitor> janitor = StartJanitor("/tmp/loom.job-1", "loom.job-1.");
//   ...                         // the job runs; if this process is killed, the files go
//   janitor->Finish();          // cleans now and reaps the janitor
#ifndef LOOM_TOOLS_INTERNAL_JANITOR_H_
#define LOOM_TOOLS_INTERNAL_JANITOR_H_

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"

namespace loom {

class Janitor {
 public:
  Janitor() = default;
  Janitor(Janitor&& other) noexcept;
  Janitor& operator=(Janitor&& other) noexcept;
  // Finish() if not yet done.
  ~Janitor();

  // Finish closes the pipe, so the janitor cleans up now, and waits for it (at most
  // 10 s; it is killed after that).
  void Finish();

  pid_t pid() const { return pid_; }

 private:
  friend absl::StatusOr<Janitor> StartJanitor(const std::string& job_dir,
                                              const std::string& shm_prefix);
  pid_t pid_ = -1;
  int pipe_fd_ = -1;
};

// StartJanitor forks the janitor for `job_dir` (an absolute path) and the /dev/shm
// names starting with `shm_prefix` (no slash; empty: none). InvalidArgument for a
// relative or overlong path; the errno of pipe2 or fork.
absl::StatusOr<Janitor> StartJanitor(const std::string& job_dir, const std::string& shm_prefix);

// RemoveTree removes `path` and everything under it (not following symbolic links),
// using system calls only; a missing path is no error. Returns 0 or an errno.
int RemoveTree(const char* path);

// RemoveJobTree removes the targets of the links in `job_dir`/owned, then `job_dir`,
// then /dev/shm entries starting with `shm_prefix` (if not empty). Returns 0 or the
// first errno. Async-signal-safe.
int RemoveJobTree(const char* job_dir, const char* shm_prefix);

}  // namespace loom

#endif  // LOOM_TOOLS_INTERNAL_JANITOR_H_
