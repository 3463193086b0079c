#include "tensor_parallel/internal/transition_planner.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"

namespace loom {
namespace tensor_parallel_internal {
namespace {

// Pending: per tensor dimension, the mesh dimensions still to pop (ascending; the
// last is the top) and still to push (ascending; the first goes next).
struct Pending {
  std::vector<std::vector<int>> pops;
  std::vector<std::vector<int>> pushes;
};

std::vector<int> Stack(absl::Span<const Placement> placements, int tensor_dim) {
  std::vector<int> stack;
  for (size_t m = 0; m < placements.size(); ++m) {
    if (placements[m].is_shard() && placements[m].dim() == tensor_dim) {
      stack.push_back(static_cast<int>(m));
    }
  }
  return stack;
}

Pending ComputePending(absl::Span<const Placement> current, absl::Span<const Placement> target,
                       int tensor_rank) {
  Pending pending;
  for (int d = 0; d < tensor_rank; ++d) {
    const std::vector<int> now = Stack(current, d);
    const std::vector<int> then = Stack(target, d);
    size_t common = 0;
    while (common < now.size() && common < then.size() && now[common] == then[common]) ++common;
    pending.pops.emplace_back(now.begin() + static_cast<std::ptrdiff_t>(common), now.end());
    pending.pushes.emplace_back(then.begin() + static_cast<std::ptrdiff_t>(common), then.end());
  }
  return pending;
}

class Chooser {
 public:
  Chooser(absl::Span<const Placement> current, absl::Span<const Placement> target,
          int tensor_rank)
      : cur_(current), to_(target), pending_(ComputePending(current, target, tensor_rank)) {}

  std::optional<Transition> Next() const {
    const int n = static_cast<int>(cur_.size());
    // Local slices, outermost first.
    for (int m = 0; m < n; ++m) {
      if (cur_[m].is_replicate() && PushReady(m)) return Make(m, to_[m]);
    }
    // Reductions and all-to-alls.
    for (int m = 0; m < n; ++m) {
      const Placement& c = cur_[m];
      const Placement& t = to_[m];
      if (c.is_partial() && t.is_shard() && PushReady(m)) return Make(m, t);
      if (c.is_partial() && !t.is_shard() && c != t) return Make(m, Placement::Replicate());
      if (c.is_shard() && t.is_shard() && c.dim() != t.dim() && PopReady(m) && PushReady(m)) {
        return Make(m, t);
      }
    }
    // Gathers that un-shard for good (or for a later re-shard of the same dim),
    // innermost first.
    for (int m = n - 1; m >= 0; --m) {
      const Placement& t = to_[m];
      if (PopReady(m) && !(t.is_shard() && t.dim() != cur_[m].dim())) {
        return Make(m, Placement::Replicate());
      }
    }
    // Blocked all-to-alls: gather now, slice later.
    for (int m = n - 1; m >= 0; --m) {
      if (PopReady(m)) return Make(m, Placement::Replicate());
    }
    for (int m = 0; m < n; ++m) {
      if (cur_[m].is_partial() && cur_[m] != to_[m]) return Make(m, Placement::Replicate());
    }
    for (int m = 0; m < n; ++m) {
      if (cur_[m].is_replicate() && to_[m].is_partial()) return Make(m, to_[m]);
    }
    return std::nullopt;
  }

 private:
  Transition Make(int m, Placement to) const { return Transition{m, cur_[m], to}; }

  // PopReady: mesh dim m shards a tensor dim, must stop, and is the top of its stack.
  bool PopReady(int m) const {
    if (!cur_[m].is_shard()) return false;
    const std::vector<int>& pops = pending_.pops[static_cast<size_t>(cur_[m].dim())];
    return !pops.empty() && pops.back() == m;
  }
  // PushReady: mesh dim m must start sharding its target dim, whose stack has
  // nothing left to pop and no lower mesh dim left to push.
  bool PushReady(int m) const {
    if (!to_[m].is_shard()) return false;
    const size_t d = static_cast<size_t>(to_[m].dim());
    return pending_.pops[d].empty() && !pending_.pushes[d].empty() &&
           pending_.pushes[d].front() == m;
  }

  absl::Span<const Placement> cur_;
  absl::Span<const Placement> to_;
  Pending pending_;
};

}  // namespace

absl::StatusOr<std::vector<Transition>> PlanTransitions(absl::Span<const Placement> from,
                                                        absl::Span<const Placement> to,
                                                        int tensor_rank) {
  std::vector<Placement> current(from.begin(), from.end());
  std::vector<Transition> plan;
  // Each mesh dimension pops, pushes, reduces and turns Partial at most once, so a
  // longer plan means a bug; stop rather than loop.
  const size_t limit = 4 * from.size() + 4;
  while (!std::equal(current.begin(), current.end(), to.begin(), to.end())) {
    const std::optional<Transition> next = Chooser(current, to, tensor_rank).Next();
    if (!next.has_value() || plan.size() >= limit) {
      return absl::InternalError(absl::StrCat("PlanTransitions: no order found from ",
                                              PlacementsString(from), " to ",
                                              PlacementsString(to), " (stuck at ",
                                              PlacementsString(current), ")"));
    }
    current[static_cast<size_t>(next->mesh_dim)] = next->to;
    plan.push_back(*next);
  }
  return plan;
}

}  // namespace tensor_parallel_internal
}  // namespace loom
