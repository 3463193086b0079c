// Verify: proves that a pipeline schedule computes every microbatch's forward and
// backward (or, for a forward-only schedule, its forward) exactly once, in
// dependency order, and cannot deadlock.
//
// What is checked, in this order (the first failure is returned):
//  1. Shape and placement: one row per rank of the layout; every action's stage and
//     microbatch in range and on the rank that holds its stage; messages only
//     between stages on different ranks; no action twice (a duplicated microbatch).
//  2. Completeness: every (stage, microbatch) has one F and one backward, either B
//     or I and W. A schedule with no B, I or W on any rank is forward-only (an
//     evaluation, MakeForwardOnlySchedule): every (stage, microbatch) has one F,
//     and no gradient message (SEND_B, RECV_B) may appear; one with some backwards
//     but not all is incomplete. In a lowered schedule every needed send has its
//     matching receive.
//  3. Local dependency order, on each rank: F(s, mb) after its input (F(s-1, mb)
//     on the same rank, else RECV_F(s, mb)); B or I of (s, mb) after F(s, mb) and
//     after its output gradient (the B or I of (s+1, mb) on the same rank, else
//     RECV_B(s, mb)); W after I; a send after the action that produced its data.
//     Together with the messages this orders F(s, mb) after F(s-1, mb), and the
//     backward of (s, mb) after that of (s+1, mb), across ranks too.
//  4. Deadlock freedom, by running the ranks' programs, under two point-to-point
//     semantics:
//       buffered    a send never blocks; a receive blocks until its send ran.
//       rendezvous  a send and its receive complete together, once both ranks
//                   have reached them; either blocks until then.
//     Every rank whose next action can run advances; when none can and some rank
//     is not done, that is a deadlock. One run decides for every timing: a rank's
//     program is fixed, and an action that can run stays runnable until it runs
//     (no other rank's progress can take a message away, since each message has
//     exactly one sender and one receiver), so all executions reach the same end.
// A compute-only schedule is first lowered (Lower, lowering.h) and the lowered form
// is checked, so Verify sees the messages that would run.
//
// Errors carry a grid of the schedule (one row per rank, one column per step,
// windowed around the problem) with the offending cells drawn as ">1F3<".
// Shape, placement, completeness and order problems are InvalidArgument;
// deadlocks are FailedPrecondition and mark where every stuck rank waits.
//
// Example:
//   LOOM_RETURN_IF_ERROR(Verify(*Make1F1BSchedule(4, 8)));   // OK
//   Schedule broken = *Lower(*Make1F1BSchedule(2, 2));
//   // rank 1: 1RECV_F0 1F0 1B0 1RECV_F1 1SEND_B0 1F1 ...; send B0 first instead:
//   std::swap(broken.ranks[1][3], broken.ranks[1][4]);
//   Verify(broken);
//   // FailedPrecondition: deadlock under rendezvous semantics (a send and its
//   // receive complete together): no rank can progress; rank 0 waits at rank 0
//   // step 3 (0SEND_F1) for rank 1 step 4 (1RECV_F1); rank 1 waits at rank 1 step 3
//   // (1SEND_B0) for rank 0 step 4 (0RECV_B0)
//   // 1f1b: loop p=2 v=1, 2 microbatches
//   // step    0          1          2     3          4          5     6  ...
//   // rank 0  0F0        0SEND_F0   0F1  >0SEND_F1<  0RECV_B0   0B0   0RECV_B1 ...
//   // rank 1  1RECV_F0   1F0        1B0  >1SEND_B0<  1RECV_F1   1F1   1B1 ...
//   VerifyOptions buffered;
//   buffered.check_rendezvous = false;
//   Verify(broken, buffered);                                 // OK: sends never block
//   Verify(*MakeForwardOnlySchedule(4, 8));                   // OK: F's only
//   Schedule partial = *Make1F1BSchedule(2, 2);
//   partial.ranks[0].pop_back();                              // drop 0B1
//   Verify(partial);
//   // InvalidArgument: stage 0 microbatch 1 has no backward: neither 0B1 nor 0I1 is
//   // on rank 0
#ifndef LOOM_PIPELINE_VERIFIER_H_
#define LOOM_PIPELINE_VERIFIER_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "pipeline/schedule.h"

namespace loom {

enum class P2PSemantics {
  kBuffered,    // Sends never block (eager, or isend without waiting).
  kRendezvous,  // A send completes only together with its receive.
};

// P2PSemanticsName returns "buffered" or "rendezvous".
absl::string_view P2PSemanticsName(P2PSemantics semantics);

struct VerifyOptions {
  // Which semantics the deadlock check runs under. Rendezvous is the stricter: a
  // schedule free of deadlock under it is free of deadlock under buffered too.
  bool check_buffered = true;
  bool check_rendezvous = true;
};

// Verify runs the checks above. OK when the schedule passes all of them; otherwise
// InvalidArgument or FailedPrecondition as described, naming the first offending
// action and its rank, with a grid.
absl::Status Verify(const Schedule& schedule, const VerifyOptions& options = {});

}  // namespace loom

#endif  // LOOM_PIPELINE_VERIFIER_H_
