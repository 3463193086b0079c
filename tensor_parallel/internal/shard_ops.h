// The single-mesh-dimension transitions of Redistribute (distributed_tensor.h), each
// on one rank's local tensor and the communicator of that mesh dimension: the
// collective or local computation and the packing around it. Shard pieces follow
// ShardExtentOf (placement.h); the rank's piece is comm.rank().
//
// Uneven pieces: all-gather and reduce-scatter lay the pieces out contiguously in
// rank order and go through padded_collectives.h, which pads them to the largest
// one for the communicator's equal-block algorithms; all-to-all sends exact pieces
// with AllToAllV, which needs no padding.
#ifndef LOOM_TENSOR_PARALLEL_INTERNAL_SHARD_OPS_H_
#define LOOM_TENSOR_PARALLEL_INTERNAL_SHARD_OPS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "core/reduce_op.h"
#include "tensor_parallel/placement.h"
#include "core/tensor.h"

namespace loom {
namespace tensor_parallel_internal {

// Pieces returns the extents of a dimension of `size` split `shards` ways.
std::vector<ShardExtent> Pieces(int64_t size, int shards, ShardRule rule);

// SliceAlongDim copies `piece` of dimension `dim` (Replicate -> Shard).
absl::StatusOr<Tensor> SliceAlongDim(const Tensor& local, int dim, ShardExtent piece);

// ToPartial applies the Replicate -> Partial(op) rule for the rank at `coordinate`:
// sum keeps the values at coordinate 0 and zeros elsewhere, prod ones elsewhere;
// min, max and avg keep the values everywhere.
absl::StatusOr<Tensor> ToPartial(const Tensor& local, ReduceOp op, int coordinate);

// AllGatherAlongDim joins every rank's piece of dimension `dim`, whose whole extent
// is `full_extent` (Shard -> Replicate). Internal when the local piece is not the
// one ShardExtentOf gives this rank.
absl::StatusOr<Tensor> AllGatherAlongDim(const Tensor& local, int dim, int64_t full_extent,
                                         ShardRule rule, Communicator& comm);

// AllReduceTensor reduces the full local tensors with `op` (Partial -> Replicate).
absl::StatusOr<Tensor> AllReduceTensor(const Tensor& local, ReduceOp op, Communicator& comm);

// ReduceScatterAlongDim reduces with `op` and keeps this rank's piece of `dim`
// (Partial -> Shard).
absl::StatusOr<Tensor> ReduceScatterAlongDim(const Tensor& local, int dim, ShardRule rule,
                                             ReduceOp op, Communicator& comm);

// AllToAllDims turns a piece of `from_dim` (whole extent `from_full_extent`) into a
// piece of `to_dim` (whole locally) (Shard(from_dim) -> Shard(to_dim)).
absl::StatusOr<Tensor> AllToAllDims(const Tensor& local, int from_dim, int64_t from_full_extent,
                                    int to_dim, ShardRule rule, Communicator& comm);

}  // namespace tensor_parallel_internal
}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_INTERNAL_SHARD_OPS_H_
