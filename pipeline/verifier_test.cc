#include "pipeline/verifier.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/action.h"
#include "pipeline/generators.h"
#include "pipeline/lowering.h"
#include "pipeline/schedule.h"
#include "pipeline/stage_layout.h"

namespace loom {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
constexpr absl::StatusCode kDeadlock = absl::StatusCode::kFailedPrecondition;

// Schedule on `layout` from one text row per rank.
Schedule Make(StageLayout layout, int64_t m, const std::vector<std::string>& rows) {
  Schedule s;
  s.name = "hand";
  s.layout = std::move(layout);
  s.num_microbatches = m;
  for (const std::string& row : rows) s.ranks.push_back(*ParseActionList(row));
  return s;
}

// The lowered 1F1B of the header of lowering.h.
Schedule Lowered1F1B() { return *Lower(*Make1F1BSchedule(2, 2)); }

TEST(VerifierTest, AcceptsGeneratedSchedules) {
  LOOM_EXPECT_OK(Verify(*Make1F1BSchedule(4, 8)));
  LOOM_EXPECT_OK(Verify(*Lower(*Make1F1BSchedule(4, 8))));
  LOOM_EXPECT_OK(Verify(*MakeGPipeSchedule(1, 1)));
  LOOM_EXPECT_OK(Verify(*MakeInterleaved1F1BSchedule(4, 8, 3)));
  LOOM_EXPECT_OK(Verify(*MakeZeroBubbleH1Schedule(4, 8)));
  LOOM_EXPECT_OK(Verify(*MakeZeroBubbleVSchedule(4, 8)));
}

// Forward-only schedules on the layouts of the training schedules: 1, 2 or 4 ranks,
// one or two stages per rank (loop and V-shape), compute-only and lowered, under
// both semantics.
TEST(VerifierTest, AcceptsForwardOnlySchedules) {
  for (const int64_t p : {1, 2, 4}) {
    for (const int64_t m : {1, 2, 3, 5, 8}) {
      for (const StageLayout& layout :
           {*StageLayout::Loop(p), *StageLayout::Loop(p, 2), *StageLayout::VShape(p)}) {
        LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, MakeForwardOnlySchedule(layout, m));
        LOOM_EXPECT_OK(Verify(s)) << layout.ToString() << " m=" << m;
        LOOM_ASSERT_OK_AND_ASSIGN(Schedule lowered, Lower(s));
        LOOM_EXPECT_OK(Verify(lowered)) << layout.ToString() << " m=" << m;
      }
    }
  }
  LOOM_EXPECT_OK(Verify(Make(*StageLayout::Loop(2), 2, {"0F0 0F1", "1F0 1F1"})));
  LOOM_EXPECT_OK(Verify(Make(*StageLayout::Loop(2), 1, {"0F0 0SEND_F0", "1RECV_F0 1F0"})));
}

// A backward anywhere makes every backward required, with the usual messages; a
// gradient message has no place in a forward-only schedule.
TEST(VerifierTest, ForwardOnlyOrEveryBackward) {
  Schedule s = *MakeForwardOnlySchedule(2, 2);
  s.ranks[1].push_back(*ParseAction("1B1"));
  EXPECT_THAT(Verify(s), StatusIs(kInvalid, HasSubstr("stage 0 microbatch 0 has no backward: "
                                                      "neither 0B0 nor 0I0 is on rank 0")));
  s = *MakeForwardOnlySchedule(2, 1);
  s.ranks[0].push_back(*ParseAction("0W0"));
  EXPECT_THAT(Verify(s), StatusIs(kInvalid, HasSubstr("stage 0 microbatch 0 has no backward: "
                                                      "neither 0B0 nor 0I0 is on rank 0")));
  EXPECT_THAT(
      Verify(Make(*StageLayout::Loop(2), 1, {"0F0 0SEND_F0 0RECV_B0", "1RECV_F0 1F0 1SEND_B0"})),
      StatusIs(kInvalid, AllOf(HasSubstr("rank 1 step 2 (1SEND_B0) moves a gradient, but "
                                         "the schedule is forward-only (no B, I or W on "
                                         "any rank)"),
                               HasSubstr(">1SEND_B0<"))));
  EXPECT_THAT(Verify(Make(*StageLayout::Loop(2), 1, {"0F0 0SEND_F0", "1RECV_F0 1F0 1SEND_B0"})),
              StatusIs(kInvalid, HasSubstr("(1SEND_B0) moves a gradient")));
  EXPECT_THAT(Verify(Make(*StageLayout::Loop(2), 1, {"0F0", ""})),
              StatusIs(kInvalid, HasSubstr("stage 1 microbatch 0 has no forward: 1F0 is missing "
                                           "on rank 1")));
}

