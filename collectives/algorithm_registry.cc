#include "collectives/algorithm_registry.h"

#include <array>
#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/binomial_tree.h"
#include "collectives/direct.h"
#include "collectives/double_binary_tree.h"
#include "collectives/halving_doubling.h"
#include "collectives/hierarchical.h"
#include "collectives/native.h"
#include "collectives/pairwise.h"
#include "collectives/ring.h"

namespace loom {
namespace {

using namespace collectives_internal;  // NOLINT: the table names every algorithm

struct Entry {
  CollectiveKind kind;
  Algorithm algorithm;
  AlgorithmFn fn;
  // fn is ByNodes<flat> (hierarchical.h): node-aware on several ranks per node.
  bool by_nodes = false;
};

// Listed per kind from the bandwidth-oriented to the latency-oriented algorithms.
// The all-reduces that know nothing of nodes run by nodes on several ranks per node
// (hierarchical.h, ByNodes); the ring and halving-doubling already keep the most
// traffic inside a node when a node's ranks are consecutive.
constexpr Entry kTable[] = {
    {CollectiveKind::kAllReduce, Algorithm::kRing, RingAllReduce},
    {CollectiveKind::kAllReduce, Algorithm::kHalvingDoubling, HalvingDoublingAllReduce},
    {CollectiveKind::kAllReduce, Algorithm::kDoubleBinaryTree, ByNodes<DoubleBinaryTreeAllReduce>, true},
    {CollectiveKind::kAllReduce, Algorithm::kHierarchical, HierarchicalAllReduce},
    {CollectiveKind::kAllReduce, Algorithm::kBinomialTree, ByNodes<BinomialAllReduce>, true},
    {CollectiveKind::kAllReduce, Algorithm::kDirect, ByNodes<DirectAllReduce>, true},
    {CollectiveKind::kReduceScatter, Algorithm::kRing, RingReduceScatter},
    {CollectiveKind::kReduceScatter, Algorithm::kHalvingDoubling, HalvingDoublingReduceScatter},
    {CollectiveKind::kReduceScatter, Algorithm::kDirect, DirectReduceScatter},
    {CollectiveKind::kAllGather, Algorithm::kRing, RingAllGather},
    {CollectiveKind::kAllGather, Algorithm::kHalvingDoubling, HalvingDoublingAllGather},
    {CollectiveKind::kAllGather, Algorithm::kDirect, DirectAllGather},
    {CollectiveKind::kBroadcast, Algorithm::kRing, RingBroadcast},
    {CollectiveKind::kBroadcast, Algorithm::kBinomialTree, BinomialBroadcast},
    {CollectiveKind::kBroadcast, Algorithm::kDirect, DirectBroadcast},
    {CollectiveKind::kReduce, Algorithm::kRing, RingReduce},
    {CollectiveKind::kReduce, Algorithm::kBinomialTree, BinomialReduce},
    {CollectiveKind::kReduce, Algorithm::kDirect, DirectReduce},
    {CollectiveKind::kAllToAll, Algorithm::kPairwise, PairwiseAllToAll},
    {CollectiveKind::kAllToAllV, Algorithm::kPairwise, PairwiseAllToAllV},
    {CollectiveKind::kGather, Algorithm::kBinomialTree, BinomialGather},
    {CollectiveKind::kGather, Algorithm::kDirect, DirectGather},
    {CollectiveKind::kScatter, Algorithm::kBinomialTree, BinomialScatter},
    {CollectiveKind::kScatter, Algorithm::kDirect, DirectScatter},
    {CollectiveKind::kBarrier, Algorithm::kDirect, DirectBarrier},
};

// kTable indexed by kind and algorithm, for FindAlgorithm: the Communicator looks
// an algorithm up in every call, and a scan of the table showed in small calls.
constexpr size_t kKinds = static_cast<size_t>(CollectiveKind::kSendRecv) + 1;
constexpr size_t kAlgorithms = static_cast<size_t>(Algorithm::kHierarchical) + 1;
using Index = std::array<std::array<AlgorithmFn, kAlgorithms>, kKinds>;

constexpr Index MakeIndex() {
  Index index{};
  for (const Entry& entry : kTable) {
    index[static_cast<size_t>(entry.kind)][static_cast<size_t>(entry.algorithm)] = entry.fn;
  }
  return index;
}
constexpr Index kIndex = MakeIndex();

}  // namespace

std::vector<Algorithm> AlgorithmsFor(CollectiveKind kind) {
  std::vector<Algorithm> algorithms;
  for (const Entry& entry : kTable) {
    if (entry.kind == kind) algorithms.push_back(entry.algorithm);
  }
  return algorithms;
}

absl::StatusOr<AlgorithmFn> FindAlgorithm(CollectiveKind kind, Algorithm algorithm) {
  // Native is outside the table: no suite or selector iterates over it.
  if (algorithm == Algorithm::kNative) return FindNative(kind);
  const auto row = static_cast<size_t>(kind);
  const auto column = static_cast<size_t>(algorithm);
  if (row < kKinds && column < kAlgorithms && kIndex[row][column] != nullptr) {
    return kIndex[row][column];
  }
  std::vector<std::string> names;
  for (Algorithm a : AlgorithmsFor(kind)) names.emplace_back(AlgorithmName(a));
  return absl::InvalidArgumentError(absl::StrCat(CollectiveKindName(kind), " has no ",
                                                 AlgorithmName(algorithm), " algorithm; it has ",
                                                 absl::StrJoin(names, ", ")));
}

bool AllReduceRunsByNodes(Algorithm algorithm) {
  for (const Entry& entry : kTable) {
    if (entry.kind == CollectiveKind::kAllReduce && entry.algorithm == algorithm) return entry.by_nodes;
  }
  return false;
}

}  // namespace loom
