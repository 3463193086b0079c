#include "tools/launcher.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/transport/peer_failure.h"
#include "core/mutex.h"
#include "core/posix.h"
#include "core/status_macros.h"
#include "tools/internal/janitor.h"
#include "tools/job_files.h"

extern char** environ;

namespace loom {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP};

// A process ends as soon as the kernel delivers SIGKILL; one still there after this
// long is stuck in the kernel (uninterruptible I/O, a hung device), and waiting for it
// would only hang the launcher as well.
constexpr absl::Duration kWaitAfterSigkill = absl::Seconds(10);

constexpr char kShmDir[] = "/dev/shm";

constexpr absl::string_view kLoomEnvNames[] = {
    "LOOM_JOB_ID",           "LOOM_RANK",    "LOOM_WORLD_SIZE", "LOOM_LOCAL_RANK",
    "LOOM_LOCAL_WORLD_SIZE", "LOOM_JOB_DIR",
};

// Shared with OnSignal(), which may run on any thread: one flag per signal, and the
// write end of the self-pipe that wakes the supervising poll().
std::atomic<int> g_wake_fd{-1};
std::array<std::atomic<bool>, NSIG> g_pending;  // static storage: starts all false

// Signal dispositions are per process, so Launch() calls take turns. OnSignal() never
// takes it.
ABSL_CONST_INIT Mutex g_launch_mu;

void OnSignal(int sig) {
  const int saved_errno = errno;
  if (sig > 0 && sig < NSIG) g_pending[sig].store(true);
  const int fd = g_wake_fd.load();
  if (fd >= 0) {
    const char byte = 0;
    // The pipe is non-blocking: when it is full the loop is already due to wake up.
    const ssize_t written = write(fd, &byte, 1);
    static_cast<void>(written);
  }
  errno = saved_errno;
}

std::string SignalName(int sig) {
  const char* description = sigdescr_np(sig);
  if (description == nullptr) return absl::StrCat("signal ", sig);
  return absl::StrCat("signal ", sig, " (", description, ")");
}

Clock::time_point After(Clock::time_point start, absl::Duration d) {
  const std::chrono::nanoseconds ns = absl::ToChronoNanoseconds(d);  // saturates
  if (ns >= Clock::time_point::max() - start) return Clock::time_point::max();
  return start + std::chrono::duration_cast<Clock::duration>(ns);
}

// Milliseconds poll() may sleep until `until`, rounded up so that it does not wake
// just before the deadline and spin; -1 (no limit) for time_point::max().
int PollTimeoutMs(Clock::time_point now, Clock::time_point until) {
  if (until == Clock::time_point::max()) return -1;
  if (until <= now) return 0;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(until - now).count();
  return static_cast<int>(std::min<int64_t>(ms, INT_MAX));
}

// Catches SIGCHLD (and the forwarded signals) into the self-pipe while a job runs, and
// puts everything back on destruction.
class SignalScope {
 public:
  SignalScope() = default;
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

  ~SignalScope() {
    for (int i = num_installed_ - 1; i >= 0; --i) {
      sigaction(installed_[i].sig, &installed_[i].old, nullptr);
    }
    if (mask_saved_) pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
    g_wake_fd.store(-1);  // before the pipe closes (the members, after this body)
  }

