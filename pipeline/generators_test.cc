#include "pipeline/generators.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/action.h"
#include "topology/parallel_config.h"

namespace loom {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::vector<Action> Actions(const char* text) { return *ParseActionList(text); }

// LeadingForwards counts the forwards a rank runs before its first backward.
int64_t LeadingForwards(const std::vector<Action>& actions) {
  int64_t count = 0;
  while (count < static_cast<int64_t>(actions.size()) &&
         actions[count].kind == ActionKind::kForward) {
    ++count;
  }
  return count;
}

TEST(GeneratorsTest, HeaderExample) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, Make1F1BSchedule(4, 8));
  EXPECT_EQ(s.name, "1f1b");
  EXPECT_EQ(s.layout, *StageLayout::Loop(4));
  EXPECT_EQ(s.num_microbatches, 8);
  EXPECT_THAT(
      s.ranks[3],
      ElementsAreArray(Actions("3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5 3F6 3B6 3F7 3B7")));
  EXPECT_THAT(
      s.ranks[0],
      ElementsAreArray(Actions("0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0F6 0B3 0F7 0B4 0B5 0B6 0B7")));
  EXPECT_THAT(MakeInterleaved1F1BSchedule(4, 6, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("interleaved-1f1b needs num_microbatches to be a multiple of "
                                 "num_ranks (microbatch groups of p): num_microbatches=6, "
                                 "num_ranks=4")));
}

TEST(GeneratorsTest, GPipe) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, MakeGPipeSchedule(2, 3));
  EXPECT_EQ(s.name, "gpipe");
  EXPECT_THAT(s.ranks[0], ElementsAreArray(Actions("0F0 0F1 0F2 0B0 0B1 0B2")));
  EXPECT_THAT(s.ranks[1], ElementsAreArray(Actions("1F0 1F1 1F2 1B0 1B1 1B2")));
}

// Megatron-LM's warmup: min(p - r - 1, m) forwards before the steady state.
TEST(GeneratorsTest, OneFOneBWarmup) {
  for (int64_t p = 1; p <= 8; ++p) {
    for (int64_t m = 1; m <= 12; ++m) {
      LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, Make1F1BSchedule(p, m));
      for (int64_t r = 0; r < p; ++r) {
        const int64_t warmup = std::min(p - r - 1, m);
        // The warmup, then the steady state's first forward (if any is left).
        EXPECT_EQ(LeadingForwards(s.ranks[r]), std::min(warmup + 1, m)) << "p=" << p << " m=" << m;
        EXPECT_EQ(static_cast<int64_t>(s.ranks[r].size()), 2 * m);
      }
    }
  }
}

// Megatron-LM's interleaved order, worked by hand from its get_model_chunk_id:
// rank 0 holds stages 0 and 2, rank 1 stages 1 and 3; warmup 4 and 2.
TEST(GeneratorsTest, InterleavedMatchesMegatron) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, MakeInterleaved1F1BSchedule(2, 4, 2));
  EXPECT_EQ(s.name, "interleaved-1f1b");
  EXPECT_EQ(s.layout, *StageLayout::Loop(2, 2));
  EXPECT_THAT(s.ranks[0], ElementsAreArray(Actions("0F0 0F1 2F0 2F1 "  // warmup
                                                   "0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 "
                                                   "2B2 2B3 0B2 0B3")));  // cooldown
  EXPECT_THAT(s.ranks[1],
              ElementsAreArray(Actions("1F0 1F1 "
                                       "3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 "
                                       "1B2 1B3")));
}

TEST(GeneratorsTest, InterleavedWarmupFormula) {
  for (int64_t p = 1; p <= 6; ++p) {
    for (int64_t v = 1; v <= 4; ++v) {
      for (int64_t m = p; m <= 4 * p; m += p) {
        LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, MakeInterleaved1F1BSchedule(p, m, v));
        for (int64_t r = 0; r < p; ++r) {
          const int64_t warmup = std::min((p - r - 1) * 2 + (v - 1) * p, m * v);
          EXPECT_EQ(LeadingForwards(s.ranks[r]), std::min(warmup + 1, m * v))
              << "p=" << p << " m=" << m << " v=" << v << " r=" << r;
          EXPECT_EQ(static_cast<int64_t>(s.ranks[r].size()), 2 * m * v);
        }
      }
    }
  }
}

TEST(GeneratorsTest, ZeroBubbleH1) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, MakeZeroBubbleH1Schedule(4, 8));
  EXPECT_EQ(s.name, "zb-h1");
  // Rank 0: 1F1B's warmup of 3, each I followed by its W at once.
  EXPECT_THAT(s.ranks[0], ElementsAreArray(
                              Actions("0F0 0F1 0F2 0F3 0I0 0W0 0F4 0I1 0W1 0F5 0I2 0W2 0F6 0I3 0W3 "
                                      "0F7 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7")));
  // Rank 3: no warmup; its W's trail its I's by 3, the last three end the list.
  EXPECT_THAT(s.ranks[3], ElementsAreArray(
                              Actions("3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4 3I4 3W1 3F5 3I5 3W2 "
                                      "3F6 3I6 3W3 3F7 3I7 3W4 3W5 3W6 3W7")));
  // Fewer microbatches than the delay: all W's at the end.
  EXPECT_THAT(MakeZeroBubbleH1Schedule(4, 2)->ranks[3],
              ElementsAreArray(Actions("3F0 3I0 3F1 3I1 3W0 3W1")));
}

