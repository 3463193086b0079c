// PlanTransitions orders a change of placements into single-mesh-dimension
// transitions, each of which Redistribute runs with one collective or local step.
//
// The order keeps every intermediate layout valid under nested sharding
// (distributed_tensor.h): for each tensor dimension the mesh dimensions sharding it
// form a stack, outermost (lowest mesh dimension) at the bottom. A transition may
// only pop the top of a stack (stop sharding) or push a mesh dimension above the
// top (start sharding). The common bottom of the current and target stacks stays;
// the rest is popped innermost first, then the target's pushed outermost first.
//
// Among the transitions that are ready, local slices come first (they shrink the
// data every later step moves), then reduce-scatters, all-reduces and all-to-alls,
// then all-gathers, and Replicate -> Partial last of all, once no Partial remains to
// be reduced (so a layout never mixes pending reductions). Shard(d) -> Partial goes
// through Replicate, and Partial(a) -> Partial(b) through Replicate. An all-to-all
// that two stacks block on each other ([S(0), S(1)] -> [S(1), S(0)]) is split into
// an all-gather and a later slice.
#ifndef LOOM_TENSOR_PARALLEL_INTERNAL_TRANSITION_PLANNER_H_
#define LOOM_TENSOR_PARALLEL_INTERNAL_TRANSITION_PLANNER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensor_parallel/placement.h"

namespace loom {
namespace tensor_parallel_internal {

// One transition: mesh dimension `mesh_dim` goes from `from` to `to`, one of
// S->R, P->R, P->S, S->S (different dims), R->S, R->P.
struct Transition {
  int mesh_dim = 0;
  Placement from = Placement::Replicate();
  Placement to = Placement::Replicate();
};

// PlanTransitions returns the transitions from `from` to `to` (validated
// placements of equal length over a tensor of rank `tensor_rank`), empty when they
// are equal. Internal if no order is found (a bug).
absl::StatusOr<std::vector<Transition>> PlanTransitions(absl::Span<const Placement> from,
                                                        absl::Span<const Placement> to,
                                                        int tensor_rank);

}  // namespace tensor_parallel_internal
}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_INTERNAL_TRANSITION_PLANNER_H_