  absl::Status Install(bool forward_signals) ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_launch_mu) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
      return absl::ErrnoToStatus(errno, "pipe2(O_CLOEXEC | O_NONBLOCK)");
    }
    read_fd_ = ScopedFd(fds[0]);
    write_fd_ = ScopedFd(fds[1]);
    for (std::atomic<bool>& pending : g_pending) pending.store(false);
    g_wake_fd.store(write_fd_.get());
    LOOM_RETURN_IF_ERROR(Catch(SIGCHLD, /*keep_ignored=*/false));
    if (forward_signals) {
      for (const int sig : kForwardedSignals) LOOM_RETURN_IF_ERROR(Catch(sig, /*keep_ignored=*/true));
    }
    // The handler runs on any thread that does not block the signal; make sure this
    // one is such a thread, or a caller that blocks SIGCHLD would never wake up.
    sigset_t ours;
    sigemptyset(&ours);
    for (int i = 0; i < num_installed_; ++i) sigaddset(&ours, installed_[i].sig);
    const int err = pthread_sigmask(SIG_UNBLOCK, &ours, &old_mask_);
    if (err != 0) return absl::ErrnoToStatus(err, "pthread_sigmask(SIG_UNBLOCK)");
    mask_saved_ = true;
    return absl::OkStatus();
  }

  int wake_fd() const { return read_fd_.get(); }

  void Drain() const {
    char buffer[256];
    while (read(read_fd_.get(), buffer, sizeof(buffer)) > 0) {
    }
  }

  // Gives a freshly forked child the dispositions it had before Install(): handlers
  // go back to SIG_DFL, ignored signals stay ignored. Async-signal-safe.
  void ResetInChild() const {
    for (int i = 0; i < num_installed_; ++i) sigaction(installed_[i].sig, &installed_[i].child, nullptr);
  }

 private:
  struct Installed {
    int sig;
    struct sigaction old;
    struct sigaction child;
  };

  static bool IsIgnored(const struct sigaction& action) {
    return (action.sa_flags & SA_SIGINFO) == 0 && action.sa_handler == SIG_IGN;
  }

  absl::Status Catch(int sig, bool keep_ignored) {
    struct sigaction action = {};
    action.sa_handler = OnSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
    struct sigaction old = {};
    if (sigaction(sig, &action, &old) != 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("sigaction(", SignalName(sig), ")"));
    }
    if (keep_ignored && IsIgnored(old)) {
      sigaction(sig, &old, nullptr);
      return absl::OkStatus();
    }
    Installed& entry = installed_[num_installed_++];
    entry.sig = sig;
    entry.old = old;
    entry.child = {};
    entry.child.sa_handler = IsIgnored(old) ? SIG_IGN : SIG_DFL;
    sigemptyset(&entry.child.sa_mask);
    return absl::OkStatus();
  }

  ScopedFd read_fd_;
  ScopedFd write_fd_;
  std::array<Installed, 1 + std::size(kForwardedSignals)> installed_ = {};
  int num_installed_ = 0;
  sigset_t old_mask_ = {};
  bool mask_saved_ = false;
};

absl::Status ValidateOptions(const LaunchOptions& options) {
  if (options.num_ranks < 1 || options.num_ranks > kMaxLaunchRanks) {
    return absl::InvalidArgumentError(absl::StrCat("number of ranks ", options.num_ranks,
                                                   " is outside [1, ", kMaxLaunchRanks, "]"));
  }
  if (options.argv.empty()) return absl::InvalidArgumentError("no program to launch: argv is empty");
  if (options.argv[0].empty()) return absl::InvalidArgumentError("the program name (argv[0]) is empty");
  if (options.timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "timeout ", absl::FormatDuration(options.timeout), " is negative (0 means none)"));
  }
  if (options.grace < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("grace ", absl::FormatDuration(options.grace), " is negative"));
  }
  if (!options.job_id.empty()) LOOM_RETURN_IF_ERROR(ValidateJobId(options.job_id));
  return absl::OkStatus();
}

absl::Status CheckExecutable(const std::string& path, absl::string_view program) {
  struct stat st = {};
  if (stat(path.c_str(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("program \"", program, "\": stat(\"", path, "\")"));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::PermissionDeniedError(absl::StrCat("program \"", program, "\": ", path, " is not a regular file"));
  }
  if (access(path.c_str(), X_OK) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("program \"", program, "\": ", path, " is not executable"));
  }
  return absl::OkStatus();
}

// The file execvp() would run for `program`, found before any rank is forked so that a
// typo is one clear error instead of N failing ranks.
absl::StatusOr<std::string> ResolveProgram(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    LOOM_RETURN_IF_ERROR(CheckExecutable(program, program));
    return program;
  }
  const char* env_path = getenv("PATH");
  // execvp's default search path when PATH is unset.
  const std::string search_path = env_path != nullptr ? env_path : "/bin:/usr/bin";
  std::optional<absl::Status> not_runnable;
  for (const absl::string_view dir : absl::StrSplit(search_path, ':')) {
    const std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/", program);
    if (access(candidate.c_str(), F_OK) != 0) continue;
    const absl::Status runnable = CheckExecutable(candidate, program);
    if (runnable.ok()) return candidate;
    if (!not_runnable.has_value()) not_runnable = runnable;
  }
  if (not_runnable.has_value()) return *not_runnable;
  return absl::NotFoundError(absl::StrCat("program \"", program, "\" not found in PATH=", search_path));
}

