#include "collectives/transport/mpi/mpirun.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace loom {
namespace {

// How long mpirun may take to end after a signal was forwarded to it before the
// supervisor SIGKILLs it (Open MPI itself stops its ranks within a few seconds), and
// how long the caller gives the supervisor (longer, so that the supervisor still
// removes the directories after such a kill).
constexpr int kMpirunGraceSeconds = 20;
constexpr int kSupervisorGraceSeconds = 30;

// The signals a supervisor passes on to its child; SIGCHLD wakes it when the child
// ends.
sigset_t SupervisedSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) sigaddset(&set, sig);
  return set;
}

timespec Now() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now;
}

// Supervise waits for `child` to end and returns its wait status (-1 when it cannot
// wait for it). The signals of SupervisedSignals() must be blocked in this thread:
// each one but SIGCHLD is forwarded to the child; `grace_seconds` after the first,
// the child is SIGKILLed. `*forwarded` gets the first signal forwarded (0: none).
int Supervise(pid_t child, int grace_seconds, int* forwarded) {
  const sigset_t signals = SupervisedSignals();
  bool stopping = false;
  timespec deadline{};
  for (;;) {
    int status = 0;
    const pid_t done = waitpid(child, &status, WNOHANG);
    if (done == child) return status;
    if (done < 0 && errno != EINTR) return -1;
    siginfo_t info;
    int sig;
    if (!stopping) {
      sig = sigwaitinfo(&signals, &info);
    } else {
      const timespec now = Now();
      timespec left{deadline.tv_sec - now.tv_sec, deadline.tv_nsec - now.tv_nsec};
      if (left.tv_nsec < 0) {
        left.tv_nsec += 1000000000L;
        --left.tv_sec;
      }
      if (left.tv_sec < 0) {
        kill(child, SIGKILL);
        while (waitpid(child, &status, 0) < 0) {
          if (errno != EINTR) return -1;
        }
        return status;
      }
      sig = sigtimedwait(&signals, &info, &left);
    }
    if (sig <= 0 || sig == SIGCHLD) continue;
    kill(child, sig);
    if (!stopping) {
      *forwarded = sig;
      stopping = true;
      deadline = Now();
      deadline.tv_sec += grace_seconds;
    }
  }
}

int ExitCode(int status) {
  if (status < 0) return 2;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 2;
}

// MakeJobDirectory creates `base`/loom-mpirun-<pid>-XXXXXX; empty when it cannot.
std::string MakeJobDirectory(const std::string& base) {
  std::string dir = base + "/loom-mpirun-" + std::to_string(getpid()) + "-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) return "";
  return dir;
}

void RemoveAll(const std::vector<std::string>& dirs) {
  for (const std::string& dir : dirs) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
}

}  // namespace

