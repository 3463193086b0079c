#include "pipeline/lowering.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/action.h"
#include "pipeline/generators.h"
#include "pipeline/schedule.h"
#include "pipeline/stage_layout.h"

namespace loom {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::vector<Action> Actions(const char* text) { return *ParseActionList(text); }

// NextCompute returns the first compute action after `step` on `actions`.
const Action* NextCompute(const std::vector<Action>& actions, size_t step) {
  for (size_t i = step + 1; i < actions.size(); ++i) {
    if (IsCompute(actions[i].kind)) return &actions[i];
  }
  return nullptr;
}

const Action* PreviousCompute(const std::vector<Action>& actions, size_t step) {
  for (size_t i = step; i-- > 0;) {
    if (IsCompute(actions[i].kind)) return &actions[i];
  }
  return nullptr;
}

bool Consumes(const Action& compute, const Action& recv) {
  if (compute.stage != recv.stage || compute.microbatch != recv.microbatch) return false;
  return recv.kind == ActionKind::kRecvForward
             ? compute.kind == ActionKind::kForward
             : compute.kind == ActionKind::kBackward || compute.kind == ActionKind::kBackwardInput;
}

bool Produces(const Action& compute, const Action& send) {
  if (compute.stage != send.stage || compute.microbatch != send.microbatch) return false;
  return send.kind == ActionKind::kSendForward
             ? compute.kind == ActionKind::kForward
             : compute.kind == ActionKind::kBackward || compute.kind == ActionKind::kBackwardInput;
}

struct Placement {
  int64_t sends = 0;
  int64_t recvs = 0;
  int64_t sends_not_after_producer = 0;
  int64_t recvs_not_before_consumer = 0;
};

// Place checks where Lower put each message relative to the compute actions.
Placement Place(const Schedule& lowered) {
  Placement placement;
  for (const std::vector<Action>& actions : lowered.ranks) {
    for (size_t i = 0; i < actions.size(); ++i) {
      const Action& a = actions[i];
      if (IsSend(a.kind)) {
        ++placement.sends;
        const Action* producer = PreviousCompute(actions, i);
        if (producer == nullptr || !Produces(*producer, a)) ++placement.sends_not_after_producer;
      } else if (IsRecv(a.kind)) {
        ++placement.recvs;
        const Action* consumer = NextCompute(actions, i);
        if (consumer == nullptr || !Consumes(*consumer, a)) ++placement.recvs_not_before_consumer;
      }
    }
  }
  return placement;
}

TEST(LoweringTest, HeaderExample) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule lowered, Lower(*Make1F1BSchedule(2, 2)));
  EXPECT_EQ(lowered.name, "1f1b");
  EXPECT_EQ(lowered.num_microbatches, 2);
  EXPECT_THAT(lowered.ranks[0],
              ElementsAreArray(Actions("0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1")));
  EXPECT_THAT(lowered.ranks[1],
              ElementsAreArray(Actions("1RECV_F0 1F0 1B0 1RECV_F1 1SEND_B0 1F1 1B1 1SEND_B1")));
}

TEST(LoweringTest, GPipeMessages) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule lowered, Lower(*MakeGPipeSchedule(3, 2)));
  EXPECT_THAT(lowered.ranks[0],
              ElementsAreArray(Actions("0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1")));
  EXPECT_THAT(lowered.ranks[1],
              ElementsAreArray(Actions("1RECV_F0 1F0 1SEND_F0 1RECV_F1 1F1 1SEND_F1 "
                                       "1RECV_B0 1B0 1SEND_B0 1RECV_B1 1B1 1SEND_B1")));
  EXPECT_THAT(lowered.ranks[2],
              ElementsAreArray(Actions("2RECV_F0 2F0 2RECV_F1 2F1 2B0 2SEND_B0 2B1 2SEND_B1")));
}