// Environment entries for every rank: the launcher's own, minus any LOOM_* variable
// launch sets itself (a nested launch must not leak its job into this one).
std::vector<std::string> BaseEnvironment() {
  std::vector<std::string> env;
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const absl::string_view var = *entry;
    const absl::string_view name = var.substr(0, var.find('='));
    if (std::find(std::begin(kLoomEnvNames), std::end(kLoomEnvNames), name) != std::end(kLoomEnvNames)) {
      continue;
    }
    env.emplace_back(var);
  }
  return env;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// Forks one rank into its own process group and execs it, with `stdin_fd` as its
// standard input unless that is -1. Returns FailedPrecondition with the child's errno
// when execve fails there.
absl::StatusOr<pid_t> SpawnRank(const std::string& path, const std::vector<char*>& argv,
                                const std::vector<char*>& envp, int stdin_fd, const SignalScope& signals) {
  int error_pipe[2];
  if (pipe2(error_pipe, O_CLOEXEC) != 0) return absl::ErrnoToStatus(errno, "pipe2(O_CLOEXEC)");
  const pid_t parent = getpid();
  // Nothing may run a handler in the child before it has reset the dispositions; a
  // signal meant for the rank stays pending until then and acts on the real program.
  sigset_t all;
  sigset_t old_mask;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old_mask);
  const pid_t pid = fork();
  if (pid == 0) {
    // Child: async-signal-safe calls only (the parent may have other threads).
    close(error_pipe[0]);
    setpgid(0, 0);
    // Launch() blocks the forking thread until the ranks are gone, so the parent-death
    // signal fires only when the launcher itself dies (e.g. SIGKILL).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    if (stdin_fd >= 0) dup2(stdin_fd, STDIN_FILENO);
    signals.ResetInChild();
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(path.c_str(), argv.data(), envp.data());
    const int exec_errno = errno;
    const ssize_t written = write(error_pipe[1], &exec_errno, sizeof(exec_errno));
    static_cast<void>(written);
    _exit(127);
  }
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  close(error_pipe[1]);
  if (pid < 0) {
    close(error_pipe[0]);
    return absl::ErrnoToStatus(fork_errno, "fork()");
  }
  // Also done here so that the group exists before this function returns; after the
  // child's execve this fails with EACCES, by which time the child has done it itself.
  setpgid(pid, pid);
  // The pipe closes on a successful execve (O_CLOEXEC) or carries its errno.
  int exec_errno = 0;
  ssize_t got;
  do {
    got = read(error_pipe[0], &exec_errno, sizeof(exec_errno));
  } while (got < 0 && errno == EINTR);
  close(error_pipe[0]);
  if (got == static_cast<ssize_t>(sizeof(exec_errno))) {
    // The child is at _exit(127) right after its write.
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    return absl::FailedPreconditionError(
        absl::ErrnoToStatus(exec_errno, absl::StrCat("execve(\"", path, "\")")).message());
  }
  return pid;
}

// Runs the ranks of one job and watches them until every one has ended.
class Job {
 public:
  Job(const LaunchOptions& options, std::string job_id) : options_(options) {
    result_.job_id = std::move(job_id);
    result_.timeout = options.timeout;
    result_.ranks.resize(options.num_ranks);
    for (int64_t rank = 0; rank < options.num_ranks; ++rank) result_.ranks[rank].rank = rank;
    reaped_.assign(options.num_ranks, true);
    signals_sent_.assign(options.num_ranks, 0);
  }

