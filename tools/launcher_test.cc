#include "tools/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/job_files.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

// Each test's ranks sleep this long unless stopped; every test that stops them must
// return in a small fraction of it.
constexpr char kSleep[] = "sleep 60";
constexpr absl::Duration kWellUnderTheSleep = absl::Seconds(10);

std::string TestDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

// Options for `n` ranks of /bin/sh running `script`; $1 in the script is `arg`.
LaunchOptions Shell(int64_t n, const std::string& script, const std::string& arg = "") {
  LaunchOptions options;
  options.num_ranks = n;
  options.argv = {"/bin/sh", "-c", script, "sh", arg};
  return options;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

class Stopwatch {
 public:
  absl::Duration Elapsed() const {
    return absl::FromChrono(std::chrono::steady_clock::now() - start_);
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

TEST(LaunchTest, EveryRankSeesItsEnvironment) {
  const std::string dir = absl::StrCat(TestDir(), "/env");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  const LaunchOptions options = Shell(
      4,
      "echo \"$LOOM_RANK $LOOM_WORLD_SIZE $LOOM_LOCAL_RANK $LOOM_LOCAL_WORLD_SIZE $LOOM_JOB_ID\""
      " > \"$1/rank.$LOOM_RANK\"",
      dir);
  LOOM_ASSERT_OK_AND_ASSIGN(const LaunchResult result, Launch(options));

  EXPECT_THAT(ValidateJobId(result.job_id), IsOk());
  std::set<pid_t> pids;
  for (int64_t rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(ReadFile(absl::StrCat(dir, "/rank.", rank)),
              absl::StrCat(rank, " 4 ", rank, " 4 ", result.job_id, "\n"));
    const RankExit& rank_exit = result.ranks[rank];
    EXPECT_EQ(rank_exit.rank, rank);
    EXPECT_TRUE(rank_exit.ok()) << rank_exit.Describe();
    EXPECT_FALSE(rank_exit.stopped_by_launcher);
    pids.insert(rank_exit.pid);
  }
  EXPECT_EQ(pids.size(), 4u);
  EXPECT_EQ(result.first_failed_rank, std::nullopt);
  EXPECT_EQ(result.ExitCode(), 0);
  EXPECT_EQ(Describe(result), "");
}

TEST(LaunchTest, EveryRankRunsInItsOwnProcessGroup) {
  const std::string dir = absl::StrCat(TestDir(), "/pgid");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  // $$ is the shell's pid; ps is not needed: /proc/self/stat field 5 is the pgid.
  const LaunchOptions options =
      Shell(2, "read -r stat < /proc/$$/stat; set -- \"$1\" $stat; echo \"$6\" > \"$1/pgid.$LOOM_RANK\"", dir);
  LOOM_ASSERT_OK_AND_ASSIGN(const LaunchResult result, Launch(options));
  ASSERT_EQ(result.ExitCode(), 0) << Describe(result);
  for (int64_t rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(ReadFile(absl::StrCat(dir, "/pgid.", rank)), absl::StrCat(result.ranks[rank].pid, "\n"));
  }
}

TEST(LaunchTest, GivenJobIdReplacesTheLaunchersOwn) {
  const std::string dir = absl::StrCat(TestDir(), "/job_id");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  // A nested launch must not hand its own job id down.
  ASSERT_EQ(setenv("LOOM_JOB_ID", "outer", 1), 0);
  LaunchOptions options = Shell(2, "echo \"$LOOM_JOB_ID\" > \"$1/job.$LOOM_RANK\"", dir);
  options.job_id = "given_Job-7";
  LOOM_ASSERT_OK_AND_ASSIGN(const LaunchResult result, Launch(options));
  ASSERT_EQ(unsetenv("LOOM_JOB_ID"), 0);
  EXPECT_EQ(result.job_id, "given_Job-7");
  EXPECT_EQ(ReadFile(absl::StrCat(dir, "/job.0")), "given_Job-7\n");
  EXPECT_EQ(ReadFile(absl::StrCat(dir, "/job.1")), "given_Job-7\n");
}

// True once `pid` has exited (gone, or a zombie waiting for whoever inherited it),
// waiting up to `within` for that.
bool ExitsWithin(pid_t pid, absl::Duration within) {
  const Stopwatch stopwatch;
  while (stopwatch.Elapsed() < within) {
    const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
    // The state follows the parenthesized command name: "pid (comm) S ...".
    const size_t paren = stat.rfind(')');
    if (stat.empty() || (paren != std::string::npos && stat.substr(paren + 2, 1) == "Z")) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return false;
}

TEST(LaunchTest, FailingRankStopsTheOthers) {
  const std::string dir = absl::StrCat(TestDir(), "/failing");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  // Ranks 0 and 2 start a sleep of their own and wait for it; rank 1 fails once both
  // sleeps are running, so stopping ranks 0 and 2 must reach their children too.
  LaunchOptions options = Shell(3,
                                absl::StrCat("if [ \"$LOOM_RANK\" = 1 ]; then "
                                             "  until [ -s \"$1/sleep.0\" ] && [ -s \"$1/sleep.2\" ]; do sleep 0.02; done;"
                                             "  exit 3; "
                                             "fi; ",
                                             kSleep, " & echo $! > \"$1/sleep.$LOOM_RANK\"; wait"),
                                dir);
  options.timeout = absl::Seconds(30);  // bounds the test if the ranks misbehave
  const Stopwatch stopwatch;
  LOOM_ASSERT_OK_AND_ASSIGN(const LaunchResult result, Launch(options));
  EXPECT_LT(stopwatch.Elapsed(), kWellUnderTheSleep);

  ASSERT_EQ(result.first_failed_rank, 1) << Describe(result);
  EXPECT_EQ(result.ranks[1].end, RankEnd::kExited);
  EXPECT_EQ(result.ranks[1].exit_code, 3);
  EXPECT_FALSE(result.ranks[1].stopped_by_launcher);
  for (const int64_t rank : {0, 2}) {
    EXPECT_EQ(result.ranks[rank].end, RankEnd::kSignaled) << result.ranks[rank].Describe();
    EXPECT_EQ(result.ranks[rank].signal, SIGTERM);
    EXPECT_TRUE(result.ranks[rank].stopped_by_launcher);
    const std::string sleep_pid = ReadFile(absl::StrCat(dir, "/sleep.", rank));
    pid_t pid = 0;
    ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(sleep_pid), &pid)) << sleep_pid;
    EXPECT_TRUE(ExitsWithin(pid, absl::Seconds(5))) << "rank " << rank << "'s sleep " << pid;
  }
  EXPECT_EQ(result.ExitCode(), 3);
  const std::string pid = absl::StrCat(result.ranks[1].pid);
  const std::string report = Describe(result);
  EXPECT_THAT(report, StartsWith(absl::StrCat("launch: rank 1 (pid ", pid, ") exited with code 3\n")));
  EXPECT_THAT(report, HasSubstr(absl::StrCat("launch: ranks of job ", result.job_id, ":\n")));
  EXPECT_THAT(report, HasSubstr(absl::StrCat("launch:   rank 0 (pid ", result.ranks[0].pid,
                                             "): killed by signal 15 (Terminated), stopped by launch\n")));
  EXPECT_THAT(report, HasSubstr(absl::StrCat("launch:   rank 1 (pid ", pid, "): exited with code 3\n")));
}

TEST(LaunchTest, RankKilledBySignalIsReportedAsSuch) {
  const LaunchOptions options = Shell(2, absl::StrCat("[ \"$LOOM_RANK\" != 0 ] || kill -9 $$; ", kSleep));
  const Stopwatch stopwatch;
  LOOM_ASSERT_OK_AND_ASSIGN(const LaunchResult result, Launch(options));
  EXPECT_LT(stopwatch.Elapsed(), kWellUnderTheSleep);
  ASSERT_EQ(result.first_failed_rank, 0);
  EXPECT_EQ(result.ranks[0].end, RankEnd::kSignaled);
  EXPECT_EQ(result.ranks[0].signal, SIGKILL);
  EXPECT_EQ(result.ranks[0].Describe(), "killed by signal 9 (Killed)");
  EXPECT_EQ(result.ExitCode(), 128 + 9);
  EXPECT_THAT(Describe(result),
              StartsWith(absl::StrCat("launch: rank 0 (pid ", result.ranks[0].pid, ") killed by signal 9 (Killed)\n")));
}

// A job whose rank 1 dies of SIGKILL on its first two runs and exits 0 on the
// third: two restarts bring it home; with one, the second failure is the outcome.
TEST(LaunchRestartTest, RestartsAKilledJobUpToTheLimit) {
  for (const int limit : {1, 2, 3}) {
    SCOPED_TRACE(absl::StrCat("max_restarts ", limit));
    const std::string counter = absl::StrCat(TestDir(), "/runs.", limit);
    unlink(counter.c_str());
    // Each run of rank 1 appends a line; the first two runs die.
    const LaunchOptions options = Shell(2,
                                        "[ \"$LOOM_RANK\" = 1 ] || exit 0; echo run >> \"$1\"; "
                                        "[ \"$(wc -l < \"$1\")\" -ge 3 ] || kill -9 $$",
                                        counter);
    RestartPolicy policy;
    policy.max_restarts = limit;
    std::vector<int> seen;
    policy.on_restart = [&](int restart, const LaunchResult& failed, LaunchOptions* next) {
      seen.push_back(restart);
      EXPECT_EQ(failed.first_failed_rank, 1);
      EXPECT_TRUE(Restartable(failed));
      EXPECT_EQ(next->num_ranks, 2);
      return true;
    };
    LOOM_ASSERT_OK_AND_ASSIGN(const RestartedLaunch result, LaunchWithRestarts(options, policy));
    EXPECT_EQ(result.restarts, std::min(limit, 2));
    EXPECT_EQ(static_cast<int>(seen.size()), result.restarts);
    EXPECT_EQ(result.last.ExitCode(), limit >= 2 ? 0 : 128 + SIGKILL);
  }
}

// on_restart may change the restart (here: one rank fewer, as when a host is lost)
// or refuse it.
TEST(LaunchRestartTest, ARestartMayRunWithFewerRanksOrNotAtAll) {
  const std::string counter = absl::StrCat(TestDir(), "/ranks.fewer");
  unlink(counter.c_str());
  // Fails while it has 3 ranks; each rank records the world size it saw.
  const LaunchOptions options = Shell(
      3, "echo \"$LOOM_WORLD_SIZE\" >> \"$1\"; [ \"$LOOM_WORLD_SIZE\" -lt 3 ] || exit 1", counter);
  RestartPolicy policy;
  policy.max_restarts = 2;
  policy.on_restart = [](int, const LaunchResult&, LaunchOptions* next) {
    next->num_ranks -= 1;
    return true;
  };
  LOOM_ASSERT_OK_AND_ASSIGN(const RestartedLaunch fewer, LaunchWithRestarts(options, policy));
  EXPECT_EQ(fewer.restarts, 1);
  EXPECT_EQ(fewer.last.ExitCode(), 0);
  EXPECT_EQ(fewer.last.ranks.size(), 2u);
  // The first run's ranks record 3 (those that started before the first exit 1
  // stopped the job: one to three of them), the restart's two ranks record 2.
  const std::string seen = ReadFile(counter);
  EXPECT_THAT(seen, StartsWith("3\n"));
  EXPECT_THAT(seen, ::testing::EndsWith("\n2\n2\n"));
  EXPECT_THAT(seen, ::testing::Not(HasSubstr("2\n3")));
  policy.on_restart = [](int, const LaunchResult&, LaunchOptions*) { return false; };
  LOOM_ASSERT_OK_AND_ASSIGN(const RestartedLaunch refused, LaunchWithRestarts(options, policy));
  EXPECT_EQ(refused.restarts, 0);
  EXPECT_EQ(refused.last.ExitCode(), 1);
}

// A usage error (exit 2) and a job that succeeded are never restarted.
TEST(LaunchRestartTest, UsageErrorsAndSuccessAreNotRestarted) {
  RestartPolicy policy;
  policy.max_restarts = 3;
  int restarts = 0;
  policy.on_restart = [&](int, const LaunchResult&, LaunchOptions*) {
    ++restarts;
    return true;
  };
  LOOM_ASSERT_OK_AND_ASSIGN(RestartedLaunch usage, LaunchWithRestarts(Shell(2, "exit 2"), policy));
  EXPECT_EQ(usage.last.ExitCode(), 2);
  LOOM_ASSERT_OK_AND_ASSIGN(RestartedLaunch fine, LaunchWithRestarts(Shell(2, "exit 0"), policy));
  EXPECT_EQ(fine.last.ExitCode(), 0);
  EXPECT_EQ(restarts, 0);
  policy.max_restarts = -1;
  EXPECT_THAT(LaunchWithRestarts(Shell(1, "exit 0"), policy),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_restarts -1")));
}

TEST(LaunchTest, RankIgnoringSigtermGetsSigkillAfterTheGrace) {
  const std::string dir = absl::StrCat(TestDir(), "/ignoring");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  // Rank 0 (and the sleep it becomes, which inherits the ignored SIGTERM) shrugs off
  // SIGTERM; rank 1 fails once rank 0 has set that up.
  LaunchOptions options = Shell(2,
                                absl::StrCat("if [ \"$LOOM_RANK\" = 1 ]; then "
                                             "  until [ -e \"$1/trapped\" ]; do sleep 0.02; done; exit 4; "
                                             "fi; "
                                             "trap '' TERM; touch \"$1/trapped\"; exec ",
                                             kSleep),
                                dir);
  options.timeout = absl::Seconds(30);  // bounds the test if the ranks misbehave
  options.grace = absl::Milliseconds(300);
  const Stopwatch stopwatch;
  LOOM_ASSERT_OK_AND_ASSIGN(const LaunchResult result, Launch(options));
  EXPECT_GE(stopwatch.Elapsed(), options.grace);
  EXPECT_LT(stopwatch.Elapsed(), kWellUnderTheSleep);
  EXPECT_EQ(result.first_failed_rank, 1);
  EXPECT_EQ(result.ranks[0].end, RankEnd::kSignaled);
  EXPECT_EQ(result.ranks[0].signal, SIGKILL);
  EXPECT_TRUE(result.ranks[0].stopped_by_launcher);
  EXPECT_EQ(result.ExitCode(), 4);
}

TEST(LaunchTest, TimeoutStopsTheJob) {
  LaunchOptions options = Shell(2, kSleep);
  options.timeout = absl::Milliseconds(300);
  const Stopwatch stopwatch;
  LOOM_ASSERT_OK_AND_ASSIGN(const LaunchResult result, Launch(options));
  EXPECT_GE(stopwatch.Elapsed(), options.timeout);
  EXPECT_LT(stopwatch.Elapsed(), kWellUnderTheSleep);
  EXPECT_TRUE(result.timed_out);
  EXPECT_EQ(result.first_failed_rank, std::nullopt);
  for (const RankExit& rank_exit : result.ranks) {
    EXPECT_EQ(rank_exit.signal, SIGTERM) << rank_exit.Describe();
    EXPECT_TRUE(rank_exit.stopped_by_launcher);
  }
  EXPECT_EQ(result.ExitCode(), 124);
  EXPECT_THAT(Describe(result), StartsWith("launch: job timed out after 300ms; stopped every rank\n"));
}

TEST(LaunchTest, JobEndingBeforeTheTimeoutSucceeds) {
  LaunchOptions options = Shell(2, "exit 0");
  options.timeout = absl::Seconds(30);
  LOOM_ASSERT_OK_AND_ASSIGN(const LaunchResult result, Launch(options));
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(result.ExitCode(), 0);
}

TEST(LaunchTest, ForwardsSignalsToEveryRank) {
  // Rank 0 sends SIGTERM to its parent, the launcher (this test), which forwards it.
  const LaunchOptions options =
      Shell(3, absl::StrCat("[ \"$LOOM_RANK\" != 0 ] || kill -TERM $PPID; ", kSleep));
  const Stopwatch stopwatch;
  LOOM_ASSERT_OK_AND_ASSIGN(const LaunchResult result, Launch(options));
  EXPECT_LT(stopwatch.Elapsed(), kWellUnderTheSleep);
  EXPECT_EQ(result.received_signal, SIGTERM);
  EXPECT_EQ(result.first_failed_rank, std::nullopt);
  for (const RankExit& rank_exit : result.ranks) {
    EXPECT_EQ(rank_exit.signal, SIGTERM) << rank_exit.Describe();
    EXPECT_TRUE(rank_exit.stopped_by_launcher);
  }
  EXPECT_EQ(result.ExitCode(), 128 + SIGTERM);
  EXPECT_THAT(Describe(result),
              StartsWith("launch: received signal 15 (Terminated); forwarded it to every running rank\n"));
}

TEST(LaunchTest, StoppedRankIsContinuedToActOnSigterm) {
  // The shell stops itself; SIGTERM alone would wait for SIGKILL at the end of the
  // grace.
  LaunchOptions options = Shell(1, "kill -STOP $$; exit 0");
  options.timeout = absl::Milliseconds(300);
  options.grace = absl::Seconds(20);
  const Stopwatch stopwatch;
  LOOM_ASSERT_OK_AND_ASSIGN(const LaunchResult result, Launch(options));
  EXPECT_LT(stopwatch.Elapsed(), kWellUnderTheSleep);
  EXPECT_TRUE(result.timed_out);
  EXPECT_EQ(result.ranks[0].signal, SIGTERM) << result.ranks[0].Describe();
}

// Points this process's standard input at `fd` until destroyed.
class StdinRedirect {
 public:
  explicit StdinRedirect(int fd) : saved_(dup(STDIN_FILENO)) { dup2(fd, STDIN_FILENO); }
  ~StdinRedirect() {
    dup2(saved_, STDIN_FILENO);
    close(saved_);
  }

 private:
  const int saved_;
};

TEST(LaunchTest, RanksReadEndOfFileRatherThanATerminal) {
  const int terminal = posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(terminal, 0);
  ASSERT_EQ(grantpt(terminal), 0);
  ASSERT_EQ(unlockpt(terminal), 0);
  char name[128];
  ASSERT_EQ(ptsname_r(terminal, name, sizeof(name)), 0);
  const int tty = open(name, O_RDWR | O_NOCTTY);
  ASSERT_GE(tty, 0);
  const std::string dir = absl::StrCat(TestDir(), "/tty");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  LaunchOptions options =
      Shell(2, "if read -r line; then echo \"line $line\"; else echo eof; fi > \"$1/stdin.$LOOM_RANK\"", dir);
  options.timeout = absl::Seconds(5);  // a rank reading the terminal would wait forever
  {
    const StdinRedirect redirect(tty);
    LOOM_ASSERT_OK_AND_ASSIGN(const LaunchResult result, Launch(options));
    EXPECT_EQ(result.ExitCode(), 0) << Describe(result);
  }
  close(tty);
  close(terminal);
  EXPECT_EQ(ReadFile(absl::StrCat(dir, "/stdin.0")), "eof\n");
  EXPECT_EQ(ReadFile(absl::StrCat(dir, "/stdin.1")), "eof\n");
}

TEST(LaunchTest, RanksReadAPipedStandardInput) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(write(fds[1], "hello\n", 6), 6);
  close(fds[1]);
  const std::string dir = absl::StrCat(TestDir(), "/pipe");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  LaunchOptions options =
      Shell(1, "if read -r line; then echo \"line $line\"; else echo eof; fi > \"$1/stdin.$LOOM_RANK\"", dir);
  options.timeout = absl::Seconds(5);
  {
    const StdinRedirect redirect(fds[0]);
    LOOM_ASSERT_OK_AND_ASSIGN(const LaunchResult result, Launch(options));
    EXPECT_EQ(result.ExitCode(), 0) << Describe(result);
  }
  close(fds[0]);
  EXPECT_EQ(ReadFile(absl::StrCat(dir, "/stdin.0")), "line hello\n");
}

TEST(LaunchTest, RemovesTheJobsLeftoverSharedMemory) {
  if (!Exists("/dev/shm")) GTEST_SKIP() << "no /dev/shm on this machine";
  const std::string job_id = absl::StrCat("launcher_test-", getpid());
  // Segments of another job, one whose id merely starts with this one, must stay.
  const std::string other = absl::StrCat("/dev/shm/loom.", job_id, "x.seg");
  std::ofstream(other).put('x');
  ASSERT_TRUE(Exists(other));
  // Rank 1 fails once both segments exist (rank 0 is stopped): cleanup happens on
  // failure too.
  LaunchOptions options = Shell(2,
                                "echo data > \"/dev/shm/loom.$LOOM_JOB_ID.ring$LOOM_RANK\"; "
                                "[ \"$LOOM_RANK\" = 1 ] || exec sleep 60; "
                                "until [ -e \"/dev/shm/loom.$LOOM_JOB_ID.ring0\" ]; do sleep 0.02; done; "
                                "exit 1");
  options.job_id = job_id;
  options.timeout = absl::Seconds(30);  // bounds the test if the ranks misbehave
  LOOM_ASSERT_OK_AND_ASSIGN(const LaunchResult result, Launch(options));

  EXPECT_EQ(result.ExitCode(), 1);
  EXPECT_THAT(result.removed_shm_segments,
              ElementsAre(absl::StrCat("loom.", job_id, ".ring0"), absl::StrCat("loom.", job_id, ".ring1")));
  EXPECT_THAT(result.shm_cleanup_errors, IsEmpty());
  EXPECT_FALSE(Exists(absl::StrCat("/dev/shm/loom.", job_id, ".ring0")));
  EXPECT_FALSE(Exists(absl::StrCat("/dev/shm/loom.", job_id, ".ring1")));
  EXPECT_TRUE(Exists(other));
  EXPECT_THAT(Describe(result),
              HasSubstr(absl::StrCat("launch: removed 2 leftover shared-memory segments of job ", job_id, "\n")));
  unlink(other.c_str());
}

TEST(LaunchTest, SucceededJobReportsOnlyTheRemovedSegment) {
  if (!Exists("/dev/shm")) GTEST_SKIP() << "no /dev/shm on this machine";
  LaunchOptions options = Shell(1, "echo data > \"/dev/shm/loom.$LOOM_JOB_ID.0\"");
  LOOM_ASSERT_OK_AND_ASSIGN(const LaunchResult result, Launch(options));
  EXPECT_EQ(result.ExitCode(), 0);
  EXPECT_EQ(Describe(result),
            absl::StrCat("launch: removed 1 leftover shared-memory segment of job ", result.job_id, "\n"));
}

TEST(LaunchTest, RejectsBadOptions) {
  EXPECT_THAT(Launch(Shell(0, "true")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("number of ranks 0 is outside [1, 1024]")));
  EXPECT_THAT(Launch(Shell(1025, "true")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("number of ranks 1025 is outside")));
  EXPECT_THAT(Launch(LaunchOptions{}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no program to launch")));
  LaunchOptions negative = Shell(1, "true");
  negative.timeout = absl::Seconds(-1);
  EXPECT_THAT(Launch(negative), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("timeout -1s is negative")));
  negative = Shell(1, "true");
  negative.grace = absl::Milliseconds(-5);
  EXPECT_THAT(Launch(negative), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("grace -5ms is negative")));
  LaunchOptions bad_id = Shell(1, "true");
  bad_id.job_id = "../etc";
  EXPECT_THAT(Launch(bad_id), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("job id \"../etc\"")));
  bad_id.job_id = std::string(65, 'a');
  EXPECT_THAT(Launch(bad_id), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1 to 64 characters")));
}

TEST(LaunchTest, RejectsAProgramThatCannotRun) {
  LaunchOptions options;
  options.argv = {"loom-no-such-program"};
  EXPECT_THAT(Launch(options),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("program \"loom-no-such-program\" not found in PATH=")));
  options.argv = {"/nonexistent/prog"};
  EXPECT_THAT(Launch(options), StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/prog")));

  const std::string not_executable = absl::StrCat(TestDir(), "/not_executable");
  std::ofstream(not_executable) << "#!/bin/sh\n";
  options.argv = {not_executable};
  EXPECT_THAT(Launch(options), StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("is not executable")));

  // Executable but not a program: execve fails in the child, which reports why.
  const std::string garbage = absl::StrCat(TestDir(), "/garbage");
  std::ofstream(garbage) << "\x01\x02\x03 not an executable\n";
  ASSERT_EQ(chmod(garbage.c_str(), 0755), 0);
  options.argv = {garbage};
  options.num_ranks = 2;
  EXPECT_THAT(Launch(options), StatusIs(absl::StatusCode::kFailedPrecondition,
                                        HasSubstr("rank 0: execve(\"" + garbage + "\"): Exec format error")));
}

TEST(LaunchTest, GeneratedJobIdsAreValidAndDistinct) {
  const std::string a = GenerateJobId();
  const std::string b = GenerateJobId();
  EXPECT_THAT(ValidateJobId(a), IsOk());
  EXPECT_THAT(a, HasSubstr(absl::StrCat("-", getpid(), "-")));
  EXPECT_NE(a, b);
}

TEST(LaunchTest, RemoveJobShmSegmentsRejectsAMalformedId) {
  EXPECT_THAT(RemoveJobShmSegments("a.b"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"a.b\"")));
  EXPECT_THAT(RemoveJobShmSegments(""), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("job id \"\"")));
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// A rank's report, as tools/job_files.h writes it, from a shell rank.
std::string ShellReport(int peer_rank, const std::string& fault, const std::string& message) {
  return absl::StrCat(
      "printf 'rank %s\\npid %s\\nwhen_ns %s\\npeer_rank ", peer_rank, "\\npeer_fault ", fault,
      "\\nmessage ", message,
      "\\n' \"$LOOM_RANK\" $$ \"$(date +%s%N)\" > \"$LOOM_JOB_DIR/reports/$LOOM_RANK\"; ");
}