// Forward-only schedules get the same deadlock check: activations sent out of
// order pass with buffered sends only.
TEST(VerifierTest, ForwardOnlyDeadlock) {
  const Schedule s =
      Make(*StageLayout::Loop(2), 2, {"0F0 0F1 0SEND_F1 0SEND_F0", "1RECV_F0 1F0 1RECV_F1 1F1"});
  VerifyOptions buffered;
  buffered.check_rendezvous = false;
  LOOM_EXPECT_OK(Verify(s, buffered));
  EXPECT_THAT(Verify(s),
              StatusIs(kDeadlock, HasSubstr("deadlock under rendezvous semantics (a send and its "
                                            "receive complete together): no rank can progress; "
                                            "rank 0 waits at rank 0 step 2 (0SEND_F1) for rank 1 "
                                            "step 2 (1RECV_F1); rank 1 waits at rank 1 step 0 "
                                            "(1RECV_F0) for rank 0 step 3 (0SEND_F0)")));
}

// The classic 1F1B deadlock: both ranks send before they receive. Fine when sends
// are buffered, a deadlock when they block (header example).
TEST(VerifierTest, SendBeforeReceiveDeadlocksUnderRendezvous) {
  Schedule s = Lowered1F1B();
  ASSERT_EQ(s.ranks[1][3], *ParseAction("1RECV_F1"));
  std::swap(s.ranks[1][3], s.ranks[1][4]);  // 1B0 1SEND_B0 1RECV_F1 1F1
  VerifyOptions buffered;
  buffered.check_rendezvous = false;
  LOOM_EXPECT_OK(Verify(s, buffered));
  EXPECT_THAT(
      Verify(s),
      StatusIs(
          kDeadlock,
          AllOf(HasSubstr("deadlock under rendezvous semantics (a send and its receive complete "
                          "together): no rank can progress; rank 0 waits at rank 0 step 3 "
                          "(0SEND_F1) for rank 1 step 4 (1RECV_F1); rank 1 waits at rank 1 "
                          "step 3 (1SEND_B0) for rank 0 step 4 (0RECV_B0)"),
                HasSubstr("rank 0  0F0        0SEND_F0   0F1  >0SEND_F1<  0RECV_B0"),
                HasSubstr("rank 1  1RECV_F0   1F0        1B0  >1SEND_B0<  1RECV_F1"))));
}

// A receive ahead of the send it is waiting for, on both ranks: stuck even with
// buffered sends.
TEST(VerifierTest, CircularWaitDeadlocksUnderBuffered) {
  const Schedule s =
      Make(*StageLayout::Loop(2), 1, {"0F0 0RECV_B0 0SEND_F0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"});
  VerifyOptions rendezvous;
  rendezvous.check_buffered = false;
  EXPECT_THAT(Verify(s, rendezvous), StatusIs(kDeadlock, HasSubstr("under rendezvous")));
  EXPECT_THAT(Verify(s),
              StatusIs(kDeadlock,
                       AllOf(HasSubstr("deadlock under buffered semantics (a receive waits for its "
                                       "send): no rank can progress; rank 0 waits at rank 0 step 1 "
                                       "(0RECV_B0) for rank 1 step 3 (1SEND_B0); rank 1 waits at "
                                       "rank 1 step 0 (1RECV_F0) for rank 0 step 2 (0SEND_F0)"),
                             HasSubstr(">0RECV_B0<"), HasSubstr(">1RECV_F0<"))));
}

// A compute order with a cycle across ranks: rank 1 starts with microbatch 1,
// which rank 0 only forwards after its backward of microbatch 0, which needs rank
// 1's. Lower places what it can and Verify reports where everyone waits.
TEST(VerifierTest, CircularComputeOrder) {
  const Schedule s = Make(*StageLayout::Loop(2), 2, {"0F0 0B0 0F1 0B1", "1F1 1B1 1F0 1B0"});
  EXPECT_THAT(Verify(s),
              StatusIs(kDeadlock, AllOf(HasSubstr("deadlock under buffered semantics"),
                                        HasSubstr("rank 0 waits at rank 0 step 2 (0RECV_B0) for "
                                                  "rank 1 step "),
                                        HasSubstr("rank 1 waits at rank 1 step 1 (1RECV_F1) for "
                                                  "rank 0 step "))));
}