  absl::StatusOr<LaunchResult> Run(const std::string& path)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(g_launch_mu) {
    // The job directory, and a janitor that removes it (and the job's segments)
    // should this process be killed before it can.
    LOOM_ASSIGN_OR_RETURN(job_dir_, CreateJobDirectory(result_.job_id));
    absl::StatusOr<Janitor> janitor =
        StartJanitor(job_dir_, absl::StrCat("loom.", result_.job_id, "."));
    if (!janitor.ok()) {
      RemoveJobFiles(result_.job_id).IgnoreError();
      return janitor.status();
    }
    SignalScope signals;
    LOOM_RETURN_IF_ERROR(signals.Install(options_.forward_signals));
    const Clock::time_point deadline = options_.timeout == absl::ZeroDuration()
                                           ? Clock::time_point::max()
                                           : After(Clock::now(), options_.timeout);
    const absl::Status spawned = SpawnAll(path, signals);
    if (!spawned.ok()) {
      // The ranks already running are half a job: kill them outright.
      stopping_ = true;
      Escalate(Clock::now());
    }
    Supervise(signals, deadline);
    NameFirstFailure();
    CleanUpShm();
    if (absl::Status removed = RemoveJobFiles(result_.job_id); !removed.ok()) {
      result_.shm_cleanup_errors.emplace_back(removed.message());
    }
    janitor->Finish();
    if (!spawned.ok()) return spawned;
    return std::move(result_);
  }

 private:
  absl::Status SpawnAll(const std::string& path, const SignalScope& signals) {
    std::vector<std::string> args = options_.argv;
    const std::vector<char*> argv = CStrings(args);
    const std::vector<std::string> base_env = BaseEnvironment();
    // A rank is in a background process group, so reading a terminal would stop it
    // (SIGTTIN) for good; from /dev/null it reads end-of-file instead. Pipes and files
    // are passed on as they are.
    ScopedFd dev_null;
    if (isatty(STDIN_FILENO)) {
      dev_null = ScopedFd(open("/dev/null", O_RDONLY | O_CLOEXEC));
      if (dev_null.get() < 0) return absl::ErrnoToStatus(errno, "open(\"/dev/null\")");
    }
    for (int64_t rank = 0; rank < options_.num_ranks; ++rank) {
      std::vector<std::string> env = base_env;
      env.push_back(absl::StrCat("LOOM_JOB_ID=", result_.job_id));
      env.push_back(absl::StrCat("LOOM_RANK=", rank));
      env.push_back(absl::StrCat("LOOM_WORLD_SIZE=", options_.num_ranks));
      env.push_back(absl::StrCat("LOOM_LOCAL_RANK=", rank));
      env.push_back(absl::StrCat("LOOM_LOCAL_WORLD_SIZE=", options_.num_ranks));
      env.push_back(absl::StrCat("LOOM_JOB_DIR=", job_dir_));
      const std::vector<char*> envp = CStrings(env);
      absl::StatusOr<pid_t> pid = SpawnRank(path, argv, envp, dev_null.get(), signals);
      if (!pid.ok()) {
        return absl::Status(pid.status().code(), absl::StrCat("rank ", rank, ": ", pid.status().message()));
      }
      result_.ranks[rank].pid = *pid;
      reaped_[rank] = false;
      ++num_live_;
    }
    return absl::OkStatus();
  }

  void Supervise(const SignalScope& signals, Clock::time_point deadline) {
    while (true) {
      signals.Drain();
      Reap();
      HandleSignals();
      const Clock::time_point now = Clock::now();
      if (!stopping_ && failure_seen_) {
        // A rank that failed because a peer aborted often ends before that peer,
        // which is still unwinding (writing its report, running exit handlers) to
        // exit with its own code. Stopping the job at once would kill the cause with
        // SIGTERM and end the job with 143 instead of the cause's code: let a live
        // rank that aborted or reported a failure of its own end first, for at most
        // the grace period.
        if (cause_wait_until_ == Clock::time_point::max()) {
          cause_wait_until_ = After(now, options_.grace);
        }
        if (now >= cause_wait_until_ || !ACauseIsStillEnding()) {
          stop_for_failure_ = true;
          BeginStop(now, SIGTERM);
        }
      }
      if (!stopping_ && now >= deadline) {
        result_.timed_out = true;
        BeginStop(now, SIGTERM);
      }
      if (stopping_ && !killed_ && now >= kill_at_) Escalate(now);
      if (num_live_ == 0) return;
      if (killed_ && now >= give_up_at_) {
        for (int64_t rank = 0; rank < options_.num_ranks; ++rank) {
          if (!reaped_[rank]) Record(rank, RankEnd::kNotReaped, 0, 0);
        }
        return;
      }
      const Clock::time_point wake_at = !stopping_ ? std::min(deadline, cause_wait_until_)
                                        : killed_   ? give_up_at_
                                                    : kill_at_;
      struct pollfd wake = {signals.wake_fd(), POLLIN, 0};
      if (poll(&wake, 1, PollTimeoutMs(now, wake_at)) < 0 && errno != EINTR) {
        // poll() on one valid pipe fails only for lack of kernel memory; retry calmly
        // rather than spin.
        absl::SleepFor(absl::Milliseconds(10));
      }
    }
  }