// Zero-bubble: I sends the input gradient, W communicates nothing.
TEST(LoweringTest, ZeroBubbleSendsFromI) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule lowered, Lower(*MakeZeroBubbleH1Schedule(2, 2)));
  EXPECT_THAT(
      lowered.ranks[0],
      ElementsAreArray(Actions("0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0I0 0W0 0RECV_B1 0I1 0W1")));
  EXPECT_THAT(
      lowered.ranks[1],
      ElementsAreArray(Actions("1RECV_F0 1F0 1I0 1RECV_F1 1SEND_B0 1F1 1I1 1SEND_B1 1W0 1W1")));
}

// Forward-only: activations only, each send right after its producer and each
// receive right before its consumer.
TEST(LoweringTest, ForwardOnlySendsActivationsOnly) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule lowered, Lower(*MakeForwardOnlySchedule(3, 2)));
  EXPECT_THAT(lowered.ranks[0], ElementsAreArray(Actions("0F0 0SEND_F0 0F1 0SEND_F1")));
  EXPECT_THAT(lowered.ranks[1],
              ElementsAreArray(Actions("1RECV_F0 1F0 1SEND_F0 1RECV_F1 1F1 1SEND_F1")));
  EXPECT_THAT(lowered.ranks[2], ElementsAreArray(Actions("2RECV_F0 2F0 2RECV_F1 2F1")));
  for (const StageLayout& layout : {*StageLayout::Loop(4, 2), *StageLayout::VShape(4)}) {
    const int64_t m = 5;
    LOOM_ASSERT_OK_AND_ASSIGN(lowered, Lower(*MakeForwardOnlySchedule(layout, m)));
    for (const std::vector<Action>& actions : lowered.ranks) {
      for (const Action& a : actions) {
        EXPECT_TRUE(a.kind == ActionKind::kForward || a.kind == ActionKind::kSendForward ||
                    a.kind == ActionKind::kRecvForward)
            << a;
      }
    }
    // Every edge but the V's turn crosses ranks.
    const int64_t edges = layout.num_stages() - 1 - (layout == *StageLayout::VShape(4) ? 1 : 0);
    const Placement placement = Place(lowered);
    EXPECT_EQ(placement.sends, edges * m) << layout.ToString();
    EXPECT_EQ(placement.recvs, placement.sends) << layout.ToString();
    EXPECT_EQ(placement.sends_not_after_producer, 0) << layout.ToString();
  }
}

// One rank: every stage transition is local, nothing to insert.
TEST(LoweringTest, OneRankNeedsNoMessages) {
  for (const Schedule& schedule : {*Make1F1BSchedule(1, 4), *MakeInterleaved1F1BSchedule(1, 3, 4),
                                   *MakeZeroBubbleVSchedule(1, 3)}) {
    LOOM_ASSERT_OK_AND_ASSIGN(Schedule lowered, Lower(schedule));
    EXPECT_EQ(lowered.ranks, schedule.ranks) << schedule.name;
    EXPECT_FALSE(lowered.HasCommunication());
  }
}

// The turn of the V (stages p-1 and p, both on rank p-1) has no messages; every
// other edge has one each way.
TEST(LoweringTest, VShapeTurnStaysLocal) {
  const int64_t p = 3, m = 5;
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule lowered, Lower(*MakeZeroBubbleVSchedule(p, m)));
  for (const std::vector<Action>& actions : lowered.ranks) {
    for (const Action& a : actions) {
      EXPECT_FALSE(a.kind == ActionKind::kSendForward && a.stage == p - 1) << a;
      EXPECT_FALSE(a.kind == ActionKind::kRecvForward && a.stage == p) << a;
      EXPECT_FALSE(a.kind == ActionKind::kSendBackward && a.stage == p) << a;
      EXPECT_FALSE(a.kind == ActionKind::kRecvBackward && a.stage == p - 1) << a;
    }
  }
  // 2p stages: 2p-1 edges, one of them local: (2p-2) * m messages each way.
  const Placement placement = Place(lowered);
  EXPECT_EQ(placement.sends, 2 * (2 * p - 2) * m);
  EXPECT_EQ(placement.recvs, placement.sends);
}