TEST(VerifierTest, SwappedForwardAndBackward) {
  // Compute-only: Verify lowers it, then finds 1B0 ahead of 1F0.
  Schedule s = *Make1F1BSchedule(2, 2);
  std::swap(s.ranks[1][0], s.ranks[1][1]);  // 1B0 1F0 1F1 1B1
  EXPECT_THAT(Verify(s),
              StatusIs(kInvalid, AllOf(HasSubstr("(1B0) needs 1F0 before it (its forward), "
                                                 "but it comes at rank 1 step"),
                                       HasSubstr(">1B0<"), HasSubstr(">1F0<"))));
  // Lowered: a forward ahead of the receive that brings its input.
  Schedule lowered = Lowered1F1B();
  std::swap(lowered.ranks[1][0], lowered.ranks[1][1]);  // 1F0 1RECV_F0
  EXPECT_THAT(
      Verify(lowered),
      StatusIs(kInvalid, HasSubstr("rank 1 step 0 (1F0) needs 1RECV_F0 before it (its input, "
                                   "from stage 0 on rank 0), but it comes at rank 1 step 1 "
                                   "(1RECV_F0)")));
  // A send ahead of the compute that produces its data.
  lowered = Lowered1F1B();
  std::swap(lowered.ranks[0][0], lowered.ranks[0][1]);  // 0SEND_F0 0F0
  EXPECT_THAT(
      Verify(lowered),
      StatusIs(kInvalid, HasSubstr("rank 0 step 0 (0SEND_F0) needs 0F0 before it (the output "
                                   "it sends)")));
}

TEST(VerifierTest, MissingReceive) {
  Schedule s = Lowered1F1B();
  s.ranks[1].erase(std::find(s.ranks[1].begin(), s.ranks[1].end(), *ParseAction("1RECV_F1")));
  EXPECT_THAT(Verify(s),
              StatusIs(kInvalid, AllOf(HasSubstr("rank 0 step 3 (0SEND_F1) has no matching "
                                                 "1RECV_F1 on rank 1"),
                                       HasSubstr(">0SEND_F1<"))));
  s = Lowered1F1B();
  s.ranks[0].erase(s.ranks[0].begin() + 3);  // 0SEND_F1
  EXPECT_THAT(Verify(s), StatusIs(kInvalid, HasSubstr("rank 1 step 3 (1RECV_F1) has no matching "
                                                      "0SEND_F1 on rank 0")));
  s = Lowered1F1B();
  s.ranks[0].erase(s.ranks[0].begin() + 3);  // 0SEND_F1
  s.ranks[1].erase(s.ranks[1].begin() + 3);  // 1RECV_F1
  EXPECT_THAT(Verify(s), StatusIs(kInvalid, HasSubstr("the schedule has messages, but stage 0 "
                                                      "microbatch 1 lacks both 0SEND_F1 on rank 0 "
                                                      "and 1RECV_F1 on rank 1")));
}

TEST(VerifierTest, DuplicatedMicrobatch) {
  Schedule s = *Make1F1BSchedule(2, 2);  // rank 0: 0F0 0F1 0B0 0B1
  s.ranks[0][1] = *ParseAction("0F0");
  EXPECT_THAT(Verify(s),
              StatusIs(kInvalid, AllOf(HasSubstr("rank 0 step 1: 0F0 appears a second time "
                                                 "(first at rank 0 step 0 (0F0))"),
                                       HasSubstr("rank 0 >0F0< >0F0<  0B0"))));
}