TEST(GeneratorsTest, ZeroBubbleV) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, MakeZeroBubbleVSchedule(2, 4));
  EXPECT_EQ(s.name, "zb-v");
  EXPECT_EQ(s.layout, *StageLayout::VShape(2));
  EXPECT_THAT(s.ranks[0], ElementsAreArray(
                              Actions("0F0 0F1 0F2 3F0 3I0 3W0 3F1 3I1 3W1 0F3 0I0 0W0 3F2 3I2 3W2 "
                                      "0I1 0W1 3F3 3I3 3W3 0I2 0W2 0I3 0W3")));
  EXPECT_THAT(s.ranks[1], ElementsAreArray(
                              Actions("1F0 2F0 1F1 2F1 2I0 2W0 1F2 1I0 1W0 2F2 2I1 2W1 1F3 1I1 1W1 "
                                      "2F3 2I2 2W2 1I2 2I3 1I3 1W2 2W3 1W3")));
  // Built for 2p - 1 = 3 microbatches, the third dropped.
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule two, MakeZeroBubbleVSchedule(2, 2));
  EXPECT_THAT(two.ranks[0],
              ElementsAreArray(Actions("0F0 0F1 3F0 3I0 3W0 3F1 3I1 3W1 0I0 0W0 0I1 0W1")));
}

// Every generator produces one F and one backward per (stage, microbatch), on the
// rank that holds the stage (the verifier checks order and deadlocks).
TEST(GeneratorsTest, EveryStageMicrobatchOnce) {
  for (const PipelineScheduleKind kind :
       {PipelineScheduleKind::kGPipe, PipelineScheduleKind::k1F1B,
        PipelineScheduleKind::kInterleaved1F1B, PipelineScheduleKind::kZeroBubbleH1,
        PipelineScheduleKind::kZeroBubbleV}) {
    const int64_t v = kind == PipelineScheduleKind::kInterleaved1F1B ? 3 : 1;
    LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, MakeSchedule(kind, 3, 6, v));
    EXPECT_EQ(s.name, PipelineScheduleName(kind));
    const int64_t stages = s.layout.num_stages();
    std::vector<int> forwards(stages * 6, 0), backwards(stages * 6, 0), weights(stages * 6, 0);
    for (int64_t r = 0; r < s.num_ranks(); ++r) {
      for (const Action& a : s.ranks[r]) {
        ASSERT_EQ(s.layout.RankOf(a.stage), r) << a;
        const int64_t slot = a.stage * 6 + a.microbatch;
        if (a.kind == ActionKind::kForward) ++forwards[slot];
        if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardInput)
          ++backwards[slot];
        if (a.kind == ActionKind::kBackwardWeight) ++weights[slot];
      }
    }
    const bool split =
        kind == PipelineScheduleKind::kZeroBubbleH1 || kind == PipelineScheduleKind::kZeroBubbleV;
    for (int64_t slot = 0; slot < stages * 6; ++slot) {
      EXPECT_EQ(forwards[slot], 1) << PipelineScheduleName(kind) << " slot " << slot;
      EXPECT_EQ(backwards[slot], 1) << PipelineScheduleName(kind) << " slot " << slot;
      EXPECT_EQ(weights[slot], split ? 1 : 0) << PipelineScheduleName(kind) << " slot " << slot;
    }
  }
}

TEST(GeneratorsTest, RejectsBadCounts) {
  EXPECT_THAT(MakeGPipeSchedule(0, 4),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("gpipe needs num_ranks >= 1 and num_microbatches >= 1, got "
                                 "num_ranks=0, num_microbatches=4")));
  EXPECT_THAT(Make1F1BSchedule(4, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_microbatches=0")));
  EXPECT_THAT(MakeZeroBubbleH1Schedule(-1, 4),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zb-h1 needs")));
  EXPECT_THAT(MakeZeroBubbleVSchedule(0, 4),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zb-v needs")));
  EXPECT_THAT(
      MakeInterleaved1F1BSchedule(4, 8, 0),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("interleaved-1f1b needs virtual_stages >= 1, got virtual_stages=0")));
  EXPECT_THAT(Make1F1BSchedule(16, int64_t{1} << 30),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("1f1b with 16 stages allows at most 1048576 microbatches, got "
                                 "num_microbatches=1073741824")));
}

TEST(GeneratorsTest, ForwardOnly) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule one, MakeForwardOnlySchedule(2, 3));
  EXPECT_EQ(one.name, "forward-only");
  EXPECT_EQ(one.layout, *StageLayout::Loop(2));
  EXPECT_EQ(one.num_microbatches, 3);
  EXPECT_THAT(one.ranks[0], ElementsAreArray(Actions("0F0 0F1 0F2")));
  EXPECT_THAT(one.ranks[1], ElementsAreArray(Actions("1F0 1F1 1F2")));
  // The header's examples: wavefronts s + mb, the lower microbatch first.
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule loop, MakeForwardOnlySchedule(2, 3, 2));
  EXPECT_EQ(loop.layout, *StageLayout::Loop(2, 2));
  EXPECT_THAT(loop.ranks[0], ElementsAreArray(Actions("0F0 0F1 2F0 0F2 2F1 2F2")));
  EXPECT_THAT(loop.ranks[1], ElementsAreArray(Actions("1F0 1F1 3F0 1F2 3F1 3F2")));
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule v, MakeForwardOnlySchedule(*StageLayout::VShape(2), 2));
  EXPECT_EQ(v.layout, *StageLayout::VShape(2));
  EXPECT_THAT(v.ranks[0], ElementsAreArray(Actions("0F0 0F1 3F0 3F1")));
  EXPECT_THAT(v.ranks[1], ElementsAreArray(Actions("1F0 2F0 1F1 2F1")));
}