  void Reap() {
    for (int64_t rank = 0; rank < options_.num_ranks; ++rank) {
      if (reaped_[rank]) continue;
      int status = 0;
      const pid_t got = waitpid(result_.ranks[rank].pid, &status, WNOHANG);
      if (got == 0) continue;
      if (got < 0) {
        if (errno == ECHILD) Record(rank, RankEnd::kReapedElsewhere, 0, 0);
        continue;
      }
      if (WIFEXITED(status)) {
        Record(rank, RankEnd::kExited, WEXITSTATUS(status), 0);
      } else if (WIFSIGNALED(status)) {
        Record(rank, RankEnd::kSignaled, 0, WTERMSIG(status));
      }
    }
  }

  void Record(int64_t rank, RankEnd end, int exit_code, int sig) {
    RankExit& rank_exit = result_.ranks[rank];
    rank_exit.end = end;
    rank_exit.exit_code = exit_code;
    rank_exit.signal = sig;
    rank_exit.ended_at = absl::Now();
    // Stopped by launch: it died of a signal launch sent it, or exited once signaled.
    // A rank that died of SIGKILL while launch had sent only SIGTERM was killed by
    // someone else (its zombie was signaled before launch reaped it).
    const uint64_t sent = signals_sent_[rank];
    rank_exit.stopped_by_launcher =
        end == RankEnd::kSignaled ? (sig < 64 && (sent & (uint64_t{1} << sig)) != 0) : sent != 0;
    reaped_[rank] = true;
    --num_live_;
    if (!rank_exit.ok() && !stopping_) failure_seen_ = true;
  }

  // NameFirstFailure picks the failure that came first, by time, among: ranks that
  // reported a failure of their own; ranks that ended badly, unreported, not stopped
  // by launch; ranks that a peer reported dead or silent. Ranks that failed because a
  // peer had are never the cause. After a signal or the deadline stopped the job,
  // only what came before it counts.
  void NameFirstFailure() {
    struct Candidate {
      int64_t rank;
      absl::Time when;
      std::string what;
      bool unresponsive;
    };
    std::vector<Candidate> candidates;
    std::vector<Candidate> fallbacks;
    const int64_t n = options_.num_ranks;
    for (const RankReport& report : ReadRankReports(job_dir_)) {
      if (report.rank < 0 || report.rank >= n) continue;
      RankExit& reporter = result_.ranks[report.rank];
      reporter.message = report.message;
      if (report.caused_by_peer() && report.peer_rank < n && report.peer_rank != report.rank) {
        reporter.note = absl::StrCat("after world rank ", report.peer_rank, " ", report.peer_fault);
        RankExit& blamed = result_.ranks[report.peer_rank];
        const bool unresponsive = report.peer_fault == PeerFaultName(PeerFault::kUnresponsive);
        if (unresponsive && blamed.note.empty()) blamed.note = "stopped responding";
        // A peer that aborted failed for a reason of its own, which its own report
        // tells (a cause, or another peer): follow that, not this. Only when nothing
        // else names a cause does the aborting rank count.
        const bool aborted = report.peer_fault == PeerFaultName(PeerFault::kAborted);
        (aborted ? fallbacks : candidates)
            .push_back({report.peer_rank, report.when,
                        unresponsive ? absl::StrCat("stopped responding (reported by rank ",
                                                    report.rank, ": ", report.message, ")")
                                     : blamed.Describe(),
                        unresponsive});
      } else if (!reporter.ok()) {
        candidates.push_back({report.rank, report.when,
                              absl::StrCat(reporter.Describe(), ": ", report.message), false});
      }
    }
    for (const RankExit& rank : result_.ranks) {
      if (rank.ok() || rank.stopped_by_launcher || !rank.message.empty()) continue;
      candidates.push_back({rank.rank, rank.ended_at, rank.Describe(), false});
    }
    if (candidates.empty()) candidates = std::move(fallbacks);
    const Candidate* first = nullptr;
    for (const Candidate& candidate : candidates) {
      if (stopping_ && !stop_for_failure_ && candidate.when >= stop_began_at_) continue;
      if (first == nullptr || candidate.when < first->when ||
          (candidate.when == first->when && candidate.rank < first->rank)) {
        first = &candidate;
      }
    }
    if (first == nullptr) return;
    result_.first_failed_rank = first->rank;
    result_.first_failure = first->what;
    result_.first_failure_unresponsive = first->unresponsive;
  }

