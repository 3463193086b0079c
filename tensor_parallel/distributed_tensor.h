// DistributedTensor: one rank's shard of a global tensor laid out over a DeviceMesh,
// with one Placement per mesh dimension (placement.h), and Redistribute, which
// changes the placements with the collectives each transition needs.
//
// Nested sharding. When several mesh dimensions shard the same tensor dimension,
// they split it in mesh-dimension order: mesh dimension 0 splits the global extent,
// mesh dimension 1 splits rank's piece of that, and so on (DTensor's rule), each
// split by the tensor's ShardRule. LocalShape and LocalOffset compute the result.
//
// Transitions (one mesh dimension at a time, over that dimension's communicator):
//   Shard(d)  -> Replicate   all-gather along d (uneven pieces padded to the largest
//                            and trimmed after)
//   Partial   -> Replicate   all-reduce with the Partial's op
//   Partial   -> Shard(d)    reduce-scatter along d
//   Shard(i)  -> Shard(j)    all-to-all
//   Replicate -> Shard(d)    local slice, no communication
//   Replicate -> Partial(op) local: for sum the coordinate-0 rank keeps the values and
//                            the others hold 0 (prod: 1); for min, max and avg every
//                            rank keeps the values. Exact, unlike scaling by 1/k
//                            (x / 3 * 3 is not x in floating point).
//   Shard(d)  -> Partial     through Replicate (all-gather, then local)
// A multi-dimension change is planned as a sequence of these (PlanRedistribute), in
// an order that keeps every intermediate layout valid: a mesh dimension whose shard
// is nested inside a later one's is un-sharded after it (gathers from the innermost
// mesh dimension out; shards from the outermost in). The plan prints as one line per
// step.
//
// Example (4 ranks as dp=2 x tp=2; a [6, 4] weight sharded on tp, replicated on dp):
//   LOOM_ASSIGN_OR_RETURN(DistributedTensor w, DistributedTensor::Distribute(
//       full_w, mesh, {Placement::Replicate(), Placement::Shard(0)}));
//   w.local().shape();                 // {3, 4}
//   LOOM_ASSIGN_OR_RETURN(RedistributePlan plan, PlanRedistribute(
//       w.spec(), {Placement::Replicate(), Placement::Shard(1)}));
//   plan.ToString();
//   //   [R, S(0)] -> [R, S(1)] on mesh [dp=2, tp=2], tensor [6,4], chunk
//   //   step 1: mesh dim 1 (tp): S(0) -> S(1)  all-to-all  48 bytes/rank
//   LOOM_ASSIGN_OR_RETURN(DistributedTensor w2, Redistribute(w, {Placement::Replicate(),
//                                                               Placement::Shard(1)}));
//   LOOM_ASSIGN_OR_RETURN(Tensor full, w2.Gather());   // == full_w on every rank
#ifndef LOOM_TENSOR_PARALLEL_DISTRIBUTED_TENSOR_H_
#define LOOM_TENSOR_PARALLEL_DISTRIBUTED_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensor_parallel/device_mesh.h"
#include "tensor_parallel/placement.h"
#include "core/tensor.h"
#include "topology/mesh.h"

namespace loom {

// TensorSpec: what a layout is, without the data: the global shape, dtype,
// placements and shard rule on a mesh. Pure: computing with it needs no
// communication. Mesh has no default, so a spec is built whole:
// TensorSpec{{6, 4}, DType::kF32, placements, ShardRule::kChunk, mesh}.
struct TensorSpec {
  std::vector<int64_t> global_shape;
  DType dtype = DType::kF32;
  std::vector<Placement> placements;  // one per mesh dimension
  ShardRule rule = ShardRule::kChunk;
  Mesh mesh;

  // Validate returns InvalidArgument naming the problem (placements vs the mesh and
  // the tensor's rank, an unsupported dtype, a negative dimension, Partial
  // placements with different ops, whose order of reduction would be undefined).
  absl::Status Validate() const;
  // LocalShape / LocalOffset: the shard held by the rank at `coordinates` (one per
  // mesh dimension, of a valid spec): its shape and where it starts in the global
  // tensor.
  std::vector<int64_t> LocalShape(absl::Span<const int> coordinates) const;
  std::vector<int64_t> LocalOffset(absl::Span<const int> coordinates) const;
};

class DistributedTensor {
 public:
  // FromLocal wraps this rank's shard. InvalidArgument when `spec` is invalid or the
  // local shape or dtype is not what the spec gives this rank (both named).
  static absl::StatusOr<DistributedTensor> FromLocal(Tensor local, TensorSpec spec,
                                                     const DeviceMesh& mesh);

  // Distribute lays out `full` (the whole tensor, identical on every rank) with
  // `placements`: slices for Shard, the values for Replicate, and the Replicate ->
  // Partial rule above for Partial. No communication.
  static absl::StatusOr<DistributedTensor> Distribute(const Tensor& full, const DeviceMesh& mesh,
                                                      std::vector<Placement> placements,
                                                      ShardRule rule = ShardRule::kChunk);

  DistributedTensor(DistributedTensor&&) = default;
  DistributedTensor& operator=(DistributedTensor&&) = default;

  const Tensor& local() const { return local_; }
  Tensor& mutable_local() { return local_; }
  const TensorSpec& spec() const { return spec_; }
  const std::vector<int64_t>& global_shape() const { return spec_.global_shape; }
  const std::vector<Placement>& placements() const { return spec_.placements; }
  const DeviceMesh& device_mesh() const { return *mesh_; }

  // Gather returns the full tensor on every rank (Redistribute to all-Replicate,
  // then the local tensor). Collective over the whole mesh.
  absl::StatusOr<Tensor> Gather() const;

 private:
  DistributedTensor(Tensor local, TensorSpec spec, const DeviceMesh* mesh)
      : local_(std::move(local)), spec_(std::move(spec)), mesh_(mesh) {}

  Tensor local_;
  TensorSpec spec_;
  const DeviceMesh* mesh_;  // Not owned; must outlive the tensor.
};

// One step of a redistribution: one transition on one mesh dimension.
struct RedistributeStep {
  int mesh_dim = 0;
  Placement from = Placement::Replicate();
  Placement to = Placement::Replicate();
  // "all-gather", "all-reduce", "reduce-scatter", "all-to-all", "local slice",
  // "local partial".
  std::string collective;
  // Bytes of the largest rank's input to the step (its local shard, padded where
  // the collective needs equal pieces). The rank at coordinate 0 of every mesh
  // dimension holds the largest shard under both rules, so that is the one counted;
  // the plan is pure and the same on every rank.
  int64_t bytes_per_rank = 0;
};

struct RedistributePlan {
  TensorSpec from;
  std::vector<Placement> to;
  std::vector<RedistributeStep> steps;
  // ToString: a header line, then one line per step (see the example above).
  std::string ToString() const;
};

// PlanRedistribute plans `from` -> `to` (pure). InvalidArgument for invalid specs or
// placements (named); an empty plan when they are equal.
absl::StatusOr<RedistributePlan> PlanRedistribute(const TensorSpec& from,
                                                  absl::Span<const Placement> to);

// Redistribute runs the plan. Collective: every rank of the mesh calls it with the
// same placements. Errors: PlanRedistribute's, and the collectives' (with the step).
absl::StatusOr<DistributedTensor> Redistribute(const DistributedTensor& tensor,
                                               absl::Span<const Placement> to);

}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_DISTRIBUTED_TENSOR_H_
