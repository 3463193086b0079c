#include "collectives/collective_kind.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace loom {
namespace {

constexpr CollectiveKind kKinds[] = {
    CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter, CollectiveKind::kAllGather,
    CollectiveKind::kBroadcast, CollectiveKind::kReduce,        CollectiveKind::kAllToAll,
    CollectiveKind::kAllToAllV, CollectiveKind::kGather,        CollectiveKind::kScatter,
    CollectiveKind::kBarrier,   CollectiveKind::kSendRecv,
};

constexpr Algorithm kAlgorithms[] = {
    Algorithm::kRing,   Algorithm::kBinomialTree, Algorithm::kDoubleBinaryTree,
    Algorithm::kHalvingDoubling, Algorithm::kDirect, Algorithm::kPairwise,
    Algorithm::kHierarchical, Algorithm::kNative,
};

}  // namespace

absl::Span<const CollectiveKind> AllCollectiveKinds() { return kKinds; }

absl::string_view CollectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kReduce: return "reduce";
    case CollectiveKind::kAllToAll: return "all_to_all";
    case CollectiveKind::kAllToAllV: return "all_to_allv";
    case CollectiveKind::kGather: return "gather";
    case CollectiveKind::kScatter: return "scatter";
    case CollectiveKind::kBarrier: return "barrier";
    case CollectiveKind::kSendRecv: return "send_recv";
  }
  return "unknown";
}

absl::StatusOr<CollectiveKind> ParseCollectiveKind(absl::string_view name) {
  std::vector<std::string> names;
  for (CollectiveKind kind : kKinds) {
    if (CollectiveKindName(kind) == name) return kind;
    names.emplace_back(CollectiveKindName(kind));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown collective \"", name,
                                                 "\"; expected one of ",
                                                 absl::StrJoin(names, ", ")));
}

std::ostream& operator<<(std::ostream& os, CollectiveKind kind) {
  return os << CollectiveKindName(kind);
}

absl::Span<const Algorithm> AllAlgorithms() { return kAlgorithms; }

absl::string_view AlgorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kRing: return "ring";
    case Algorithm::kBinomialTree: return "binomial_tree";
    case Algorithm::kDoubleBinaryTree: return "double_binary_tree";
    case Algorithm::kHalvingDoubling: return "halving_doubling";
    case Algorithm::kDirect: return "direct";
    case Algorithm::kPairwise: return "pairwise";
    case Algorithm::kHierarchical: return "hierarchical";
    case Algorithm::kNative: return "native";
  }
  return "unknown";
}

absl::StatusOr<Algorithm> ParseAlgorithm(absl::string_view name) {
  if (name == "tree") return Algorithm::kBinomialTree;
  if (name == "dbtree") return Algorithm::kDoubleBinaryTree;
  if (name == "auto") return Algorithm::kAuto;
  std::vector<std::string> names = {"auto"};
  for (Algorithm algorithm : kAlgorithms) {
    if (AlgorithmName(algorithm) == name) return algorithm;
    names.emplace_back(AlgorithmName(algorithm));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown algorithm \"", name,
                                                 "\"; expected one of ",
                                                 absl::StrJoin(names, ", "),
                                                 " (or tree, dbtree)"));
}

std::ostream& operator<<(std::ostream& os, Algorithm algorithm) {
  return os << AlgorithmName(algorithm);
}

}  // namespace loom
