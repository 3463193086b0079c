// The mismatched-calls suite (testonly): two ranks that disagree on a collective must
// both fail at once, each naming both calls (communicator.h, "Semantics worth
// knowing"), on any backend with a TransportHarness.
//
// Example (in a test of a backend):
//   ShmHarness harness;
//   EXPECT_THAT(collectives_internal::CheckEveryMismatchFailsAtOnce(harness), IsOk());
#ifndef LOOM_COLLECTIVES_INTERNAL_MISMATCH_SUITE_H_
#define LOOM_COLLECTIVES_INTERNAL_MISMATCH_SUITE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collectives/communicator.h"
#include "collectives/transport/transport_harness.h"

namespace loom {
namespace collectives_internal {

// MismatchCall: one of the calls the suite pairs up. Every one moves 256 bytes per
// rank, so no pair is told apart by its size alone.
struct MismatchCall {
  std::string name;   // "all_reduce f32 max"
  std::string shown;  // what the error shows of it: "all_reduce(f32, count=64, max"
  absl::Status (*run)(Communicator& comm);
};

// MismatchCalls: 14 calls: all-reduce with each op (sum, prod, min, max, avg) on f32,
// with sum on i32 and on bf16; broadcast and reduce from root 0 and from root 1;
// all-gather, all-to-all and reduce-scatter.
const std::vector<MismatchCall>& MismatchCalls();

// CheckMismatchFailsAtOnce: in a fresh 2-rank group of `harness`, rank 0 makes call
// `a` and rank 1 call `b` (indices into MismatchCalls(), a != b), with a 60 s call
// deadline. OK when both ranks failed within `bound` with FailedPrecondition
// "mismatched collective calls" showing both calls; otherwise an error naming the
// pair, the rank and what it got. The bound only tells the fingerprint exchange
// (milliseconds) from a wait for the deadline (60 s), so it is a quarter of that
// deadline: a tight wall-clock bound failed under a sanitizer on a loaded 2-core
// machine (CI, once in ~10 runs) where one thread was descheduled for a second.
absl::Status CheckMismatchFailsAtOnce(TransportHarness& harness, int a, int b,
                                      absl::Duration bound);

// CheckEveryMismatchFailsAtOnce runs CheckMismatchFailsAtOnce for every pair of
// MismatchCalls() (91) and returns the first failure.
absl::Status CheckEveryMismatchFailsAtOnce(TransportHarness& harness,
                                           absl::Duration bound = absl::Seconds(15));

}  // namespace collectives_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_INTERNAL_MISMATCH_SUITE_H_