// The race of a killed rank: a survivor notices the death, reports it and exits 1;
// the dead rank is reaped later. The dead rank is the first failure, and the job
// exits 137, not 1. Rank 1 ignores SIGTERM, so that only its own SIGKILL ends it.
TEST(LaunchReportsTest, SurvivorThatNoticedADeathIsNotBlamed) {
  const LaunchOptions options = Shell(
      3, absl::StrCat("case $LOOM_RANK in "
                      "0) until [ -e \"$LOOM_JOB_DIR/trapped\" ]; do sleep 0.01; done; ",
                      ShellReport(1, "died", "shm: world rank 1 died"),
                      "exit 1;; "
                      "1) trap '' TERM; touch \"$LOOM_JOB_DIR/trapped\"; sleep 0.5; kill -9 $$;; "
                      "*) ",
                      kSleep, ";; esac"));
  const Stopwatch stopwatch;
  LOOM_ASSERT_OK_AND_ASSIGN(const LaunchResult result, Launch(options));
  EXPECT_LT(stopwatch.Elapsed(), kWellUnderTheSleep);
  ASSERT_EQ(result.first_failed_rank, 1) << Describe(result);
  EXPECT_EQ(result.ranks[1].signal, SIGKILL);
  EXPECT_FALSE(result.ranks[1].stopped_by_launcher);
  EXPECT_EQ(result.ExitCode(), 128 + 9);
  const std::string report = Describe(result);
  EXPECT_THAT(report, StartsWith(absl::StrCat("launch: rank 1 (pid ", result.ranks[1].pid,
                                              ") killed by signal 9 (Killed)\n")));
  EXPECT_THAT(report, HasSubstr(absl::StrCat("launch:   rank 0 (pid ", result.ranks[0].pid,
                                             "): exited with code 1, after world rank 1 died\n")));
  EXPECT_FALSE(Exists(JobDirectory(result.job_id))) << "the job directory is left";
}

