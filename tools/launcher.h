// launcher: runs the N ranks of a job as local processes, the way torchrun does on one
// host, and supervises them for Loom's shared-memory transport.
//
// Launch() starts N copies of a program, each in its own process group, with
//   LOOM_JOB_ID            one id for the whole job ([A-Za-z0-9_-], at most 64 chars)
//   LOOM_RANK              0 .. N-1
//   LOOM_WORLD_SIZE        N
//   LOOM_LOCAL_RANK        = LOOM_RANK (every rank is on this host)
//   LOOM_LOCAL_WORLD_SIZE  = N
//   LOOM_JOB_DIR           the job's directory (job_files.h), removed when it ends
// in their environment. It forwards SIGINT, SIGTERM and SIGHUP to every rank. When a
// rank exits non-zero or is killed by a signal, or the job's deadline passes, it stops
// the others: SIGTERM to each rank's process group, SIGKILL once the grace period is
// over. When every rank has ended it names the first failure by time (ranks report
// theirs in the job directory, so a survivor that noticed a dead or silent peer first
// is not blamed), then removes the job directory and the job's leftover shared-memory
// segments (/dev/shm/loom.<job_id>.<suffix>); a janitor process does that if launch
// itself is killed. Ranks inherit stdout,
// stderr and stdin, except that a terminal stdin becomes /dev/null: a background
// process group reading its terminal would be stopped (SIGTTIN) for good.
//
// Example:
//   LaunchOptions options;
//   options.num_ranks = 3;
//   options.argv = {"/bin/sh", "-c", "test \"$LOOM_RANK\" != 1 || exit 3; sleep 60"};
//   options.timeout = absl::Minutes(10);
//   absl::StatusOr<LaunchResult> result = Launch(options);
//   // result.ok(): the ranks ran (a failing rank is not an error of Launch).
//   // result->first_failed_rank == 1
//   // result->ranks[1].Describe() == "exited with code 3"
//   // result->ranks[0].Describe() == "killed by signal 15 (Terminated)"
//   // result->ExitCode() == 3
//   // Describe(*result) ==
//   //   "launch: rank 1 (pid 4242) exited with code 3\n"
//   //   "launch: ranks of job myhost-4240-1f2e3d4c:\n"
//   //   "launch:   rank 0 (pid 4241): killed by signal 15 (Terminated), stopped by launch\n"
//   //   ...
//
// Launch() changes process-wide state while it runs (handlers for SIGCHLD and the
// forwarded signals, restored before it returns), so calls in one process take turns.
#ifndef LOOM_TOOLS_LAUNCHER_H_
#define LOOM_TOOLS_LAUNCHER_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace loom {

// The largest number of ranks Launch() starts.
inline constexpr int64_t kMaxLaunchRanks = 1024;

// The longest job id, so that segment names stay well under NAME_MAX (255).
inline constexpr int64_t kMaxJobIdLength = 64;

// Exit code of a job whose deadline passed (as timeout(1)).
inline constexpr int kTimedOutExitCode = 124;

struct LaunchOptions {
  // Number of ranks (processes), 1 .. kMaxLaunchRanks.
  int64_t num_ranks = 1;
  // PROGRAM ARGS. argv[0] without a slash is looked up in $PATH, as execvp does.
  std::vector<std::string> argv;
  // Whole-job deadline; zero (the default) means none.
  absl::Duration timeout = absl::ZeroDuration();
  // How long a rank may take to exit after SIGTERM before it gets SIGKILL.
  absl::Duration grace = absl::Seconds(5);
  // LOOM_JOB_ID for the ranks; empty (the default) makes a unique one
  // (GenerateJobId()).
  std::string job_id;
  // Forward SIGINT, SIGTERM and SIGHUP received by this process to every rank, then
  // stop the job (SIGKILL after `grace`). A signal this process ignored when Launch()
  // started (say SIGHUP under nohup) stays ignored, and the ranks inherit that.
  bool forward_signals = true;
};

// How one rank ended.
enum class RankEnd {
  kExited,           // exit_code holds its exit status
  kSignaled,         // signal holds the signal that killed it
  kNotReaped,        // still running 10s after SIGKILL (stuck in the kernel); abandoned
  kReapedElsewhere,  // another waitpid() in this process took its exit status
};

struct RankExit {
  int64_t rank = 0;
  pid_t pid = 0;
  RankEnd end = RankEnd::kExited;
  int exit_code = 0;
  int signal = 0;
  // True when the rank ended of a signal launch had sent it (to stop the job), or
  // exited after launch had signaled it.
  bool stopped_by_launcher = false;
  // When launch saw it end.
  absl::Time ended_at;
  // What the rank reported (job_files.h), if it failed and said why; "" otherwise.
  std::string message;
  // Why it ended, beyond its exit status: "after world rank 2 died" for a rank that
  // failed because a peer failed; "stopped responding" for a rank its peers reported
  // silent; "" otherwise.
  std::string note;

  // ok() is true when the rank exited with code 0.
  bool ok() const { return end == RankEnd::kExited && exit_code == 0; }
  // ExitStatus() returns the status a shell would show: the exit code, or 128 + the
  // signal; 255 when the status is unknown (kNotReaped, kReapedElsewhere).
  int ExitStatus() const;
  // Describe() returns "exited with code 3", "killed by signal 9 (Killed)", "still
  // running 10s after SIGKILL" or "reaped by another waiter in this process".
  std::string Describe() const;
};