TEST(VerifierTest, MissingPieces) {
  Schedule s = *Make1F1BSchedule(2, 2);
  s.ranks[0].pop_back();  // 0B1
  EXPECT_THAT(Verify(s),
              StatusIs(kInvalid, HasSubstr("stage 0 microbatch 1 has no backward: neither "
                                           "0B1 nor 0I1 is on rank 0")));
  s = *MakeZeroBubbleH1Schedule(2, 2);
  s.ranks[1].pop_back();  // 1W1
  EXPECT_THAT(Verify(s), StatusIs(kInvalid, HasSubstr("(1I1) has no 1W1 to compute its weight "
                                                      "gradient")));
  s = *MakeZeroBubbleH1Schedule(2, 2);
  s.ranks[1].push_back(*ParseAction("1B1"));
  EXPECT_THAT(Verify(s),
              StatusIs(kInvalid, HasSubstr("stage 1 microbatch 1 has both a full backward "
                                           "rank 1 step 6 (1B1) and a split one")));
  s = *MakeZeroBubbleH1Schedule(2, 1);  // rank 1: 1F0 1I0 1W0
  std::swap(s.ranks[1][1], s.ranks[1][2]);
  EXPECT_THAT(Verify(s),
              StatusIs(kInvalid, HasSubstr("(1W0) needs 1I0 before it (the input-gradient "
                                           "half of its backward)")));
}

TEST(VerifierTest, PlacementErrors) {
  const StageLayout two = *StageLayout::Loop(2);
  EXPECT_THAT(
      Verify(Make(two, 1, {"1F0 0F0 0B0", "1B0"})),
      StatusIs(kInvalid, AllOf(HasSubstr("rank 0 step 0: 1F0 is on rank 0, but stage 1 lives "
                                         "on rank 1 (loop p=2 v=1)"),
                               HasSubstr(">1F0<"))));
  EXPECT_THAT(Verify(Make(two, 1, {"0F0 0B0", "1F0 1B0 3F0"})),
              StatusIs(kInvalid, HasSubstr("rank 1 step 2: 3F0 names stage 3; loop p=2 v=1 has "
                                           "stages 0-1")));
  EXPECT_THAT(
      Verify(Make(two, 1, {"0F0 0B0 0F1", "1F0 1B0"})),
      StatusIs(kInvalid, HasSubstr("rank 0 step 2: 0F1 names microbatch 1; the schedule has "
                                   "1 (0-0)")));
  EXPECT_THAT(
      Verify(Make(two, 1, {"0F0 0B0", "1F0 1SEND_F0 1B0"})),
      StatusIs(kInvalid, HasSubstr("rank 1 step 1: 1SEND_F0 is not a valid message: the last "
                                   "stage sends no forward output")));
  // The turn of a V stays on one rank.
  EXPECT_THAT(
      Verify(Make(*StageLayout::VShape(2), 1, {"0F0 3F0 3B0 0B0", "1F0 1SEND_F0 2F0 2B0 1B0"})),
      StatusIs(kInvalid, HasSubstr("1SEND_F0 is not a valid message: its peer stage 2 is on "
                                   "the same rank 1, no message is needed")));
  EXPECT_THAT(Verify(Make(two, 1, {"0F0 0B0"})),
              StatusIs(kInvalid, HasSubstr("schedule \"hand\" has 1 rank rows, its layout loop p=2 "
                                           "v=1 has 2 ranks")));
  EXPECT_THAT(Verify(Make(two, 0, {"", ""})),
              StatusIs(kInvalid, HasSubstr("has num_microbatches=0 with 2 stages")));
}

// A hand-written V-shape schedule: the turn needs no message, and rank 0 holds both
// the first and the last stage.
TEST(VerifierTest, HandWrittenVShape) {
  const Schedule s = Make(*StageLayout::VShape(2), 1,
                          {"0F0 0SEND_F0 3RECV_F0 3F0 3B0 3SEND_B0 0RECV_B0 0B0",
                           "1RECV_F0 1F0 2F0 2SEND_F0 2RECV_B0 2B0 1B0 1SEND_B0"});
  LOOM_EXPECT_OK(Verify(s));
}

// The grid of a long schedule shows a window around the problem, not every step.
TEST(VerifierTest, ErrorGridIsWindowed) {
  Schedule s = *Lower(*Make1F1BSchedule(4, 32));
  std::vector<Action>& rank2 = s.ranks[2];
  std::iter_swap(std::find(rank2.begin(), rank2.end(), *ParseAction("2F20")),
                 std::find(rank2.begin(), rank2.end(), *ParseAction("2RECV_F20")));
  EXPECT_THAT(Verify(s),
              StatusIs(kInvalid, AllOf(HasSubstr("(2F20) needs 2RECV_F20 before it"),
                                       HasSubstr(" of 0-191)"), HasSubstr(">2F20<"),
                                       HasSubstr(">2RECV_F20<"), Not(HasSubstr(" 0F0 ")))));
}

}  // namespace
}  // namespace loom