// The race of an aborting rank: it reports its own failure and aborts its
// transports, and while it unwinds to its exit (code 3, half a second later) a peer
// that saw the abort exits 1 first. Launch lets the aborting rank end by itself
// (within the grace period) before it stops the others, so the job ends with the
// cause's code, not with the SIGTERM it would otherwise have sent it.
TEST(LaunchReportsTest, AnAbortingRankEndsWithItsOwnCode) {
  const LaunchOptions options = Shell(
      3, absl::StrCat("case $LOOM_RANK in "
                      "0) until [ -e \"$LOOM_JOB_DIR/aborted\" ]; do sleep 0.01; done; ",
                      ShellReport(1, "aborted", "shm: world rank 1 aborted: bad flag"),
                      "exit 1;; "
                      "1) ",
                      ShellReport(-1, "", "bad flag"),
                      "touch \"$LOOM_JOB_DIR/aborted\"; sleep 0.5; exit 3;; "
                      "*) ",
                      kSleep, ";; esac"));
  const Stopwatch stopwatch;
  LOOM_ASSERT_OK_AND_ASSIGN(const LaunchResult result, Launch(options));
  EXPECT_LT(stopwatch.Elapsed(), kWellUnderTheSleep);
  ASSERT_EQ(result.first_failed_rank, 1) << Describe(result);
  EXPECT_EQ(result.ranks[1].exit_code, 3) << Describe(result);
  EXPECT_FALSE(result.ranks[1].stopped_by_launcher);
  EXPECT_TRUE(result.ranks[2].stopped_by_launcher);
  EXPECT_EQ(result.ExitCode(), 3);
  EXPECT_THAT(Describe(result), StartsWith(absl::StrCat("launch: rank 1 (pid ", result.ranks[1].pid,
                                                        ") exited with code 3")));
}

