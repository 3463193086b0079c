#include "offload/prefetch_engine.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/mutex.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

absl::Time Soon() { return absl::Now() + absl::Seconds(20); }

std::unique_ptr<PrefetchEngine> MakeEngine(int workers) {
  absl::StatusOr<std::unique_ptr<PrefetchEngine>> engine = PrefetchEngine::Create({workers, 64});
  EXPECT_THAT(engine.status(), IsOk());
  return engine.ok() ? *std::move(engine) : nullptr;
}

TEST(PrefetchEngineTest, RejectsBadOptions) {
  EXPECT_THAT(PrefetchEngine::Create({0, 8}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("workers=0")));
  EXPECT_THAT(PrefetchEngine::Create({2, 0}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_outstanding=0")));
}

TEST(PrefetchEngineTest, TransfersStartInSubmissionOrderAndFillTheirBuffers) {
  for (int workers : {1, 2, 3}) {
    std::unique_ptr<PrefetchEngine> engine = MakeEngine(workers);
    constexpr int kTensors = 40;
    std::vector<std::vector<int>> buffers(kTensors, std::vector<int>(257));
    Mutex mu;
    std::vector<int> started;
    std::vector<PrefetchEngine::Ticket> tickets;
    for (int t = 0; t < kTensors; ++t) {
      LOOM_ASSERT_OK_AND_ASSIGN(
          PrefetchEngine::Ticket ticket,
          engine->Submit(absl::StrCat("tensor", t), [&, t](const CancelToken&) {
            {
              MutexLock lock(&mu);
              started.push_back(t);
            }
            for (size_t i = 0; i < buffers[t].size(); ++i) buffers[t][i] = t * 1000 + i;
            return absl::OkStatus();
          }));
      tickets.push_back(ticket);
    }
    for (int t = 0; t < kTensors; ++t) {
      LOOM_ASSERT_OK(engine->Wait(tickets[t], Soon()));
      for (size_t i = 0; i < buffers[t].size(); ++i) ASSERT_EQ(buffers[t][i], t * 1000 + int(i));
    }
    MutexLock lock(&mu);
    ASSERT_EQ(started.size(), size_t{kTensors});
    // Workers take transfers in submission order, but the log is written from inside
    // the transfer, after the worker may have been preempted: only one worker's log
    // shows the order exactly. With more, every transfer ran once.
    std::vector<int> sorted = started;
    std::sort(sorted.begin(), sorted.end());
    for (int t = 0; t < kTensors; ++t) {
      EXPECT_EQ(sorted[t], t);
      if (workers == 1) {
        EXPECT_EQ(started[t], t);
      }
    }
    EXPECT_EQ(engine->stats().completed, kTensors);
  }
}

TEST(PrefetchEngineTest, AnErrorSurfacesAtTheWaitNamingTheTensor) {
  std::unique_ptr<PrefetchEngine> engine = MakeEngine(2);
  LOOM_ASSERT_OK_AND_ASSIGN(PrefetchEngine::Ticket ok,
                            engine->Submit("layer2.m", [](const CancelToken&) { return absl::OkStatus(); }));
  LOOM_ASSERT_OK_AND_ASSIGN(PrefetchEngine::Ticket bad, engine->Submit("layer3.m", [](const CancelToken&) {
    return absl::DataLossError("checksum mismatch in block 3 of /swap/layer3.m");
  }));
  LOOM_EXPECT_OK(engine->Wait(ok, Soon()));
  EXPECT_THAT(engine->Wait(bad, Soon()),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("prefetch of 'layer3.m': checksum mismatch in block 3")));
  EXPECT_THAT(engine->Wait(bad, Soon()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("already waited for")));
  EXPECT_THAT(engine->Wait(12345, Soon()), StatusIs(absl::StatusCode::kNotFound, HasSubstr("12345")));
  EXPECT_EQ(engine->stats().failed, 1);
}

TEST(PrefetchEngineTest, WaitHasADeadlineAndTheTicketSurvivesIt) {
  std::unique_ptr<PrefetchEngine> engine = MakeEngine(1);
  absl::Notification release;
  LOOM_ASSERT_OK_AND_ASSIGN(PrefetchEngine::Ticket slow, engine->Submit("slow", [&](const CancelToken&) {
    release.WaitForNotificationWithTimeout(absl::Seconds(20));
    return absl::OkStatus();
  }));
  LOOM_ASSERT_OK_AND_ASSIGN(PrefetchEngine::Ticket behind,
                            engine->Submit("behind", [](const CancelToken&) { return absl::OkStatus(); }));
  EXPECT_THAT(engine->Wait(behind, absl::Now() + absl::Milliseconds(30)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("prefetch of 'behind' did not finish"),
                             HasSubstr("still queued"))));
  EXPECT_TRUE(engine->Outstanding(behind));
  release.Notify();
  LOOM_EXPECT_OK(engine->Wait(slow, Soon()));
  LOOM_EXPECT_OK(engine->Wait(behind, Soon()));
  EXPECT_FALSE(engine->Outstanding(behind));
}

