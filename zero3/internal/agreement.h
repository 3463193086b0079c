// Agreement: where a data-parallel rank's ZeRO engine stands, exchanged at each
// of its sequence points (the start of a pass, the gradient reduction of a step,
// a whole-model gather), so that ranks that disagree fail at once, every one of
// them with the same error naming both positions, instead of pairing the wrong
// collectives (a rank that runs one microbatch more gathers its next bucket from
// the others' next step: a silent mismatch) or waiting out a deadline.
//
// Example (each rank, on the engine's communication thread):
//   SyncPoint here;
//   here.steps = 3;
//   here.kind = SyncPoint::kPass;
//   here.pass = 1;                 // a forward pass
//   here.passes_since_step = 2;
//   LOOM_RETURN_IF_ERROR(CheckAgreement(dp, here, names));
//   // rank 1 at its step's reduction instead:
//   // FailedPrecondition: "the data-parallel ranks disagree: rank 0 is after 3 steps,
//   // starting a forward pass with 2 backward passes since the last step; rank 1 is
//   // after 3 steps, reducing the gradients of 2 backward passes ..."
// The exchange is one all-to-all (each rank sends its point to every rank), a
// collective kind the engine uses for nothing else, so its few bytes stay apart
// from the data's in the communicator's counters.
#ifndef LOOM_ZERO3_INTERNAL_AGREEMENT_H_
#define LOOM_ZERO3_INTERNAL_AGREEMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/communicator.h"

namespace loom {
namespace zero3_internal {

struct SyncPoint {
  enum Kind : int64_t { kPass = 1, kReduce = 2, kGatherAll = 3 };
  int64_t steps = 0;              // Steps taken
  int64_t kind = kPass;
  int64_t pass = 0;               // kPass: the pass starting (1 forward, 2 backward,
                                  // 3 gradients, 4 regather: Zero3Pass's values)
  int64_t passes_since_step = 0;  // backward passes since the last step
  int64_t previous_pass = 0;      // the last pass that ended (0: none since Create)
  // Whether `used` is compared: the buckets the previous pass used (acquired or
  // gave gradients to), one bit each; the same length on every rank.
  bool compare_use = false;
  std::vector<uint64_t> used;

  std::vector<int64_t> Encode() const;
  static SyncPoint Decode(absl::Span<const int64_t> words);
  // Describe: "after 3 steps, starting a forward pass with 2 backward passes
  // since the last step".
  std::string Describe() const;
};

// UsedWords: the bitmap length for `buckets` buckets.
int64_t UsedWords(int64_t buckets);

// CheckAgreement exchanges `mine` over `dp` and compares every rank's point
// with rank 0's: FailedPrecondition naming the first rank that differs and both
// points (with compare_use, the first bucket one of them did not use, by
// `bucket_names`), the same on every rank; the collective's error if it failed.
absl::Status CheckAgreement(Communicator& dp, const SyncPoint& mine,
                            const std::vector<std::string>& bucket_names);

}  // namespace zero3_internal
}  // namespace loom

#endif  // LOOM_ZERO3_INTERNAL_AGREEMENT_H_