// A rank that aborted and then hangs is stopped once the grace period is over.
TEST(LaunchReportsTest, AnAbortingRankThatHangsIsStoppedAfterTheGrace) {
  LaunchOptions options = Shell(
      2, absl::StrCat("case $LOOM_RANK in "
                      "0) until [ -e \"$LOOM_JOB_DIR/aborted\" ]; do sleep 0.01; done; ",
                      ShellReport(1, "aborted", "shm: world rank 1 aborted: bad flag"),
                      "exit 1;; "
                      "*) ",
                      ShellReport(-1, "", "bad flag"), "touch \"$LOOM_JOB_DIR/aborted\"; ",
                      kSleep, ";; esac"));
  options.grace = absl::Seconds(1);
  const Stopwatch stopwatch;
  LOOM_ASSERT_OK_AND_ASSIGN(const LaunchResult result, Launch(options));
  EXPECT_LT(stopwatch.Elapsed(), kWellUnderTheSleep);
  ASSERT_EQ(result.first_failed_rank, 1) << Describe(result);
  EXPECT_TRUE(result.ranks[1].stopped_by_launcher);
  EXPECT_EQ(result.ranks[1].signal, SIGTERM);
}

// A rank its peers report silent is the first failure though launch had to stop it
// (SIGTERM); the job exits 1.
TEST(LaunchReportsTest, UnresponsiveRankIsNamed) {
  const LaunchOptions options =
      Shell(2, absl::StrCat("if [ \"$LOOM_RANK\" = 0 ]; then ",
                            ShellReport(1, "stopped responding", "no heartbeat for 3s"),
                            "exit 1; fi; ", kSleep));
  LOOM_ASSERT_OK_AND_ASSIGN(const LaunchResult result, Launch(options));
  ASSERT_EQ(result.first_failed_rank, 1) << Describe(result);
  EXPECT_TRUE(result.first_failure_unresponsive);
  EXPECT_TRUE(result.ranks[1].stopped_by_launcher);
  EXPECT_EQ(result.ExitCode(), 1);
  const std::string report = Describe(result);
  EXPECT_THAT(report,
              StartsWith(absl::StrCat("launch: rank 1 (pid ", result.ranks[1].pid,
                                      ") stopped responding (reported by rank 0: no heartbeat "
                                      "for 3s)\n")));
  EXPECT_THAT(report, HasSubstr(absl::StrCat("launch:   rank 1 (pid ", result.ranks[1].pid,
                                             "): killed by signal 15 (Terminated), stopped "
                                             "responding, stopped by launch\n")));
}

