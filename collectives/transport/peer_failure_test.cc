#include "collectives/transport/peer_failure.h"

#include <unistd.h>

#include "collectives/transport/heartbeat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(DescribePeerTest, NamesWhatIsKnown) {
  EXPECT_EQ(DescribePeer({3, 4242, "trainer1"}), "world rank 3 (pid 4242 on trainer1)");
  EXPECT_EQ(DescribePeer({3, 4242, ""}), "world rank 3 (pid 4242)");
  EXPECT_EQ(DescribePeer({3, 0, ""}), "world rank 3");
  EXPECT_EQ(DescribePeer({-1, 7, "h"}), "pid 7 on h");
  EXPECT_EQ(DescribePeer({-1, 0, ""}), "an unknown peer");
}

TEST(SelfIdentityTest, IsThisProcess) {
  const PeerIdentity self = SelfIdentity(5);
  EXPECT_EQ(self.world_rank, 5);
  EXPECT_EQ(self.pid, getpid());
  EXPECT_EQ(self.host, HostName());
}

TEST(PeerFailureTest, FirstRecordStays) {
  EXPECT_FALSE(FirstPeerFailure().has_value());
  RecordPeerFailure({{2, 11, "a"}, PeerFault::kUnresponsive, absl::UnixEpoch(), "silent"});
  RecordPeerFailure({{3, 12, "b"}, PeerFault::kDied, absl::UnixEpoch(), "gone"});
  const std::optional<PeerFailure> first = FirstPeerFailure();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->peer.world_rank, 2);
  EXPECT_EQ(first->fault, PeerFault::kUnresponsive);
  EXPECT_EQ(first->message, "silent");
  EXPECT_EQ(PeerFaultName(first->fault), "stopped responding");
}

TEST(ProcessStateNoteTest, ReadsThisProcessAndNothingForAMissingOne) {
  EXPECT_THAT(ProcessStateNote(getpid()), HasSubstr("running"));
  EXPECT_EQ(ProcessStateNote(0), "");
  EXPECT_EQ(ProcessStateNote(1LL << 40), "");
}

TEST(HeartbeatTest, IntervalIsATenthWithinBounds) {
  EXPECT_EQ(HeartbeatInterval(absl::Seconds(3)), absl::Milliseconds(300));
  EXPECT_EQ(HeartbeatInterval(absl::Minutes(10)), absl::Seconds(1));
  EXPECT_EQ(HeartbeatInterval(absl::Milliseconds(50)), absl::Milliseconds(10));
  EXPECT_EQ(HeartbeatInterval(absl::InfiniteDuration()), absl::Seconds(1));
}

TEST(HeartbeatTest, ValidatesTheTimeout) {
  EXPECT_TRUE(ValidateHeartbeatTimeout(absl::Seconds(1), "--heartbeat_timeout").ok());
  EXPECT_TRUE(ValidateHeartbeatTimeout(absl::InfiniteDuration(), "x").ok());
  const absl::Status low = ValidateHeartbeatTimeout(absl::Milliseconds(5), "--heartbeat_timeout");
  EXPECT_EQ(low.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(low.message()), HasSubstr("--heartbeat_timeout 5ms is below 200ms"));
}

}  // namespace
}  // namespace loom
