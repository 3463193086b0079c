#include "tools/job_files.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectives/transport/peer_failure.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/internal/janitor.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

void Touch(const std::string& path) { std::ofstream(path) << "x"; }

std::string UniqueId(const char* what) {
  return absl::StrCat("jobfiles-", what, "-", getpid(), "-", absl::ToUnixNanos(absl::Now()));
}

// Polls until `path` is gone; false after 10 s.
bool WaitUntilGone(const std::string& path) {
  for (int i = 0; i < 1000; ++i) {
    if (!Exists(path)) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

TEST(RemoveTreeTest, RemovesNestedTreesButNotLinkTargets) {
  const std::string root = absl::StrCat(testing::TempDir(), "/tree-", getpid());
  const std::string outside = absl::StrCat(testing::TempDir(), "/outside-", getpid());
  ASSERT_EQ(mkdir(root.c_str(), 0700), 0);
  ASSERT_EQ(mkdir((root + "/a").c_str(), 0700), 0);
  ASSERT_EQ(mkdir((root + "/a/b").c_str(), 0700), 0);
  for (int i = 0; i < 300; ++i) Touch(absl::StrCat(root, "/a/b/f", i));  // several getdents
  ASSERT_EQ(mkdir(outside.c_str(), 0700), 0);
  Touch(outside + "/keep");
  ASSERT_EQ(symlink(outside.c_str(), (root + "/a/link").c_str()), 0);
  EXPECT_EQ(RemoveTree(root.c_str()), 0);
  EXPECT_FALSE(Exists(root));
  EXPECT_TRUE(Exists(outside + "/keep"));
  EXPECT_EQ(RemoveTree(root.c_str()), 0);  // missing: no error
  EXPECT_EQ(RemoveTree(outside.c_str()), 0);
}

TEST(JobFilesTest, ReportsRoundTripAndRemoveJobFilesRemovesOwnedPaths) {
  const std::string id = UniqueId("reports");
  LOOM_ASSERT_OK_AND_ASSIGN(const std::string dir, CreateJobDirectory(id));
  EXPECT_EQ(dir, JobDirectory(id));
  RankReport own;
  own.rank = 3;
  own.pid = 42;
  own.when = absl::FromUnixSeconds(1000);
  own.message = "bad\nthing";
  LOOM_ASSERT_OK(WriteRankReport(dir, own));
  RankReport peer;
  peer.rank = 1;
  peer.pid = 43;
  peer.when = absl::FromUnixSeconds(999);
  peer.peer_rank = 3;
  peer.peer_fault = "died";
  peer.message = "shm: world rank 3 died";
  LOOM_ASSERT_OK(WriteRankReport(dir, peer));
  Touch(dir + "/reports/junk");
  const std::vector<RankReport> reports = ReadRankReports(dir);
  ASSERT_THAT(reports, SizeIs(2));
  EXPECT_EQ(reports[0].rank, 1);
  EXPECT_TRUE(reports[0].caused_by_peer());
  EXPECT_EQ(reports[0].peer_rank, 3);
  EXPECT_EQ(reports[0].peer_fault, "died");
  EXPECT_EQ(reports[0].when, absl::FromUnixSeconds(999));
  EXPECT_EQ(reports[1].rank, 3);
  EXPECT_FALSE(reports[1].caused_by_peer());
  EXPECT_EQ(reports[1].message, "bad thing");
  EXPECT_EQ(reports[1].pid, 42);

  // An owned path outside the job directory, and a segment of the job.
  const std::string owned = absl::StrCat(testing::TempDir(), "/owned-", getpid());
  ASSERT_EQ(mkdir(owned.c_str(), 0700), 0);
  Touch(owned + "/state");
  ASSERT_EQ(setenv("LOOM_JOB_DIR", dir.c_str(), 1), 0);
  LOOM_ASSERT_OK(RegisterOwnedPath(owned));
  EXPECT_THAT(RegisterOwnedPath("relative"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("")));
  unsetenv("LOOM_JOB_DIR");
  const std::string segment = absl::StrCat("/loom.", id, ".rank0");
  const int fd = shm_open(segment.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  LOOM_ASSERT_OK(RemoveJobFiles(id));
  EXPECT_FALSE(Exists(dir));
  EXPECT_FALSE(Exists(owned));
  EXPECT_FALSE(Exists("/dev/shm" + segment));
}

TEST(JobFilesTest, ReportRankFailureNamesTheFirstPeerFailure) {
  const std::string id = UniqueId("peer");
  LOOM_ASSERT_OK_AND_ASSIGN(const std::string dir, CreateJobDirectory(id));
  unsetenv("LOOM_JOB_DIR");
  LOOM_EXPECT_OK(ReportRankFailure(absl::InternalError("outside a job")));  // no-op
  ASSERT_EQ(setenv("LOOM_JOB_DIR", dir.c_str(), 1), 0);
  ASSERT_EQ(setenv("LOOM_RANK", "2", 1), 0);
  // Built field by field: GCC 12 at -O3 took the brace-initialized temporary's
  // string for uninitialized (-Werror=maybe-uninitialized in --config=opt).
  PeerFailure failure;
  failure.peer.world_rank = 5;
  failure.peer.pid = 77;
  failure.peer.host = "h";
  failure.fault = PeerFault::kUnresponsive;
  failure.when = absl::Now();
  failure.message = "silent";
  RecordPeerFailure(failure);
  LOOM_ASSERT_OK(ReportRankFailure(absl::UnavailableError("step 3: peer silent")));
  unsetenv("LOOM_JOB_DIR");
  unsetenv("LOOM_RANK");
  const std::vector<RankReport> reports = ReadRankReports(dir);
  ASSERT_THAT(reports, SizeIs(1));
  EXPECT_EQ(reports[0].rank, 2);
  EXPECT_EQ(reports[0].pid, getpid());
  EXPECT_EQ(reports[0].peer_rank, 5);
  EXPECT_EQ(reports[0].peer_fault, "stopped responding");
  EXPECT_THAT(reports[0].message, HasSubstr("step 3: peer silent"));
  LOOM_EXPECT_OK(RemoveJobFiles(id));
}

TEST(JanitorTest, CleansUpWhenItsStarterIsKilled) {
  const std::string id = UniqueId("janitor");
  LOOM_ASSERT_OK_AND_ASSIGN(const std::string dir, CreateJobDirectory(id));
  Touch(dir + "/state");
  const std::string segment = absl::StrCat("/loom.", id, ".x");
  const int fd = shm_open(segment.c_str(), O_CREAT | O_RDWR, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  const pid_t starter = fork();
  ASSERT_GE(starter, 0);
  if (starter == 0) {
    absl::StatusOr<Janitor> janitor = StartJanitor(dir, absl::StrCat("loom.", id, "."));
    if (!janitor.ok()) _exit(3);
    raise(SIGKILL);  // the janitor outlives this process and cleans up
    _exit(4);
  }
  int status = 0;
  ASSERT_EQ(waitpid(starter, &status, 0), starter);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_TRUE(WaitUntilGone(dir));
  EXPECT_TRUE(WaitUntilGone("/dev/shm" + segment));
}

TEST(JanitorTest, FinishCleansAtOnceAndRejectsBadPaths) {
  const std::string id = UniqueId("finish");
  LOOM_ASSERT_OK_AND_ASSIGN(const std::string dir, CreateJobDirectory(id));
  {
    LOOM_ASSERT_OK_AND_ASSIGN(Janitor janitor, StartJanitor(dir, ""));
    EXPECT_GT(janitor.pid(), 0);
    EXPECT_TRUE(Exists(dir));
    janitor.Finish();
    EXPECT_FALSE(Exists(dir));
  }
  EXPECT_THAT(StartJanitor("relative", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("")));
  EXPECT_THAT(StartJanitor("/tmp/x", "a/b"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("")));
}

}  // namespace
}  // namespace loom
