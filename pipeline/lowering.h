// Lower: turns a compute-only schedule (F, B, I, W) into the program each rank
// runs, by inserting the point-to-point messages between stages on different ranks.
//
// Placement rule. The messages are the results a compute action hands to a stage
// on another rank:
//   F(s, mb)           when stage s+1 lives on another rank: SEND_F(s, mb) on this
//                      rank, RECV_F(s+1, mb) on stage s+1's, consumed by F(s+1, mb);
//   B(s, mb), I(s, mb) when stage s-1 lives on another rank: SEND_B(s, mb) on this
//                      rank, RECV_B(s-1, mb) on stage s-1's, consumed by the B or I
//                      of (s-1, mb).
// W never communicates (its output gradient came with the I), and a stage
// transition within one rank (the turn of a V-shape layout, or p = 1) needs no
// message. A forward-only schedule (no B, I or W at all, see schedule.h) so gets
// only SEND_F and RECV_F. Then:
//   - every send sits right after its producer: at most receives come between;
//   - every receive sits right before its consumer (at most sends and other
//     receives between), unless that would deadlock with blocking sends, in which
//     case it sits earlier, where its rank stands when the sender gets to the send.
// Exactly: Lower runs the compute lists under rendezvous semantics (a send
// completes together with its receive) and writes every action down as it happens:
//   1. each rank runs its computes until it has a send to make (right after the
//      compute that produced it) or its next compute lacks its input;
//   2. the pending sends whose receivers have their consumer next are delivered:
//      the send is appended to the sender's program, the receive to the
//      receiver's. A rank that both sends and receives this way sends first (a
//      blocking executor then does not hold up the next rank), except in a cycle
//      of such ranks, which its lowest rank breaks by sending first; back to 1;
//   3. when nothing else can happen, the pending send of the lowest rank is
//      delivered all the same: its receive lands ahead of its consumer, where the
//      receiver is blocked (on a send of its own, or on another input); back to 1;
//   4. with no send pending either, the compute order itself is circular: the rest
//      is written with sends right after producers and receives right before
//      consumers, and Verify reports the deadlock.
// Every program is then a subsequence of one global order of events in which each
// send is next to its receive, so the schedule cannot deadlock under rendezvous
// semantics, nor under buffered ones. GPipe, 1F1B and ZB-H1 never need step 3:
// all their receives sit right before their consumers. Interleaved 1F1B and ZB-V
// do: with sends pinned after their producers, each has a pair of ranks that both
// send before they receive (interleaved 1F1B on 2 ranks, 4 microbatches: rank 0
// sends 2B0's gradient before 2B1 needs 3B1's, while rank 1 sends 3B1's before 1B0
// needs 2B0's), so one receive must move up (there: 1RECV_B0, before 1F2). An
// executor that posts receives asynchronously (irecv, waited for by the consumer,
// as PyTorch's pipelining runtime does) loses nothing by that; one with blocking
// receives waits a little earlier.
//
// Example (1F1B on 2 ranks, 2 microbatches):
//   LOOM_ASSIGN_OR_RETURN(Schedule lowered, Lower(*Make1F1BSchedule(2, 2)));
//   // rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
//   // rank 1: 1RECV_F0 1F0 1B0 1RECV_F1 1SEND_B0 1F1 1B1 1SEND_B1
//   // Rank 1 takes F1 before it sends B0 (both between 1B0 and 1F1): rank 0 is
//   // sending F1 then, and would wait forever for B0 the other way round.
#ifndef LOOM_PIPELINE_LOWERING_H_
#define LOOM_PIPELINE_LOWERING_H_

#include "absl/status/statusor.h"
#include "pipeline/schedule.h"

namespace loom {

// Lower returns `schedule` with its messages inserted as described above; a
// schedule that needs none (one rank) comes back unchanged. InvalidArgument, with
// a grid of the schedule, when it already has messages, or when an action is out
// of range, on the wrong rank, duplicated, or a (stage, microbatch) lacks its
// forward, or its backward while another (stage, microbatch) has one.
absl::StatusOr<Schedule> Lower(const Schedule& schedule);

}  // namespace loom

#endif  // LOOM_PIPELINE_LOWERING_H_
