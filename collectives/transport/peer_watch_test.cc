#include "collectives/transport/peer_watch.h"

#include <chrono>

#include <unistd.h>

#include <vector>

#include "absl/time/clock.h"
#include "collectives/transport/peer_failure.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::vector<PeerIdentity> ThreePeers() {
  return {SelfIdentity(4), {9, 777, "elsewhere"}, {6, 778, "elsewhere"}};
}

TEST(PeerWatchTest, NamesPeersByWorldAndGroupRank) {
  PeerWatch watch("mpi", 0, ThreePeers(), absl::Seconds(10));
  EXPECT_EQ(watch.Describe(1), "world rank 9 (pid 777 on elsewhere), rank 1 of the mpi group");
  EXPECT_EQ(watch.interval(), absl::Seconds(1));
  PeerWatch same("gloo", 0, {{0, 1, "a"}, {1, 2, "b"}}, absl::Seconds(10));
  EXPECT_EQ(same.Describe(1), "world rank 1 (pid 2 on b)");
}

TEST(PeerWatchTest, SilentPeerIsJudgedAfterItsTimeoutAndRecorded) {
  const absl::Duration timeout = absl::Milliseconds(200);
  // The watch measures silence on the monotonic clock from its construction: the
  // test measures on the same clock from before it, so its elapsed time is never the
  // shorter (absl::Now(), the wall clock, taken after construction, once read
  // 199.9994 ms at a verdict the watch had rightly reached at 200).
  const std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  PeerWatch watch("gloo", 0, ThreePeers(), timeout);
  const auto elapsed = [&] {
    return absl::FromChrono(std::chrono::steady_clock::now() - start);
  };
  absl::Status verdict;
  // Rank 2 keeps beating, rank 1 is silent; this process listens all along.
  while (verdict.ok() && elapsed() < absl::Seconds(20)) {
    watch.Listen();
    watch.Heard(2);
    EXPECT_TRUE(watch.Judge(2).ok());
    verdict = watch.Judge(1);
    usleep(2000);
  }
  EXPECT_GE(elapsed(), timeout);
  EXPECT_EQ(verdict.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(verdict.message(),
              AllOf(HasSubstr("gloo: world rank 9 (pid 777 on elsewhere), rank 1 of the gloo group "
                              "stopped responding: no heartbeat for "),
                    HasSubstr("(heartbeat timeout 200ms)")));
  const std::optional<PeerFailure> first = FirstPeerFailure();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->peer.world_rank, 9);
  EXPECT_EQ(first->fault, PeerFault::kUnresponsive);
  EXPECT_TRUE(watch.Judge(0).ok()) << "a rank never judges itself";
}

TEST(PeerWatchTest, ListenerThatWasAwayForgivesTheSilence) {
  PeerWatch watch("mpi", 0, ThreePeers(), absl::Milliseconds(200));
  usleep(500'000);  // Longer than the timeout, but nobody was listening.
  watch.Listen();
  EXPECT_TRUE(watch.Judge(1).ok());
}

TEST(PeerWatchTest, SlowerPeersGetThreeOfTheirIntervals) {
  PeerWatch watch("mpi", 0, ThreePeers(), absl::Milliseconds(200),
                  {absl::Milliseconds(20), absl::Seconds(10), absl::Milliseconds(20)});
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Milliseconds(400)) {
    watch.Listen();
    usleep(2000);
  }
  EXPECT_TRUE(watch.Judge(1).ok()) << "rank 1 beats every 10s: 30s allowed";
}

TEST(PeerWatchTest, InfiniteTimeoutJudgesNobody) {
  PeerWatch watch("mpi", 0, ThreePeers(), absl::InfiniteDuration());
  EXPECT_FALSE(watch.judging());
  usleep(300'000);
  watch.Listen();
  EXPECT_TRUE(watch.Judge(1).ok());
}

}  // namespace
}  // namespace loom