TEST(PrefetchEngineTest, CancelDropsQueuedAndStopsRunningTransfers) {
  std::unique_ptr<PrefetchEngine> engine = MakeEngine(1);
  absl::Notification running;
  std::atomic<bool> queued_ran{false};
  LOOM_ASSERT_OK_AND_ASSIGN(PrefetchEngine::Ticket spinning,
                            engine->Submit("spinning", [&](const CancelToken& cancel) {
                              running.Notify();
                              const absl::Time give_up = absl::Now() + absl::Seconds(20);
                              while (!cancel.cancelled() && absl::Now() < give_up) {
                                absl::SleepFor(absl::Microseconds(100));
                              }
                              return absl::OkStatus();
                            }));
  LOOM_ASSERT_OK_AND_ASSIGN(PrefetchEngine::Ticket queued, engine->Submit("queued", [&](const CancelToken&) {
    queued_ran = true;
    return absl::OkStatus();
  }));
  ASSERT_TRUE(running.WaitForNotificationWithTimeout(absl::Seconds(20)));
  LOOM_ASSERT_OK(engine->Cancel(queued, "the step was skipped"));
  LOOM_ASSERT_OK(engine->Cancel(spinning, "the step was skipped"));
  EXPECT_THAT(engine->Wait(queued, Soon()),
              StatusIs(absl::StatusCode::kCancelled,
                       HasSubstr("prefetch of 'queued' was cancelled: the step was skipped")));
  EXPECT_THAT(engine->Wait(spinning, Soon()),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("'spinning' was cancelled")));
  EXPECT_FALSE(queued_ran.load());
  EXPECT_THAT(engine->Cancel(queued, "again"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("cannot cancel")));
  EXPECT_EQ(engine->stats().cancelled, 2);
}

TEST(PrefetchEngineTest, BoundsOutstandingTransfers) {
  absl::StatusOr<std::unique_ptr<PrefetchEngine>> engine = PrefetchEngine::Create({1, 2});
  LOOM_ASSERT_OK(engine.status());
  auto noop = [](const CancelToken&) { return absl::OkStatus(); };
  LOOM_ASSERT_OK_AND_ASSIGN(PrefetchEngine::Ticket a, (*engine)->Submit("a", noop));
  LOOM_ASSERT_OK_AND_ASSIGN(PrefetchEngine::Ticket b, (*engine)->Submit("b", noop));
  EXPECT_THAT((*engine)->Submit("c", noop).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("prefetch of 'c': 2 transfers are outstanding")));
  LOOM_EXPECT_OK((*engine)->Wait(a, Soon()));
  LOOM_EXPECT_OK((*engine)->Submit("c", noop).status());
  LOOM_EXPECT_OK((*engine)->Wait(b, Soon()));
}

TEST(PrefetchEngineTest, ShutdownCancelsWhatIsLeftAndRefusesNewWork) {
  std::unique_ptr<PrefetchEngine> engine = MakeEngine(1);
  absl::Notification running;
  LOOM_ASSERT_OK_AND_ASSIGN(PrefetchEngine::Ticket first, engine->Submit("first", [&](const CancelToken& cancel) {
    running.Notify();
    while (!cancel.cancelled()) absl::SleepFor(absl::Microseconds(100));
    return absl::UnavailableError("stopped");
  }));
  LOOM_ASSERT_OK_AND_ASSIGN(PrefetchEngine::Ticket second,
                            engine->Submit("second", [](const CancelToken&) { return absl::OkStatus(); }));
  ASSERT_TRUE(running.WaitForNotificationWithTimeout(absl::Seconds(20)));
  engine->Shutdown();
  EXPECT_THAT(engine->Wait(first, Soon()),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("shutting down")));
  EXPECT_THAT(engine->Wait(second, Soon()),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("'second' was cancelled")));
  EXPECT_THAT(engine->Submit("late", [](const CancelToken&) { return absl::OkStatus(); }).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("shut down")));
  engine->Shutdown();  // Idempotent.
}

}  // namespace
}  // namespace loom