int RunUnderMpirun(int ranks, int argc, char** argv) {
  char self[4096];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length <= 0) {
    std::perror("mpirun: readlink /proc/self/exe");
    return 2;
  }
  self[length] = '\0';

  // The job's own directories: Open MPI's session directory (and PMIx's files under
  // it) in one, the shared-memory segments in one on /dev/shm (a tmpfs, as vader's
  // default is), both removed below whatever happens to mpirun.
  const char* tmpdir = std::getenv("TMPDIR");
  const std::string session = MakeJobDirectory(tmpdir != nullptr && *tmpdir ? tmpdir : "/tmp");
  if (session.empty()) {
    std::perror("mpirun: cannot create the job's session directory (mkdtemp under $TMPDIR)");
    return 2;
  }
  struct stat shm_info;
  std::string segments;
  if (stat("/dev/shm", &shm_info) == 0 && S_ISDIR(shm_info.st_mode)) {
    segments = MakeJobDirectory("/dev/shm");
  }
  std::vector<std::string> dirs = {session};
  if (!segments.empty()) dirs.push_back(segments);
  const std::string& backing = segments.empty() ? session : segments;

  const std::string np = std::to_string(ranks);
  std::vector<const char*> args = {"mpirun",
                                   "--allow-run-as-root",
                                   "--oversubscribe",
                                   "--bind-to",
                                   "none",
                                   "--mca",
                                   "btl",
                                   "self,vader",
                                   // A rank that finalized may still be reported as
                                   // "exiting improperly" (PID 0): PMIx_Finalize waits
                                   // only 2 s for mpirun's acknowledgement (PMIx 4.2's
                                   // client), and on a loaded machine mpirun records
                                   // the finalize after the exit. Loom's ranks end
                                   // with MPI_Finalize and 0, or MPI_Abort, or a
                                   // non-zero code, which still ends the job.
                                   "--mca",
                                   "orte_allowed_exit_without_sync",
                                   "1",
                                   "--mca",
                                   "orte_tmpdir_base",
                                   session.c_str(),
                                   "--mca",
                                   "btl_vader_backing_directory",
                                   backing.c_str(),
                                   "--mca",
                                   "osc_sm_backing_directory",
                                   backing.c_str(),
                                   "--mca",
                                   "osc_rdma_backing_directory",
                                   backing.c_str(),
                                   "-np",
                                   np.c_str(),
                                   self};
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  // Under AddressSanitizer the ranks keep every check but the leak report: Open MPI
  // 4.1 leaves thousands of allocations behind at MPI_Finalize, most from MCA
  // components it has already unloaded (so LeakSanitizer can neither name nor
  // suppress them), and the MPI transport keeps its duplicate communicators on
  // purpose (endpoint.cc). Later options override earlier ones.
  if (const char* asan = std::getenv("ASAN_OPTIONS"); asan != nullptr) {
    setenv("ASAN_OPTIONS", (std::string(asan) + ":detect_leaks=0").c_str(), 1);
  }
  // Under ThreadSanitizer the ranks keep race detection but not the lock-order
  // (deadlock) detector: Open MPI is not instrumented, and its shared-memory BTL
  // takes two locks of its own in both orders (reported inside mca_btl_vader_send
  // in the conformance suite).
  if (const char* tsan = std::getenv("TSAN_OPTIONS"); tsan != nullptr) {
    setenv("TSAN_OPTIONS", (std::string(tsan) + ":detect_deadlocks=0").c_str(), 1);
  }
  std::fflush(stdout);
  std::fflush(stderr);

  // Three processes: this one waits for a supervisor, which starts mpirun, waits for
  // it and removes the directories. Signals sent to this process reach mpirun through
  // the supervisor; if this process is SIGKILLed, the supervisor gets SIGTERM (its
  // parent-death signal) and passes it on, so mpirun still stops its ranks and the
  // directories still go. The supervisor has a process group of its own, so a signal
  // sent to this process's group reaches mpirun once, through it.
  const sigset_t signals = SupervisedSignals();
  sigset_t old_mask;
  sigprocmask(SIG_BLOCK, &signals, &old_mask);
  const pid_t parent = getpid();
  const pid_t supervisor = fork();
  if (supervisor < 0) {
    std::perror("mpirun: fork");
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    RemoveAll(dirs);
    return 2;
  }
  if (supervisor == 0) {
    setpgid(0, 0);
    signal(SIGCHLD, SIG_DFL);  // waitpid needs the child kept as a zombie
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    int code = 143;  // as if SIGTERM ended mpirun, when the parent is gone already
    if (getppid() == parent) {
      const pid_t mpirun = fork();
      if (mpirun == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);  // a SIGKILLed supervisor still ends the job
        sigprocmask(SIG_SETMASK, &old_mask, nullptr);
        execvp("mpirun", const_cast<char* const*>(args.data()));
        std::perror("mpirun: cannot run mpirun (apt-get install openmpi-bin)");
        _exit(2);
      }
      int forwarded = 0;
      code = mpirun < 0 ? 2 : ExitCode(Supervise(mpirun, kMpirunGraceSeconds, &forwarded));
    }
    RemoveAll(dirs);
    _exit(code);
  }
  int forwarded = 0;
  const int status = Supervise(supervisor, kSupervisorGraceSeconds, &forwarded);
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  RemoveAll(dirs);  // already gone, unless the supervisor itself was killed
  // A job the user stopped with a signal ends as that signal would have ended this
  // process (128 + n), as Loom's launcher does, whatever mpirun made of it.
  if (forwarded != 0) return 128 + forwarded;
  return ExitCode(status);
}

}  // namespace loom
