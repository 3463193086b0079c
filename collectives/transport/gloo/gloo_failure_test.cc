// How the gloo transport sees a peer process that stops (SIGSTOP: alive, its sockets
// open, silent) or dies (SIGKILL), with real processes: rank 1 is a child forked at the
// start of each test, before this process has any thread of its own, and the ranks
// meet in a FileStore in a fresh directory, as processes of a job would.
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/transport/gloo/gloo_transport.h"
#include "collectives/transport/peer_failure.h"
#include "collectives/transport/transport.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string FreshDirectory() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/gloo_failure_XXXXXX");
  return mkdtemp(dir.data()) != nullptr ? dir : "";
}

GlooOptions RankOptions(const std::string& dir, int rank, absl::Duration heartbeat_timeout) {
  GlooOptions options;
  options.rank = rank;
  options.size = 2;
  options.store_dir = dir;
  options.heartbeat_timeout = heartbeat_timeout;
  return options;
}

// A child process that is rank 1 of a group of two: it connects, says so in a file,
// and idles until it is killed. It dies with this process, and is killed and reaped
// when the ChildRank goes, whatever the test's path.
class ChildRank {
 public:
  ChildRank(const std::string& dir, absl::Duration heartbeat_timeout)
      : ready_path_(dir + "/child_connected") {
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ != 0) return;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(2);  // The parent died before the line above.
    absl::StatusOr<std::unique_ptr<Transport>> transport =
        ConnectGlooTransport(RankOptions(dir, 1, heartbeat_timeout));
    std::ofstream(ready_path_) << (transport.ok() ? "" : transport.status().ToString());
    if (!transport.ok()) _exit(1);
    for (;;) pause();
  }
  ~ChildRank() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  ChildRank(const ChildRank&) = delete;
  ChildRank& operator=(const ChildRank&) = delete;

  pid_t pid() const { return pid_; }

  // Connected: OK once the child's endpoint is up (its beat thread runs).
  absl::Status Connected() const {
    const absl::Time give_up = absl::Now() + absl::Seconds(30);
    while (absl::Now() < give_up) {
      std::ifstream in(ready_path_);
      if (in) {
        std::string error;
        std::getline(in, error);
        return error.empty() ? absl::OkStatus() : absl::InternalError("child: " + error);
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return absl::DeadlineExceededError("the child never connected");
  }

 private:
  const std::string ready_path_;
  pid_t pid_ = -1;
};

// Rank 1 is stopped after connecting. Rank 0's receive from it, with a 60 s deadline,
// fails with Unavailable naming it as stopped (by world rank and pid, with its /proc
// state) within a few seconds of a 1 s heartbeat timeout, and not before it.
TEST(GlooHeartbeatTest, StoppedRankIsReportedWithinTheHeartbeatTimeout) {
  constexpr absl::Duration kHeartbeat = absl::Seconds(1);
  const bool recorded_before = FirstPeerFailure().has_value();
  const std::string dir = FreshDirectory();
  ASSERT_FALSE(dir.empty());
  ChildRank child(dir, kHeartbeat);
  ASSERT_GT(child.pid(), 0);
  absl::StatusOr<std::unique_ptr<Transport>> t =
      ConnectGlooTransport(RankOptions(dir, 0, kHeartbeat));
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(child.Connected().ok()) << child.Connected();

  ASSERT_EQ(kill(child.pid(), SIGSTOP), 0);
  int wait_status = 0;
  ASSERT_EQ(waitpid(child.pid(), &wait_status, WUNTRACED), child.pid());
  ASSERT_TRUE(WIFSTOPPED(wait_status));
  const absl::Time stopped = absl::Now();
  std::vector<std::byte> buffer(8);
  absl::StatusOr<Request> r = (*t)->Recv(1, 1, AsWritableBytes(buffer));
  ASSERT_TRUE(r.ok()) << r.status();
  const absl::Status status = (*t)->Wait({*r}, stopped + absl::Seconds(60));
  const absl::Duration took = absl::Now() - stopped;
  std::cout << "verdict " << absl::FormatDuration(took) << " after SIGSTOP: " << status << "\n";

  EXPECT_THAT(status,
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr(absl::StrCat("gloo: world rank 1 (pid ", child.pid(), " on ",
                                                    HostName(), ")")),
                             HasSubstr("stopped responding: no heartbeat for "),
                             HasSubstr("(heartbeat timeout 1s)"), HasSubstr("T, stopped"))));
  // The last beat came up to an interval (100 ms, more on a loaded machine) before the
  // stop. Loose both ways, for a loaded machine under a sanitizer.
  EXPECT_GE(took, kHeartbeat / 2);
  EXPECT_LE(took, absl::Seconds(15));
  // Later requests with it fail at once, the same way.
  absl::StatusOr<Request> s = (*t)->Send(1, 2, AsBytes(buffer));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT((*t)->Wait({*s}, absl::Now() + absl::Seconds(5)),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("stopped responding")));
  if (!recorded_before) {
    const std::optional<PeerFailure> first = FirstPeerFailure();
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(first->peer.pid, child.pid());
    EXPECT_EQ(first->fault, PeerFault::kUnresponsive);
  }
}

// Rank 1 is killed after connecting: rank 0 sees its connection lost, naming it,
// long before the deadline, and records it as died.
TEST(GlooHeartbeatTest, KilledRankIsReportedAsLost) {
  const bool recorded_before = FirstPeerFailure().has_value();
  const std::string dir = FreshDirectory();
  ASSERT_FALSE(dir.empty());
  ChildRank child(dir, kDefaultHeartbeatTimeout);
  ASSERT_GT(child.pid(), 0);
  absl::StatusOr<std::unique_ptr<Transport>> t =
      ConnectGlooTransport(RankOptions(dir, 0, kDefaultHeartbeatTimeout));
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(child.Connected().ok()) << child.Connected();

  std::vector<std::byte> buffer(8);
  absl::StatusOr<Request> r = (*t)->Recv(1, 1, AsWritableBytes(buffer));
  ASSERT_TRUE(r.ok()) << r.status();
  const absl::Time killed = absl::Now();
  ASSERT_EQ(kill(child.pid(), SIGKILL), 0);
  const absl::Status status = (*t)->Wait({*r}, killed + absl::Seconds(60));
  EXPECT_LE(absl::Now() - killed, absl::Seconds(5));
  EXPECT_THAT(status,
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr(absl::StrCat("gloo rank 0: connection to world rank 1 (pid ",
                                              child.pid(), " on ", HostName(), ") lost: "))));
  if (!recorded_before) {
    const std::optional<PeerFailure> first = FirstPeerFailure();
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(first->peer.pid, child.pid());
    EXPECT_EQ(first->fault, PeerFault::kDied);
  }
}

}  // namespace
}  // namespace loom