// A rank that reports its own failure is named with its message; the job directory
// exists while the ranks run and is gone after.
TEST(LaunchReportsTest, OwnFailureCarriesItsMessageAndTheJobDirectoryIsRemoved) {
  const std::string dir = absl::StrCat(TestDir(), "/own");
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  const LaunchOptions options =
      Shell(2,
            absl::StrCat("echo \"$LOOM_JOB_DIR\" > \"$1/dir.$LOOM_RANK\"; "
                         "[ -d \"$LOOM_JOB_DIR/reports\" ] || exit 9; "
                         "if [ \"$LOOM_RANK\" = 1 ]; then ",
                         ShellReport(-1, "", "out of memory at step 7"), "exit 1; fi; ", kSleep),
            dir);
  LOOM_ASSERT_OK_AND_ASSIGN(const LaunchResult result, Launch(options));
  ASSERT_EQ(result.first_failed_rank, 1) << Describe(result);
  EXPECT_EQ(result.ExitCode(), 1);
  EXPECT_THAT(Describe(result), StartsWith(absl::StrCat("launch: rank 1 (pid ", result.ranks[1].pid,
                                                        ") exited with code 1: out of memory at "
                                                        "step 7\n")));
  // Rank 1's record: it writes it before it fails. Rank 0 may be stopped (SIGTERM, as
  // rank 1 fails) before its own echo has run, so dir.0 can be empty or missing.
  const std::string job_dir(absl::StripAsciiWhitespace(ReadFile(dir + "/dir.1")));
  EXPECT_EQ(job_dir, JobDirectory(result.job_id));
  EXPECT_FALSE(Exists(job_dir));
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// Rank 1 noticed rank 2's silence (and reported it at once, as ranks do), aborted,
// and is still unwinding when rank 0, which heard of it only as rank 1's abort, exits
// first. The silent rank 2 is the cause, not the rank that aborted.
TEST(LaunchReportsTest, AnAbortingPeerIsFollowedToItsCause) {
  const LaunchOptions options =
      Shell(3, absl::StrCat("case $LOOM_RANK in "
                            "0) sleep 0.2; ",
                            ShellReport(1, "aborted", "world rank 1 aborted"),
                            "exit 1;; "
                            "1) ",
                            ShellReport(2, "stopped responding", "no heartbeat"), kSleep,
                            ";; "
                            "*) ",
                            kSleep, ";; esac"));
  LOOM_ASSERT_OK_AND_ASSIGN(const LaunchResult result, Launch(options));
  ASSERT_EQ(result.first_failed_rank, 2) << Describe(result);
  EXPECT_TRUE(result.first_failure_unresponsive);
  EXPECT_EQ(result.ExitCode(), 1);
}

}  // namespace
}  // namespace loom
