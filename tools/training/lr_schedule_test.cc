#include "tools/training/lr_schedule.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(LrScheduleTest, Endpoints) {
  const LrSchedule s{.lr = 1e-3f, .lr_min = 1e-4f, .warmup_steps = 10, .total_steps = 110};
  LOOM_ASSERT_OK(s.Validate());
  EXPECT_FLOAT_EQ(s.LrAt(1), 1e-4f);
  EXPECT_FLOAT_EQ(s.LrAt(5), 5e-4f);
  EXPECT_EQ(s.LrAt(10), 1e-3f);  // exactly the peak
  EXPECT_FLOAT_EQ(s.LrAt(60), 5.5e-4f);
  EXPECT_EQ(s.LrAt(110), 1e-4f);  // exactly lr_min
  // Outside [1, total_steps] the nearest end's rate.
  EXPECT_EQ(s.LrAt(0), s.LrAt(1));
  EXPECT_EQ(s.LrAt(-7), s.LrAt(1));
  EXPECT_EQ(s.LrAt(111), 1e-4f);
  EXPECT_EQ(s.LrAt(std::numeric_limits<int64_t>::max()), 1e-4f);
}

TEST(LrScheduleTest, MonotoneInEachPhase) {
  const LrSchedule s{.lr = 3e-3f, .lr_min = 3e-5f, .warmup_steps = 100, .total_steps = 1000};
  LOOM_ASSERT_OK(s.Validate());
  for (int64_t step = 2; step <= 100; ++step) {
    ASSERT_GT(s.LrAt(step), s.LrAt(step - 1)) << "warm-up at step " << step;
  }
  for (int64_t step = 101; step <= 1000; ++step) {
    ASSERT_LE(s.LrAt(step), s.LrAt(step - 1)) << "decay at step " << step;
    ASSERT_GE(s.LrAt(step), 3e-5f) << step;
  }
  EXPECT_LT(s.LrAt(101), 3e-3f);  // the decay starts right after the peak
}

TEST(LrScheduleTest, NoWarmupDecaysFromTheFirstStep) {
  const LrSchedule s{.lr = 1.0f, .lr_min = 0.0f, .warmup_steps = 0, .total_steps = 4};
  LOOM_ASSERT_OK(s.Validate());
  // 0.5 * (1 + cos(pi * k / 4)) for k = 1..4.
  EXPECT_FLOAT_EQ(s.LrAt(1), static_cast<float>(0.5 * (1 + std::cos(M_PI / 4))));
  EXPECT_FLOAT_EQ(s.LrAt(2), 0.5f);
  EXPECT_EQ(s.LrAt(4), 0.0f);
}

TEST(LrScheduleTest, WarmupAloneWhenItCoversTheRun) {
  const LrSchedule s{.lr = 2e-3f, .lr_min = 1e-5f, .warmup_steps = 8, .total_steps = 8};
  LOOM_ASSERT_OK(s.Validate());
  EXPECT_FLOAT_EQ(s.LrAt(2), 5e-4f);
  EXPECT_EQ(s.LrAt(8), 2e-3f);  // lr, not lr_min: there is no decay phase
}

TEST(LrScheduleTest, SingleStepRun) {
  const LrSchedule s{.lr = 1e-3f, .lr_min = 1e-4f, .warmup_steps = 0, .total_steps = 1};
  LOOM_ASSERT_OK(s.Validate());
  EXPECT_EQ(s.LrAt(1), 1e-4f);
  const LrSchedule warm{.lr = 1e-3f, .lr_min = 1e-4f, .warmup_steps = 1, .total_steps = 1};
  EXPECT_EQ(warm.LrAt(1), 1e-3f);
}

TEST(LrScheduleTest, ConstantDefaultIsExactlyLrAtEveryStep) {
  for (const float lr : {3e-3f, 1e-4f, 0.1f, 0.7f}) {
    const LrSchedule s = LrSchedule::Constant(lr, 2000);
    LOOM_ASSERT_OK(s.Validate());
    for (int64_t step = 1; step <= 2000; ++step) ASSERT_EQ(s.LrAt(step), lr) << step;
  }
  // A warm-up to lr with lr_min == lr is constant after the warm-up, exactly.
  const LrSchedule warm{.lr = 3e-3f, .lr_min = 3e-3f, .warmup_steps = 10, .total_steps = 100};
  for (int64_t step = 10; step <= 100; ++step) ASSERT_EQ(warm.LrAt(step), 3e-3f) << step;
}

TEST(LrScheduleTest, SameRateWhenResumed) {
  // Two schedules built apart give bit-identical rates: nothing but the step matters.
  const LrSchedule a{.lr = 3e-3f, .lr_min = 1e-4f, .warmup_steps = 37, .total_steps = 977};
  const LrSchedule b = a;
  for (int64_t step = 977; step >= 1; step -= 13) ASSERT_EQ(a.LrAt(step), b.LrAt(step));
}

TEST(LrScheduleTest, BadValuesNameTheFlags) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    LrSchedule schedule;
    const char* message;
  };
  const Case cases[] = {
      {{nan, 0.0f, 0, 10}, "--lr nan must be finite"},
      {{inf, 0.0f, 0, 10}, "--lr inf must be finite"},
      {{-1e-3f, -1e-3f, 0, 10}, "--lr -0.001 must be finite and not negative"},
      {{1e-3f, 2e-3f, 0, 10}, "--lr_min 0.002 must be in [0, --lr 0.001]"},
      {{1e-3f, -1e-4f, 0, 10}, "--lr_min -0.0001 must be in [0, --lr 0.001]"},
      {{1e-3f, nan, 0, 10}, "--lr_min nan must be in [0, --lr 0.001]"},
      {{1e-3f, 1e-3f, 0, 0}, "--steps 0 must be at least 1"},
      {{1e-3f, 1e-3f, 11, 10}, "--warmup_steps 11 must be in [0, --steps 10]"},
      {{1e-3f, 1e-3f, -1, 10}, "--warmup_steps -1 must be in [0, --steps 10]"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(c.schedule.Validate(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)));
  }
  LOOM_EXPECT_OK((LrSchedule{0.0f, 0.0f, 0, 1}.Validate()));  // lr 0 is legal, if idle
}

}  // namespace
}  // namespace loom
