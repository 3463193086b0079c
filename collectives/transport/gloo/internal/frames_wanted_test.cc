// FramesWanted: the frames a receiver keeps posted for a path (endpoint.h).
#include "collectives/transport/gloo/internal/endpoint.h"
#include "gtest/gtest.h"

namespace loom {
namespace gloo_internal {
namespace {

PathEstimate Path(absl::Duration round_trip, double bytes_per_second) {
  PathEstimate path;
  path.round_trip = round_trip;
  path.bytes_per_second = bytes_per_second;
  return path;
}

TEST(FramesWantedTest, NothingMeasuredOrAShortPathKeepsTheLeast) {
  EXPECT_EQ(FramesWanted(PathEstimate{}), kLeastFramesPosted);
  EXPECT_EQ(FramesWanted(Path(absl::Microseconds(100), 0)), kLeastFramesPosted);
  EXPECT_EQ(FramesWanted(Path(absl::ZeroDuration(), 10e9)), kLeastFramesPosted);
  // Loopback: 100 us at 3 GB/s is 300 KB in flight, 3 frames' worth.
  EXPECT_EQ(FramesWanted(Path(absl::Microseconds(100), 3e9)), kLeastFramesPosted);
}

TEST(FramesWantedTest, ALongPathGetsTwiceItsBytesInFlightPlusOne) {
  // 2 Gbit/s with 4.25 ms round trips: 1.06 MB in flight, 2 x that is 8.1 frames.
  const PathEstimate long_path = Path(absl::Microseconds(4250), 250e6);
  const size_t in_flight = long_path.BytesInFlight();
  const int expected = static_cast<int>((2 * in_flight + kFrameBytes - 1) / kFrameBytes) + 1;
  EXPECT_EQ(expected, 10);
  EXPECT_EQ(FramesWanted(long_path), expected);
  // Longer and faster: capped.
  EXPECT_EQ(FramesWanted(Path(absl::Milliseconds(20), 250e6)), kMostFramesPosted);
  EXPECT_EQ(FramesWanted(Path(absl::Seconds(10), 1e12)), kMostFramesPosted);
}

TEST(FramesWantedTest, GrowsWithThePath) {
  int last = 0;
  for (int ms = 0; ms <= 40; ++ms) {
    const int frames = FramesWanted(Path(absl::Milliseconds(ms), 250e6));
    EXPECT_GE(frames, last) << ms << " ms";
    EXPECT_GE(frames, kLeastFramesPosted);
    EXPECT_LE(frames, kMostFramesPosted);
    last = frames;
  }
  EXPECT_EQ(last, kMostFramesPosted);
}

}  // namespace
}  // namespace gloo_internal
}  // namespace loom
