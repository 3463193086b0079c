#include "pipeline/schedule.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/action.h"
#include "pipeline/stage_layout.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

Schedule Tiny() {
  Schedule s;
  s.name = "tiny";
  s.layout = *StageLayout::Loop(2);
  s.num_microbatches = 1;
  s.ranks = {*ParseActionList("0F0 0SEND_F0 0RECV_B0 0B0"),
             *ParseActionList("1RECV_F0 1F0 1B0 1SEND_B0")};
  return s;
}

TEST(ScheduleTest, HeaderExample) {
  GridOptions options;
  options.marks = {{1, 2}};
  EXPECT_EQ(FormatGrid(Tiny(), options),
            "tiny: loop p=2 v=1, 1 microbatch\n"
            "step    0          1          2          3\n"
            "rank 0  0F0        0SEND_F0   0RECV_B0   0B0\n"
            "rank 1  1RECV_F0   1F0       >1B0<       1SEND_B0\n");
}

TEST(ScheduleTest, Counts) {
  const Schedule s = Tiny();
  EXPECT_EQ(s.num_ranks(), 2);
  EXPECT_EQ(s.NumActions(), 8);
  EXPECT_TRUE(s.HasCommunication());
  Schedule compute_only = s;
  compute_only.ranks = {*ParseActionList("0F0 0B0"), *ParseActionList("1F0 1B0")};
  EXPECT_FALSE(compute_only.HasCommunication());
  EXPECT_TRUE(s.HasBackward());
  Schedule forward_only = s;
  forward_only.ranks = {*ParseActionList("0F0 0SEND_F0"), *ParseActionList("1RECV_F0 1F0")};
  EXPECT_FALSE(forward_only.HasBackward());
  forward_only.ranks[1].push_back(*ParseAction("1W0"));
  EXPECT_TRUE(forward_only.HasBackward());
  EXPECT_EQ(s.ToString(), FormatGrid(s));
}

TEST(ScheduleTest, RowsOfDifferentLengthsAndNoName) {
  Schedule s;
  s.layout = *StageLayout::Loop(2);
  s.num_microbatches = 2;
  s.ranks = {*ParseActionList("0F0 0F1 0B0 0B1"), *ParseActionList("1F0")};
  EXPECT_EQ(FormatGrid(s),
            "schedule: loop p=2 v=1, 2 microbatches\n"
            "step    0     1     2     3\n"
            "rank 0  0F0   0F1   0B0   0B1\n"
            "rank 1  1F0\n");
}

// A window of max_columns steps around the marks, with "..." for what is left out.
TEST(ScheduleTest, WindowAroundTheMarks) {
  Schedule s;
  s.name = "long";
  s.layout = *StageLayout::Loop(1);
  s.num_microbatches = 20;
  s.ranks.resize(1);
  for (int64_t mb = 0; mb < 20; ++mb) s.ranks[0].push_back({ActionKind::kForward, 0, mb});
  GridOptions options;
  options.max_columns = 4;
  options.marks = {{0, 10}};
  EXPECT_EQ(FormatGrid(s, options),
            "long: loop p=1 v=1, 20 microbatches (steps 9-12 of 0-19)\n"
            "step    ...  9     10     11     12     ...\n"
            "rank 0  ...  0F9  >0F10<  0F11   0F12   ...\n");
  // No marks: from the start. Marks outside the schedule are ignored.
  options.marks = {{3, 1}, {0, 99}};
  EXPECT_THAT(FormatGrid(s, options), HasSubstr("(steps 0-3 of 0-19)"));
  // Marks far apart: the window starts just before the first.
  options.marks = {{0, 5}, {0, 18}};
  EXPECT_THAT(FormatGrid(s, options), HasSubstr("(steps 3-6 of 0-19)"));
  // Near the end the window still has max_columns steps.
  options.marks = {{0, 19}};
  EXPECT_THAT(FormatGrid(s, options), HasSubstr("(steps 16-19 of 0-19)"));
}

}  // namespace
}  // namespace loom