// On a training schedule's layout: the same stages on the same ranks, one F per
// (stage, microbatch) and nothing else.
TEST(GeneratorsTest, ForwardOnlyKeepsTheTrainingLayout) {
  for (const PipelineScheduleKind kind :
       {PipelineScheduleKind::kGPipe, PipelineScheduleKind::k1F1B,
        PipelineScheduleKind::kInterleaved1F1B, PipelineScheduleKind::kZeroBubbleH1,
        PipelineScheduleKind::kZeroBubbleV}) {
    const int64_t v = kind == PipelineScheduleKind::kInterleaved1F1B ? 3 : 1;
    LOOM_ASSERT_OK_AND_ASSIGN(Schedule training, MakeSchedule(kind, 3, 6, v));
    training.layout = *training.layout.WithEvenLayers(6 * training.layout.num_stages());
    LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, MakeForwardOnlySchedule(training.layout, 4));
    EXPECT_EQ(s.layout, training.layout) << PipelineScheduleName(kind);
    EXPECT_EQ(s.num_microbatches, 4);
    std::vector<int> forwards(s.layout.num_stages() * 4, 0);
    for (int64_t r = 0; r < s.num_ranks(); ++r) {
      for (const Action& a : s.ranks[r]) {
        ASSERT_EQ(a.kind, ActionKind::kForward) << a;
        ASSERT_EQ(s.layout.RankOf(a.stage), r) << a;
        ++forwards[a.stage * 4 + a.microbatch];
      }
    }
    for (const int count : forwards) EXPECT_EQ(count, 1) << PipelineScheduleName(kind);
  }
}

TEST(GeneratorsTest, ForwardOnlyRejectsBadCounts) {
  EXPECT_THAT(MakeForwardOnlySchedule(0, 4),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("forward-only needs num_ranks >= 1, num_microbatches >= 1 and "
                                 "stages_per_rank >= 1, got num_ranks=0, num_microbatches=4, "
                                 "stages_per_rank=1")));
  EXPECT_THAT(MakeForwardOnlySchedule(2, 0, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("got num_ranks=2, num_microbatches=0, stages_per_rank=2")));
  EXPECT_THAT(MakeForwardOnlySchedule(2, 4, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("got num_ranks=2, num_microbatches=4, stages_per_rank=0")));
  EXPECT_THAT(MakeForwardOnlySchedule(4, 1, int64_t{1} << 20),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("forward-only: num_ranks=4 x stages_per_rank=1048576 is more "
                                 "than 1048576 stages")));
  EXPECT_THAT(MakeForwardOnlySchedule(*StageLayout::VShape(2), 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("forward-only needs num_ranks >= 1 and num_microbatches >= 1, "
                                 "got num_ranks=2, num_microbatches=0")));
  EXPECT_THAT(MakeForwardOnlySchedule(16, int64_t{1} << 30),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("forward-only with 16 stages allows at most 1048576 "
                                 "microbatches, got num_microbatches=1073741824")));
}

TEST(GeneratorsTest, MakeScheduleDispatches) {
  EXPECT_EQ(MakeSchedule(PipelineScheduleKind::kGPipe, 2, 2)->ranks,
            MakeGPipeSchedule(2, 2)->ranks);
  EXPECT_EQ(MakeSchedule(PipelineScheduleKind::kInterleaved1F1B, 2, 4, 2)->ranks,
            MakeInterleaved1F1BSchedule(2, 4, 2)->ranks);
  EXPECT_EQ(MakeSchedule(PipelineScheduleKind::kZeroBubbleV, 2, 4, 2)->ranks,
            MakeZeroBubbleVSchedule(2, 4)->ranks);
  EXPECT_THAT(
      MakeSchedule(PipelineScheduleKind::k1F1B, 2, 4, 2),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("1f1b does not take virtual_stages=2 (it places 1 stage per rank)")));
  EXPECT_THAT(
      MakeSchedule(PipelineScheduleKind::kZeroBubbleV, 2, 4, 3),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("zb-v does not take virtual_stages=3 (it places 2 stages per rank)")));
}

}  // namespace
}  // namespace loom