  void HandleSignals() {
    // SIGCHLD is only a wake-up: Reap() looks at every rank anyway.
    g_pending[SIGCHLD].store(false);
    for (const int sig : kForwardedSignals) {
      if (!g_pending[sig].exchange(false)) continue;
      if (result_.received_signal == 0) result_.received_signal = sig;
      if (stopping_) {
        SignalLive(sig);
      } else {
        BeginStop(Clock::now(), sig);
      }
    }
  }

  // Sends `sig` to every running rank and gives them `grace` before SIGKILL. SIGCONT
  // follows so that a stopped rank (SIGSTOP, SIGTSTP) acts on it within the grace.
  // ACauseIsStillEnding: a rank that has not ended yet either reported a failure of
  // its own, or was reported aborted by a peer (an abort is a rank failing for a
  // reason of its own and telling its peers before it exits).
  bool ACauseIsStillEnding() const {
    const int64_t n = options_.num_ranks;
    const std::string aborted(PeerFaultName(PeerFault::kAborted));
    for (const RankReport& report : ReadRankReports(job_dir_)) {
      if (report.rank < 0 || report.rank >= n) continue;
      if (!report.caused_by_peer()) {
        if (!reaped_[report.rank]) return true;
      } else if (report.peer_fault == aborted && report.peer_rank >= 0 && report.peer_rank < n &&
                 !reaped_[report.peer_rank]) {
        return true;
      }
    }
    return false;
  }

  void BeginStop(Clock::time_point now, int sig) {
    stopping_ = true;
    stop_began_at_ = absl::Now();
    kill_at_ = After(now, options_.grace);
    SignalLive(sig);
    SignalLive(SIGCONT);
  }

  void Escalate(Clock::time_point now) {
    killed_ = true;
    give_up_at_ = After(now, kWaitAfterSigkill);
    SignalLive(SIGKILL);
  }

  // Signals each running rank's process group, which holds the rank and whatever it
  // started. Ranks already reaped are left alone: their pid may belong to someone else
  // by now.
  void SignalLive(int sig) {
    for (int64_t rank = 0; rank < options_.num_ranks; ++rank) {
      if (reaped_[rank]) continue;
      RankExit& rank_exit = result_.ranks[rank];
      if (sig < 64) signals_sent_[rank] |= uint64_t{1} << sig;
      if (kill(-rank_exit.pid, sig) != 0 && errno == ESRCH) kill(rank_exit.pid, sig);
    }
  }

  void CleanUpShm() {
    const absl::StatusOr<ShmCleanup> cleanup = RemoveJobShmSegments(result_.job_id);
    if (!cleanup.ok()) {
      result_.shm_cleanup_errors.emplace_back(cleanup.status().message());
      return;
    }
    result_.removed_shm_segments = cleanup->removed;
    result_.shm_cleanup_errors = cleanup->errors;
  }

