#include "collectives/flight_recorder.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

FlightRecord Call(uint64_t seq) {
  FlightRecord record;
  record.seq = seq;
  record.kind = CollectiveKind::kAllReduce;
  record.dtype = DType::kF32;
  record.count = 1000 + seq;
  record.algorithm = Algorithm::kRing;
  return record;
}

TEST(FlightRecorderTest, KeepsTheLastCallsWithTheirOutcome) {
  FlightRecorder recorder(3);
  for (uint64_t seq = 0; seq < 5; ++seq) {
    const uint64_t handle = recorder.Begin(Call(seq));
    if (seq < 3) recorder.End(handle, absl::OkStatus());
    if (seq == 3) recorder.End(handle, absl::UnavailableError("rank 2 died"));
  }
  const std::vector<FlightRecord> records = recorder.Snapshot();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].seq, 2u);
  EXPECT_EQ(records[0].state, FlightRecord::State::kDone);
  EXPECT_EQ(records[1].state, FlightRecord::State::kFailed);
  EXPECT_EQ(records[2].state, FlightRecord::State::kRunning);
  const std::string text = recorder.Format(2);
  EXPECT_THAT(text, HasSubstr("last 2 of 5 calls:"));
  EXPECT_THAT(text, HasSubstr("#3 all_reduce f32 x1003 ring: FAILED after"));
  EXPECT_THAT(text, HasSubstr("(UNAVAILABLE)"));
  EXPECT_THAT(text, HasSubstr("#4 all_reduce f32 x1004 ring: RUNNING for"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("#2 ")));
  // A handle that left the window is ignored, not misapplied.
  recorder.End(0, absl::InternalError("late"));
  EXPECT_EQ(recorder.Snapshot()[0].state, FlightRecord::State::kDone);
}

TEST(FlightRecorderTest, NamesRootsAndPeers) {
  FlightRecord send;
  send.seq = 1;
  send.kind = CollectiveKind::kSendRecv;
  send.dtype = DType::kBF16;
  send.count = 8;
  send.peer = 3;
  EXPECT_THAT(send.ToString(), HasSubstr("#1 send_recv bf16 x8 peer 3"));
  FlightRecord bcast = Call(2);
  bcast.kind = CollectiveKind::kBroadcast;
  bcast.peer = 0;
  EXPECT_THAT(bcast.ToString(), HasSubstr("broadcast f32 x1002 root 0 ring"));
}

// A reader on another thread (a watchdog) never sees a record half written: every
// record it reads has the count that belongs to its sequence number and an outcome
// that belongs to its parity, however the writer's stores interleave with it.
TEST(FlightRecorderTest, ReadersOnOtherThreadsSeeWholeRecords) {
  FlightRecorder recorder(8);
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  std::atomic<int> checked{0};
  std::thread reader([&] {
    while (!done.load()) {
      for (const FlightRecord& record : recorder.Snapshot()) {
        const bool count_ok = record.count == 1000 + record.seq;
        const bool outcome_ok = record.state == FlightRecord::State::kRunning ||
                                (record.seq % 2 == 0 ? record.state == FlightRecord::State::kDone
                                                     : record.error == "UNAVAILABLE");
        if (!count_ok || !outcome_ok) torn.fetch_add(1);
        checked.fetch_add(1);
      }
    }
  });
  for (uint64_t seq = 0; seq < 200000 || checked.load() < 1000; ++seq) {
    const uint64_t handle = recorder.Begin(Call(seq));
    recorder.End(handle, seq % 2 == 0 ? absl::OkStatus() : absl::UnavailableError("gone"));
  }
  done.store(true);
  reader.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GE(checked.load(), 1000);
}

}  // namespace
}  // namespace loom