// GPipe, 1F1B and ZB-H1: every send right after its producer and every receive
// right before its consumer (only messages in between), for every p <= 8, m <= 16.
// Interleaved 1F1B and ZB-V keep the sends there, but some receives move earlier.
TEST(LoweringTest, PlacementRule) {
  for (int64_t p = 1; p <= 8; ++p) {
    for (int64_t m = 1; m <= 16; ++m) {
      for (const PipelineScheduleKind kind :
           {PipelineScheduleKind::kGPipe, PipelineScheduleKind::k1F1B,
            PipelineScheduleKind::kZeroBubbleH1, PipelineScheduleKind::kZeroBubbleV}) {
        LOOM_ASSERT_OK_AND_ASSIGN(Schedule lowered, Lower(*MakeSchedule(kind, p, m)));
        const Placement placement = Place(lowered);
        const std::string what = absl::StrCat(PipelineScheduleName(kind), " p=", p, " m=", m);
        const int64_t edges =
            lowered.layout.num_stages() - 1 - (kind == PipelineScheduleKind::kZeroBubbleV ? 1 : 0);
        EXPECT_EQ(placement.sends, p == 1 ? 0 : 2 * edges * m) << what;
        EXPECT_EQ(placement.recvs, placement.sends) << what;
        EXPECT_EQ(placement.sends_not_after_producer, 0) << what;
        if (kind != PipelineScheduleKind::kZeroBubbleV) {
          EXPECT_EQ(placement.recvs_not_before_consumer, 0) << what;
        }
      }
    }
  }
}

// The example of the header: interleaved 1F1B on 2 ranks needs one receive early.
TEST(LoweringTest, InterleavedMovesAReceiveUp) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule lowered, Lower(*MakeInterleaved1F1BSchedule(2, 4, 2)));
  const std::vector<Action>& rank1 = lowered.ranks[1];
  const auto at = [&rank1](const char* text) {
    return std::find(rank1.begin(), rank1.end(), *ParseAction(text)) - rank1.begin();
  };
  // 1RECV_B0 sits before 3SEND_B1 and 1F2, not right before its consumer 1B0.
  EXPECT_LT(at("1RECV_B0"), at("3SEND_B1"));
  EXPECT_LT(at("3SEND_B1"), at("1F2"));
  EXPECT_LT(at("1F2"), at("1B0"));
  const Placement placement = Place(lowered);
  EXPECT_EQ(placement.sends_not_after_producer, 0);
  EXPECT_GT(placement.recvs_not_before_consumer, 0);
}

TEST(LoweringTest, UnevenLayoutsKeepTheirLayers) {
  Schedule schedule = *Make1F1BSchedule(2, 2);
  schedule.layout = *schedule.layout.WithLayers(5, {2, 3});
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule lowered, Lower(schedule));
  EXPECT_EQ(lowered.layout, schedule.layout);
}

TEST(LoweringTest, RejectsLoweredAndIncompleteSchedules) {
  const Schedule lowered = *Lower(*Make1F1BSchedule(2, 2));
  EXPECT_THAT(Lower(lowered),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("Lower takes a compute-only schedule; rank 0 step 1 (0SEND_F0) is "
                                 "a message")));
  Schedule missing = *Make1F1BSchedule(2, 2);
  missing.ranks[1].erase(missing.ranks[1].begin() + 2);  // 1F1
  EXPECT_THAT(Lower(missing),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("stage 1 microbatch 1 has no forward: 1F1 is missing on rank 1")));
  Schedule partial = *MakeForwardOnlySchedule(2, 2);
  partial.ranks[0].push_back(*ParseAction("0B1"));
  EXPECT_THAT(Lower(partial),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("stage 0 microbatch 0 has no backward: neither 0B0 nor 0I0 is on "
                                 "rank 0")));
}

}  // namespace
}  // namespace loom