  const LaunchOptions& options_;
  LaunchResult result_;
  std::string job_dir_;
  std::vector<bool> reaped_;
  // Per rank, bit s: launch sent it signal s.
  std::vector<uint64_t> signals_sent_;
  int64_t num_live_ = 0;
  // A rank ended badly before launch began stopping the job.
  bool failure_seen_ = false;
  bool stopping_ = false;
  // Launch stopped the job because a rank failed (not for a signal or the deadline).
  bool stop_for_failure_ = false;
  absl::Time stop_began_at_ = absl::InfiniteFuture();
  bool killed_ = false;
  Clock::time_point kill_at_ = Clock::time_point::max();
  // After the first failure: until when launch waits for its cause to end by itself.
  Clock::time_point cause_wait_until_ = Clock::time_point::max();
  Clock::time_point give_up_at_ = Clock::time_point::max();
};

bool IsJobIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

}  // namespace

int RankExit::ExitStatus() const {
  switch (end) {
    case RankEnd::kExited:
      return exit_code;
    case RankEnd::kSignaled:
      return 128 + signal;
    case RankEnd::kNotReaped:
    case RankEnd::kReapedElsewhere:
      break;
  }
  return 255;
}

std::string RankExit::Describe() const {
  switch (end) {
    case RankEnd::kExited:
      return absl::StrCat("exited with code ", exit_code);
    case RankEnd::kSignaled:
      return absl::StrCat("killed by ", SignalName(signal));
    case RankEnd::kNotReaped:
      return absl::StrCat("still running ", absl::FormatDuration(kWaitAfterSigkill),
                          " after SIGKILL; abandoned");
    case RankEnd::kReapedElsewhere:
      return "reaped by another waiter in this process; exit status unknown";
  }
  return "in an unknown state";
}

int LaunchResult::ExitCode() const {
  if (timed_out) return kTimedOutExitCode;
  if (first_failed_rank.has_value()) {
    const RankExit& first = ranks[*first_failed_rank];
    // A silent rank launch had to stop: its SIGTERM is not what failed the job.
    if (first_failure_unresponsive && (first.stopped_by_launcher || first.ok())) return 1;
    return first.ExitStatus();
  }
  if (received_signal != 0) return 128 + received_signal;
  for (const RankExit& rank : ranks) {
    if (!rank.ok()) return rank.ExitStatus();
  }
  return 0;
}

bool Restartable(const LaunchResult& result) {
  if (result.timed_out || result.received_signal != 0 || !result.first_failed_rank.has_value()) {
    return false;
  }
  const RankExit& first = result.ranks[static_cast<size_t>(*result.first_failed_rank)];
  if (result.first_failure_unresponsive) return true;
  if (first.end == RankEnd::kSignaled) return true;
  return first.end == RankEnd::kExited && first.exit_code != 0 && first.exit_code != 2;
}

absl::StatusOr<RestartedLaunch> LaunchWithRestarts(const LaunchOptions& options,
                                                   const RestartPolicy& policy) {
  if (policy.max_restarts < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_restarts ", policy.max_restarts, " must be >= 0"));
  }
  RestartedLaunch out;
  LOOM_ASSIGN_OR_RETURN(out.last, Launch(options));
  LaunchOptions again = options;
  if (!policy.restart_argv.empty()) again.argv = policy.restart_argv;
  while (out.restarts < policy.max_restarts && Restartable(out.last)) {
    if (policy.on_restart && !policy.on_restart(out.restarts + 1, out.last, &again)) break;
    ++out.restarts;
    LOOM_ASSIGN_OR_RETURN(out.last, Launch(again));
  }
  return out;
}

