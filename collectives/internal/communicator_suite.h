// The Communicator's gloo-style suite body (testonly), shared by the backends that
// run real processes (shm, mpi): on one rank's communicator, every algorithm of one
// collective at the counts, in and out of place, f32 and bf16, each result
// checked against the reference of algorithm_testing.h.
//
// Example (inside a harness body, on every rank):
//   LOOM_ASSIGN_OR_RETURN(auto comm, Communicator::Create(transport));
//   LOOM_RETURN_IF_ERROR(CheckEveryAlgorithmAndCount(*comm, CollectiveKind::kAllReduce));
#ifndef LOOM_COLLECTIVES_INTERNAL_COMMUNICATOR_SUITE_H_
#define LOOM_COLLECTIVES_INTERNAL_COMMUNICATOR_SUITE_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/collective_kind.h"
#include "collectives/communicator.h"

namespace loom {
namespace collectives_internal {

// SuiteKinds: the collectives the suite covers (all_reduce, reduce_scatter,
// all_gather, broadcast, all_to_all).
absl::Span<const CollectiveKind> SuiteKinds();

// CheckEveryAlgorithmAndCount runs AlgorithmsFor(kind) and then `extra` (such as
// Algorithm::kNative) on `comm` over counts {0, 1, 3, n-1, 1000, 65537}: odd
// positions in place, every third bf16 (f32 otherwise), broadcast from a root that
// moves. Returns the first failure, naming the algorithm and count.
absl::Status CheckEveryAlgorithmAndCount(Communicator& comm, CollectiveKind kind,
                                         absl::Span<const Algorithm> extra = {});

// The same over `counts` (elements per rank's block) in place of the default ones;
// the i-th count runs in place when i is odd and in bf16 when i % 3 == 2.
absl::Status CheckEveryAlgorithmAndCount(Communicator& comm, CollectiveKind kind,
                                         absl::Span<const Algorithm> extra,
                                         absl::Span<const size_t> counts);

// CheckAllocatedBuffers runs every algorithm of all-reduce (in and out of place),
// reduce-scatter and all-gather, f32, over counts {0, 3, 65537, 300001} with inputs
// and outputs in buffers from comm.AllocateBuffer (on every rank, or with `mixed`
// on even ranks only: the others pass ordinary memory, so a zero-copy sender meets
// an ordinary receiver and the other way round), checking each result against the
// reference. Also checks that every allocated buffer is page-aligned and zeroed and
// that its zero_copy() is `expect_zero_copy`. Under a sanitizer 300001 runs on
// all-reduce only.
absl::Status CheckAllocatedBuffers(Communicator& comm, bool mixed, bool expect_zero_copy);

}  // namespace collectives_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_INTERNAL_COMMUNICATOR_SUITE_H_
