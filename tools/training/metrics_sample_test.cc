#include "tools/training/metrics_sample.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace loom {
namespace {

MetricsLine LineOf(int64_t step) {
  MetricsLine line;
  line.step = step;
  line.loss = 10.0 / static_cast<double>(step);
  return line;
}

TEST(MetricsSampleTest, KeepsEveryLineUpToCapacity) {
  MetricsSample sample(8);
  for (int64_t step = 1; step <= 8; ++step) sample.Add(LineOf(step));
  const std::vector<MetricsLine> lines = sample.Lines();
  ASSERT_EQ(lines.size(), 8u);
  for (int64_t k = 0; k < 8; ++k) EXPECT_EQ(lines[static_cast<size_t>(k)].step, k + 1);
  EXPECT_EQ(sample.stride(), 1);
}

// Over runs far longer than the capacity: bounded, evenly strided, in order, the
// first and the newest line always there.
TEST(MetricsSampleTest, StaysBoundedAndEvenOverLongRuns) {
  for (const size_t capacity : {size_t{2}, size_t{3}, size_t{16}, size_t{100}}) {
    for (const int64_t steps : {int64_t{1}, int64_t{17}, int64_t{1000}, int64_t{100003}}) {
      SCOPED_TRACE(testing::Message() << "capacity " << capacity << " steps " << steps);
      MetricsSample sample(capacity);
      for (int64_t step = 1; step <= steps; ++step) sample.Add(LineOf(step));
      const std::vector<MetricsLine> lines = sample.Lines();
      ASSERT_FALSE(lines.empty());
      EXPECT_LE(lines.size(), capacity + 1);
      EXPECT_EQ(lines.front().step, 1);
      EXPECT_EQ(lines.back().step, steps);
      EXPECT_EQ(lines.back().loss, 10.0 / static_cast<double>(steps));
      // All but the newest: steps 1, 1 + stride, 1 + 2 stride, ...
      const size_t regular = lines.size() - (((steps - 1) % sample.stride()) != 0 ? 1 : 0);
      for (size_t k = 0; k < regular; ++k) {
        EXPECT_EQ(lines[k].step, 1 + static_cast<int64_t>(k) * sample.stride()) << k;
      }
      // Not thinned further than it must: more than half the capacity is in use.
      if (static_cast<size_t>(steps) > capacity) {
        EXPECT_GT(lines.size() * 2, capacity);
      }
    }
  }
}

}  // namespace
}  // namespace loom
