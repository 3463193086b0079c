// Placement: how a tensor is laid out along one dimension of a device mesh, as in
// PyTorch's DTensor:
//   Shard(d)     each rank of the mesh dimension holds one contiguous piece of tensor
//                dimension d (pieces in rank order);
//   Replicate()  each rank holds the whole tensor;
//   Partial(op)  each rank holds a tensor of the full shape, and the true value is
//                their reduction with `op` (e.g. the outputs of a row-parallel matmul
//                before their all-reduce).
// A DistributedTensor has one placement per mesh dimension.
//
// Uneven sharding. Dimension d of size n split over k ranks gives rank i the extent
// ShardExtentOf(n, k, i, rule), exactly:
//   kChunk     (torch.chunk, DTensor's default) every piece has ceil(n / k) elements
//              except the last non-empty one, which has the rest; trailing pieces may
//              be empty. n=10, k=4: 3,3,3,1. n=5, k=4: 2,2,1,0. n=2, k=4: 1,1,0,0.
//   kBalanced  (Megatron's and MPI's block distribution) sizes differ by at most one,
//              the larger ones first. n=10, k=4: 3,3,2,2. n=2, k=4: 1,1,0,0.
// Both are contiguous and in rank order, and cover [0, n) exactly; dimensions smaller
// than k leave some ranks empty.
//
// Example:
//   std::vector<Placement> p = {Placement::Replicate(), Placement::Shard(0)};
//   PlacementsString(p);                         // "[R, S(0)]"
//   ParsePlacements("P(sum),S(1)");              // {Partial(kSum), Shard(1)}
//   ShardExtentOf(10, 4, 3, ShardRule::kChunk);     // {offset 9, length 1}
//   ShardExtentOf(10, 4, 3, ShardRule::kBalanced);  // {offset 8, length 2}
#ifndef LOOM_TENSOR_PARALLEL_PLACEMENT_H_
#define LOOM_TENSOR_PARALLEL_PLACEMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/reduce_op.h"

namespace loom {

enum class ShardRule { kChunk, kBalanced };

// ShardRuleName returns "chunk" or "balanced".
absl::string_view ShardRuleName(ShardRule rule);

struct ShardExtent {
  int64_t offset = 0;
  int64_t length = 0;
  friend bool operator==(const ShardExtent& a, const ShardExtent& b) {
    return a.offset == b.offset && a.length == b.length;
  }
};

// ShardExtentOf returns the piece of a dimension of `size` elements that shard
// `index` of `shards` holds under `rule` (see the top of this file). Preconditions
// (checked by ValidateShardArgs): size >= 0, shards >= 1, 0 <= index < shards.
ShardExtent ShardExtentOf(int64_t size, int shards, int index, ShardRule rule);

// ValidateShardArgs returns InvalidArgument naming the values unless size >= 0,
// shards >= 1 and 0 <= index < shards.
absl::Status ValidateShardArgs(int64_t size, int shards, int index);

class Placement {
 public:
  enum class Kind { kReplicate, kShard, kPartial };

  static Placement Replicate() { return Placement(Kind::kReplicate, -1, ReduceOp::kSum); }
  static Placement Shard(int dim) { return Placement(Kind::kShard, dim, ReduceOp::kSum); }
  static Placement Partial(ReduceOp op = ReduceOp::kSum) {
    return Placement(Kind::kPartial, -1, op);
  }

  Kind kind() const { return kind_; }
  bool is_replicate() const { return kind_ == Kind::kReplicate; }
  bool is_shard() const { return kind_ == Kind::kShard; }
  bool is_partial() const { return kind_ == Kind::kPartial; }
  // dim: the sharded tensor dimension (kShard only; -1 otherwise).
  int dim() const { return dim_; }
  // op: the pending reduction (kPartial only).
  ReduceOp op() const { return op_; }

  // ToString returns "R", "S(<dim>)" or "P(<op>)".
  std::string ToString() const;

  friend bool operator==(const Placement& a, const Placement& b) {
    return a.kind_ == b.kind_ && a.dim_ == b.dim_ && (a.kind_ != Kind::kPartial || a.op_ == b.op_);
  }
  friend bool operator!=(const Placement& a, const Placement& b) { return !(a == b); }

 private:
  Placement(Kind kind, int dim, ReduceOp op) : kind_(kind), dim_(dim), op_(op) {}
  Kind kind_;
  int dim_;
  ReduceOp op_;
};

// PlacementsString returns "[R, S(0), P(sum)]".
std::string PlacementsString(absl::Span<const Placement> placements);

// ParsePlacements reads "R,S(0),P(sum)" (spaces and enclosing brackets allowed);
// InvalidArgument naming the item it cannot read.
absl::StatusOr<std::vector<Placement>> ParsePlacements(absl::string_view text);

// ValidatePlacements checks placements against a tensor of rank `tensor_rank` on a
// mesh with `mesh_rank` dimensions: one placement per mesh dimension and every
// Shard dim in [0, tensor_rank). InvalidArgument naming the offending placement.
absl::Status ValidatePlacements(absl::Span<const Placement> placements, int tensor_rank,
                                int mesh_rank);

}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_PLACEMENT_H_
