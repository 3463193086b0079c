// The algorithm table: which algorithms implement which collective, as functions
// over a CallContext. The Communicator looks algorithms up here; the cost model
// prices the same set; collective_bench's --algo names them.
//
// Example:
//   AlgorithmsFor(CollectiveKind::kBroadcast);   // {kRing, kBinomialTree, kDirect}
//   LOOM_ASSIGN_OR_RETURN(AlgorithmFn fn, FindAlgorithm(CollectiveKind::kAllReduce, Algorithm::kRing));
//   LOOM_RETURN_IF_ERROR(fn(ctx, args));
//   FindAlgorithm(CollectiveKind::kAllToAll, Algorithm::kBinomialTree);
//       // InvalidArgument: all_to_all has no binomial_tree algorithm; it has pairwise
#ifndef LOOM_COLLECTIVES_ALGORITHM_REGISTRY_H_
#define LOOM_COLLECTIVES_ALGORITHM_REGISTRY_H_

#include <vector>

#include "absl/status/statusor.h"
#include "collectives/collective_kind.h"
#include "collectives/internal/call_context.h"

namespace loom {

using AlgorithmFn = absl::Status (*)(const collectives_internal::CallContext&,
                                     const collectives_internal::CollectiveArgs&);

// AlgorithmsFor lists the algorithms that implement `kind` (never kAuto, nor
// kNative, which runs the transport's own collectives when a call names it).
std::vector<Algorithm> AlgorithmsFor(CollectiveKind kind);

// FindAlgorithm returns the function of `algorithm` for `kind`; InvalidArgument
// naming both and the algorithms `kind` has when there is none (kAuto included:
// the selector resolves it first).
absl::StatusOr<AlgorithmFn> FindAlgorithm(CollectiveKind kind, Algorithm algorithm);

// AllReduceRunsByNodes: whether the table's all-reduce of `algorithm` takes the
// node-aware form (hierarchical.h, ByNodes) on several ranks per node: direct, the
// binomial tree and the double binary tree.
bool AllReduceRunsByNodes(Algorithm algorithm);

}  // namespace loom

#endif  // LOOM_COLLECTIVES_ALGORITHM_REGISTRY_H_
