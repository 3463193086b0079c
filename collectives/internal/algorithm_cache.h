#ifndef LOOM_COLLECTIVES_INTERNAL_ALGORITHM_CACHE_H_
#define LOOM_COLLECTIVES_INTERNAL_ALGORITHM_CACHE_H_

// The Communicator's memo of its algorithm choices and their implementations
// (internal: the Communicator's own state, kept out of its public header).
//
//   AlgorithmCache cache;
//   const Algorithm a = cache.Choose(kind, bytes, [&] { return Explain(kind, bytes).chosen; });
//   LOOM_ASSIGN_OR_RETURN(AlgorithmFn fn, cache.Find(kind, a));
//
// Pricing every candidate costs more than a small message's whole call, and training
// loops repeat the same (collective, bytes): the choice is computed once per key, and
// the last key is checked before the map. Looking an implementation up again (a
// StatusOr made and checked) showed in every small call: the last one is kept.
// Not thread-safe: a Communicator is called from one thread at a time.

#include <cstddef>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "collectives/algorithm_registry.h"
#include "collectives/collective_kind.h"

namespace loom {
namespace collectives_internal {

class AlgorithmCache {
 public:
  // The algorithm for (kind, bytes): `choose()` the first time, the remembered one after.
  template <typename ChooseFn>
  Algorithm Choose(CollectiveKind kind, size_t bytes, ChooseFn choose) {
    const Key key{kind, bytes};
    if (last_choice_.has_value() && last_choice_->first == key) return last_choice_->second;
    Algorithm chosen;
    if (const auto it = choices_.find(key); it != choices_.end()) {
      chosen = it->second;
    } else {
      chosen = choose();
      choices_.emplace(key, chosen);
    }
    last_choice_.emplace(key, chosen);
    return chosen;
  }

  // The implementation of (kind, algorithm) (FindAlgorithm's error when there is none).
  absl::StatusOr<AlgorithmFn> Find(CollectiveKind kind, Algorithm algorithm) {
    if (found_fn_ == nullptr || kind != found_kind_ || algorithm != found_algorithm_) {
      absl::StatusOr<AlgorithmFn> fn = FindAlgorithm(kind, algorithm);
      if (!fn.ok()) return fn.status();
      found_fn_ = *fn;
      found_kind_ = kind;
      found_algorithm_ = algorithm;
    }
    return found_fn_;
  }

 private:
  using Key = std::pair<CollectiveKind, size_t>;
  absl::flat_hash_map<Key, Algorithm> choices_;
  std::optional<std::pair<Key, Algorithm>> last_choice_;
  CollectiveKind found_kind_ = CollectiveKind::kAllReduce;
  Algorithm found_algorithm_ = Algorithm::kAuto;
  AlgorithmFn found_fn_ = nullptr;
};

}  // namespace collectives_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_INTERNAL_ALGORITHM_CACHE_H_