std::string Describe(const LaunchResult& result) {
  std::string out;
  const bool all_ok = std::all_of(result.ranks.begin(), result.ranks.end(),
                                  [](const RankExit& rank) { return rank.ok(); });
  if (!all_ok || result.timed_out || result.received_signal != 0) {
    if (result.timed_out) {
      absl::StrAppend(&out, "launch: job timed out after ", absl::FormatDuration(result.timeout),
                      "; stopped every rank\n");
    } else if (result.first_failed_rank.has_value()) {
      const RankExit& first = result.ranks[*result.first_failed_rank];
      absl::StrAppend(&out, "launch: rank ", first.rank, " (pid ", first.pid, ") ",
                      result.first_failure.empty() ? first.Describe() : result.first_failure, "\n");
    }
    if (result.received_signal != 0) {
      absl::StrAppend(&out, "launch: received ", SignalName(result.received_signal),
                      "; forwarded it to every running rank\n");
    }
    absl::StrAppend(&out, "launch: ranks of job ", result.job_id, ":\n");
    for (const RankExit& rank : result.ranks) {
      absl::StrAppend(&out, "launch:   rank ", rank.rank, " (pid ", rank.pid,
                      "): ", rank.Describe(), rank.note.empty() ? "" : ", ", rank.note,
                      rank.stopped_by_launcher ? ", stopped by launch" : "", "\n");
    }
  }
  const size_t removed = result.removed_shm_segments.size();
  if (removed > 0) {
    absl::StrAppend(&out, "launch: removed ", removed, " leftover shared-memory segment",
                    removed == 1 ? "" : "s", " of job ", result.job_id, "\n");
  }
  for (const std::string& error : result.shm_cleanup_errors) {
    absl::StrAppend(&out, "launch: could not remove a leftover shared-memory segment: ", error, "\n");
  }
  return out;
}

absl::Status ValidateJobId(absl::string_view job_id) {
  if (job_id.empty() || job_id.size() > static_cast<size_t>(kMaxJobIdLength) ||
      !std::all_of(job_id.begin(), job_id.end(), IsJobIdChar)) {
    return absl::InvalidArgumentError(absl::StrCat("job id \"", job_id, "\" must be 1 to ", kMaxJobIdLength,
                                                   " characters from [A-Za-z0-9_-]"));
  }
  return absl::OkStatus();
}

std::string GenerateJobId() {
  char host_buffer[256] = {};
  std::string host;
  if (gethostname(host_buffer, sizeof(host_buffer) - 1) == 0) {
    for (const char c : absl::string_view(host_buffer)) {
      if (c == '.' || host.size() == 32) break;
      host.push_back(IsJobIdChar(c) ? c : '-');
    }
  }
  if (host.empty()) host = "loom";
  uint32_t suffix = 0;
  if (getrandom(&suffix, sizeof(suffix), GRND_NONBLOCK) != static_cast<ssize_t>(sizeof(suffix))) {
    // No entropy yet (early boot): the clock still separates jobs of one pid.
    const uint64_t ticks = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
    suffix = static_cast<uint32_t>((ticks * 0x9E3779B97F4A7C15ULL) >> 32);
  }
  return absl::StrCat(host, "-", getpid(), "-", absl::Hex(suffix, absl::kZeroPad8));
}

absl::StatusOr<ShmCleanup> RemoveJobShmSegments(absl::string_view job_id) {
  LOOM_RETURN_IF_ERROR(ValidateJobId(job_id));
  const std::string prefix = absl::StrCat("loom.", job_id, ".");
  ShmCleanup cleanup;
  std::vector<std::string> names;
  {
    const std::unique_ptr<DIR, int (*)(DIR*)> dir(opendir(kShmDir), &closedir);
    if (dir == nullptr) {
      if (errno == ENOENT) return cleanup;
      return absl::ErrnoToStatus(errno, absl::StrCat("opendir(\"", kShmDir, "\")"));
    }
    while (const struct dirent* entry = readdir(dir.get())) {
      const absl::string_view name = entry->d_name;
      if (name.size() > prefix.size() && absl::StartsWith(name, prefix)) names.emplace_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  for (std::string& name : names) {
    const std::string shm_name = absl::StrCat("/", name);
    if (shm_unlink(shm_name.c_str()) == 0) {
      cleanup.removed.push_back(std::move(name));
    } else if (errno != ENOENT) {
      cleanup.errors.emplace_back(
          absl::ErrnoToStatus(errno, absl::StrCat("shm_unlink(\"", shm_name, "\")")).message());
    }
  }
  return cleanup;
}

absl::StatusOr<LaunchResult> Launch(const LaunchOptions& options) {
  LOOM_RETURN_IF_ERROR(ValidateOptions(options));
  LOOM_ASSIGN_OR_RETURN(const std::string path, ResolveProgram(options.argv[0]));
  MutexLock lock(&g_launch_mu);
  Job job(options, options.job_id.empty() ? GenerateJobId() : options.job_id);
  return job.Run(path);
}

}  // namespace loom