struct LaunchResult {
  std::string job_id;
  // One entry per rank, index == rank.
  std::vector<RankExit> ranks;
  // The rank that failed first, by time: one that exited non-zero or died of a
  // signal on its own, or that its peers reported dead or silent; ranks stopped by
  // launch, and ranks that failed only because a peer had, do not count.
  std::optional<int64_t> first_failed_rank;
  // How it failed, for the report's first line: "killed by signal 9 (Killed)",
  // "exited with code 1: <its message>", "stopped responding (reported by rank 0:
  // <message>)".
  std::string first_failure;
  // True when the first failure is a rank that stopped responding (launch then
  // stopped it): the job exits 1.
  bool first_failure_unresponsive = false;
  // The deadline passed and launch stopped the job.
  bool timed_out = false;
  absl::Duration timeout = absl::ZeroDuration();
  // The first signal launch received and forwarded (SIGINT, SIGTERM, SIGHUP), or 0.
  int received_signal = 0;
  // Names (in /dev/shm) of the job's leftover shared-memory segments launch removed,
  // and the ones it failed to remove with the reason.
  std::vector<std::string> removed_shm_segments;
  std::vector<std::string> shm_cleanup_errors;

  // ExitCode() returns 0 when every rank exited 0; 124 when the job timed out; else the
  // first failing rank's ExitStatus() (1 for a rank that stopped responding); else
  // 128 + the received signal.
  int ExitCode() const;
};

// Describe() returns the report of a job for stderr, one "launch: " line each: what
// ended the job (the first failure, the timeout, the received signal) and one line
// per rank; then the removed shared-memory segments. A job whose ranks all exited 0
// and left nothing behind gives "".
std::string Describe(const LaunchResult& result);

// Launch() runs the job described by `options` and waits until every rank has ended.
// A rank failing is reported in the result, not as an error. Returns InvalidArgument
// for a bad option (num_ranks outside [1, 1024], empty argv, negative timeout or
// grace, malformed job id), NotFound / PermissionDenied when the program cannot be
// found or run, FailedPrecondition when execve fails in a rank, and the errno of a
// failing system call (pipe, fork, sigaction) otherwise; ranks already started are
// stopped before an error is returned.
absl::StatusOr<LaunchResult> Launch(const LaunchOptions& options);

// RestartPolicy: how LaunchWithRestarts restarts a failed job, as torchrun's
// --max-restarts does: the whole job stops and starts again (ranks resume from
// their own checkpoints; launch knows nothing of them).
struct RestartPolicy {
  int max_restarts = 0;  // >= 0
  // The command line of every restart (e.g. with a resume flag); empty: the same.
  std::vector<std::string> restart_argv;
  // Called before restart `restart` (from 1) with the failed job's result and the
  // options the restart will run with (restart_argv applied), which it may change
  // (say, fewer ranks when the failed rank's host is gone). Returning false ends
  // the job with the failure instead. Unset: every restart runs as is.
  std::function<bool(int restart, const LaunchResult& failed, LaunchOptions* next)> on_restart;
};

// Restartable: whether a restart of a job that ended as `result` could succeed: a
// rank failed on its own (killed by a signal, stopped responding, or exited with a
// code other than 0 and 2, the usage error every Loom tool exits with for bad
// input); launch received no signal (the user's SIGINT or SIGTERM is never undone);
// the job's deadline did not pass.
bool Restartable(const LaunchResult& result);

struct RestartedLaunch {
  LaunchResult last;  // the last job's result: the outcome
  int restarts = 0;   // restarts done
};

// LaunchWithRestarts runs Launch(options) and then, while the job ended Restartable
// and restarts remain, asks policy.on_restart and runs it again (with
// policy.restart_argv, if any, and what on_restart changed). Errors as Launch's, and
// InvalidArgument for a negative max_restarts.
absl::StatusOr<RestartedLaunch> LaunchWithRestarts(const LaunchOptions& options,
                                                   const RestartPolicy& policy);

// ValidateJobId() returns InvalidArgument unless `job_id` is 1 to 64 characters from
// [A-Za-z0-9_-].
absl::Status ValidateJobId(absl::string_view job_id);

// GenerateJobId() returns "<host>-<pid>-<8 random hex digits>", e.g.
// "trainer3-4240-1f2e3d4c"; the host name is cut at its first dot, reduced to
// [A-Za-z0-9_-] and to 32 characters.
std::string GenerateJobId();

// The outcome of removing a job's leftover shared-memory segments.
struct ShmCleanup {
  // Names in /dev/shm that were unlinked.
  std::vector<std::string> removed;
  // One message per segment that could not be unlinked, with the reason.
  std::vector<std::string> errors;
};

// RemoveJobShmSegments() unlinks every /dev/shm/loom.<job_id>.* entry (shm_unlink of
// "/loom.<job_id>.<suffix>"); nothing when /dev/shm does not exist. A segment that
// another process removes first is not an error. Returns InvalidArgument for a
// malformed job id and the errno of opendir("/dev/shm") when it cannot be read.
absl::StatusOr<ShmCleanup> RemoveJobShmSegments(absl::string_view job_id);

}  // namespace loom

#endif  // LOOM_TOOLS_LAUNCHER_H_
