// CollectiveKind and Algorithm: the names of Loom's collective operations and of the
// algorithms that implement them, as used by the Communicator, the selector, the
// cost model and the tools' flags.
//
// Example:
//   CollectiveKindName(CollectiveKind::kAllReduce);   // "all_reduce"
//   ParseCollectiveKind("reduce_scatter");            // CollectiveKind::kReduceScatter
//   AlgorithmName(Algorithm::kHalvingDoubling);       // "halving_doubling"
//   ParseAlgorithm("tree");                           // Algorithm::kBinomialTree
//   ParseAlgorithm("bogus");  // InvalidArgument: unknown algorithm "bogus"; expected one of ...
#ifndef LOOM_COLLECTIVES_COLLECTIVE_KIND_H_
#define LOOM_COLLECTIVES_COLLECTIVE_KIND_H_

#include <cstdint>
#include <ostream>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace loom {

enum class CollectiveKind : uint8_t {
  kAllReduce,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kReduce,
  kAllToAll,
  kAllToAllV,
  kGather,
  kScatter,
  kBarrier,
  kSendRecv,
};

// AllCollectiveKinds lists every kind, in declaration order.
absl::Span<const CollectiveKind> AllCollectiveKinds();
absl::string_view CollectiveKindName(CollectiveKind kind);
// ParseCollectiveKind accepts the names CollectiveKindName returns; InvalidArgument
// naming the input and the valid names otherwise.
absl::StatusOr<CollectiveKind> ParseCollectiveKind(absl::string_view name);
std::ostream& operator<<(std::ostream& os, CollectiveKind kind);

enum class Algorithm : uint8_t {
  kAuto,              // the selector picks (adaptive cost model)
  kRing,              // pipelined, chunked ring
  kBinomialTree,      // binomial tree: latency-optimal broadcast / reduce
  kDoubleBinaryTree,  // two complementary binary trees, half the data each
  kHalvingDoubling,   // recursive halving-doubling (Rabenseifner)
  kDirect,            // one-shot: every rank talks to every rank at once
  kPairwise,          // pairwise exchange (all-to-all)
  kHierarchical,      // intra-node, then inter-node, then intra-node
  kNative,            // the transport's own collectives (MPI_Allreduce, ...): a baseline,
                      // only by name, never chosen by the selector
};

// AllAlgorithms lists every algorithm except kAuto, in declaration order.
absl::Span<const Algorithm> AllAlgorithms();
absl::string_view AlgorithmName(Algorithm algorithm);
// ParseAlgorithm accepts AlgorithmName's names plus "tree" (binomial) and "dbtree";
// InvalidArgument naming the input and the valid names otherwise.
absl::StatusOr<Algorithm> ParseAlgorithm(absl::string_view name);
std::ostream& operator<<(std::ostream& os, Algorithm algorithm);

}  // namespace loom

#endif  // LOOM_COLLECTIVES_COLLECTIVE_KIND_H_
