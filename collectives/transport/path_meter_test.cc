#include "collectives/transport/path_meter.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace loom {
namespace {

TEST(PathMeterTest, KeepsTheShortestRoundTripAndTheFastestTransfer) {
  PathMeter meter(3);
  EXPECT_EQ(meter.Estimate(1).round_trip, absl::ZeroDuration());
  EXPECT_EQ(meter.Estimate(1).bytes_per_second, 0);
  meter.NoteRoundTrip(1, absl::Microseconds(900));
  meter.NoteRoundTrip(1, absl::Microseconds(400));
  meter.NoteRoundTrip(1, absl::Microseconds(700));
  meter.NoteTransfer(1, size_t{1} << 20, absl::Milliseconds(8));
  meter.NoteTransfer(1, size_t{1} << 20, absl::Milliseconds(4));
  meter.NoteTransfer(1, size_t{1} << 20, absl::Milliseconds(6));
  const PathEstimate path = meter.Estimate(1);
  EXPECT_EQ(path.round_trip, absl::Microseconds(400));
  EXPECT_DOUBLE_EQ(path.bytes_per_second, (1 << 20) / 0.004);
  // The bandwidth-delay product: 400 us at 262 MB/s.
  EXPECT_NEAR(static_cast<double>(path.BytesInFlight()), 0.0004 * (1 << 20) / 0.004, 1.0);
  // Other peers are untouched.
  EXPECT_EQ(meter.Estimate(0).round_trip, absl::ZeroDuration());
  EXPECT_EQ(meter.Estimate(2).bytes_per_second, 0);
}

TEST(PathMeterTest, IgnoresSamplesThatMeasureNothing) {
  PathMeter meter(2);
  meter.NoteRoundTrip(1, absl::ZeroDuration());
  meter.NoteRoundTrip(1, -absl::Microseconds(5));
  meter.NoteTransfer(1, PathMeter::kMinRateSampleBytes - 1, absl::Microseconds(1));
  meter.NoteTransfer(1, size_t{1} << 20, absl::ZeroDuration());
  EXPECT_EQ(meter.Estimate(1).round_trip, absl::ZeroDuration());
  EXPECT_EQ(meter.Estimate(1).bytes_per_second, 0);
  meter.NoteTransfer(1, PathMeter::kMinRateSampleBytes, absl::Milliseconds(1));
  EXPECT_DOUBLE_EQ(meter.Estimate(1).bytes_per_second, PathMeter::kMinRateSampleBytes / 0.001);
}

TEST(PathMeterTest, PeersOutsideTheGroupHaveNoPath) {
  PathMeter meter(2);
  for (int peer : {-1, 2, 1000}) {
    meter.NoteRoundTrip(peer, absl::Milliseconds(1));
    meter.NoteTransfer(peer, size_t{1} << 20, absl::Milliseconds(1));
    EXPECT_EQ(meter.Estimate(peer).round_trip, absl::ZeroDuration()) << peer;
    EXPECT_EQ(meter.Estimate(peer).bytes_per_second, 0) << peer;
  }
  PathMeter empty(0);
  EXPECT_EQ(empty.Estimate(0).round_trip, absl::ZeroDuration());
}

// Receiver threads sample while callers read: the result is the extreme of all.
TEST(PathMeterTest, SamplesFromManyThreadsKeepTheExtremes) {
  PathMeter meter(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&meter, t] {
      for (int i = 1; i <= 200; ++i) {
        meter.NoteRoundTrip(1, absl::Microseconds(10 * i + t));
        meter.NoteTransfer(1, size_t{1} << 20, absl::Microseconds(100 * i + t));
        (void)meter.Estimate(1);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(meter.Estimate(1).round_trip, absl::Microseconds(10));
  EXPECT_DOUBLE_EQ(meter.Estimate(1).bytes_per_second, (1 << 20) / 100e-6);
}

}  // namespace
}  // namespace loom
