// Partition: how ZeRO-3 lays a model's parameters out over a data-parallel group.
//
// Parameters are taken in the order the model first uses them (forward order) and
// packed, back to back, into buckets of about `bucket_numel` elements; a parameter
// larger than that gets a bucket of its own. Each bucket is padded at its end so it
// splits into dp equal shards whose length is a multiple of `align_numel` (so every
// shard starts on a 64-byte boundary for f32 and the collectives move equal blocks).
// Rank r owns elements [r * shard_numel, (r + 1) * shard_numel) of every bucket: the
// layout of an all-gather output and of a reduce-scatter input, so a bucket is
// gathered or its gradients reduced by one collective call, in place.
//
// Small parameters are not sharded: every rank keeps them whole (as DeepSpeed's
// stage3_param_persistence_threshold), which saves a collective per tiny tensor at
// the price of replicated bytes, reported by PersistentNumel(). The threshold
// applies to whole units: a unit (ParamSpec::unit >= 0, declared by the model) whose
// parameters total at most `persistence_threshold` elements stays whole, a larger
// one is sharded whole, so a unit is never split between the two; a parameter
// outside units goes by its own size.
//
// Example (dp = 2, three parameters, a 4-element threshold):
//   PartitionOptions options;
//   options.dp_size = 2;
//   options.bucket_numel = 96;
//   options.persistence_threshold = 8;   // align_numel: 16 (64 bytes of f32)
//   LOOM_ASSIGN_OR_RETURN(Partition p, Partition::Create(
//       {{"wte", {10, 8}}, {"ln.g", {8}}, {"fc.w", {8, 8}}}, options));
//   p.num_buckets();                 // 2: {wte} (80 -> 96 padded), {fc.w} (64)
//   p.slot(1).persistent;            // true: ln.g stays whole on every rank
//   p.bucket(0).shard_numel;         // 48; rank 1 owns wte elements 48..79 plus 16 pad
//   p.ShardNumel();                  // 48 + 32 = 80 elements per rank
//   Partition::Create({{"w", {-1}}}, options);
//   // InvalidArgument: "Partition: parameter 0 ("w") has shape [-1]: ..."
#ifndef LOOM_ZERO3_PARTITION_H_
#define LOOM_ZERO3_PARTITION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom {

// ParamSpec: one parameter tensor of the model, by name and shape.
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;  // every extent >= 0; numel is their product (1 for [])
  // unit >= 0: the sharded parameters of consecutive specs with the same unit
  // share one bucket, whatever its size, and nothing else joins it: the parameters
  // a module gathers and releases together (FSDP's flat parameter per module,
  // e.g. one GPT block). -1: packed by bucket_numel.
  int unit = -1;
};

struct PartitionOptions {
  int dp_size = 1;                      // >= 1
  int64_t bucket_numel = 1 << 20;       // >= 1: target elements per bucket
  int64_t persistence_threshold = 0;    // >= 0: units (or lone params) of numel <= this stay whole
  int64_t align_numel = 16;             // >= 1: each shard's length is a multiple of it
};

// ParamSlot: where one parameter lives.
struct ParamSlot {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  bool persistent = false;  // kept whole on every rank, in no bucket
  int bucket = -1;          // sharded: its bucket; persistent: -1
  int64_t offset = 0;       // sharded: first element in the bucket; persistent: in
                            // the persistent block (PersistentNumel() elements)
};

// Bucket: parameters gathered and reduced together.
struct Bucket {
  std::vector<int> params;   // indices into slots, in order of their offsets
  int unit = -1;             // the unit of its parameters (ParamSpec::unit), or -1
  int64_t numel = 0;         // elements of parameters (before padding)
  int64_t padded_numel = 0;  // dp * shard_numel
  int64_t shard_numel = 0;   // elements each rank owns, padding included
};

class Partition {
 public:
  // Create lays `params` out. InvalidArgument naming the field or the parameter
  // (index, name, shape) for bad options, a negative extent, or an element count
  // that overflows int64.
  static absl::StatusOr<Partition> Create(std::vector<ParamSpec> params,
                                          const PartitionOptions& options);

  const PartitionOptions& options() const { return options_; }
  int num_params() const { return static_cast<int>(slots_.size()); }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  const ParamSlot& slot(int param) const { return slots_[param]; }
  const Bucket& bucket(int index) const { return buckets_[index]; }

  // TotalNumel is the model's parameter count, Psi; ShardedNumel the part of it in
  // buckets and PersistentNumel the part kept whole.
  int64_t TotalNumel() const { return sharded_numel_ + persistent_numel_; }
  int64_t ShardedNumel() const { return sharded_numel_; }
  int64_t PersistentNumel() const { return persistent_numel_; }
  // ShardNumel is the elements one rank owns over all buckets, padding included:
  // ceil-ish(ShardedNumel / dp); the same on every rank.
  int64_t ShardNumel() const { return shard_numel_; }
  // ShardOffset is where bucket `index`'s shard starts in a rank's concatenated
  // shards (the layout of its master weights, moments and gradient shard).
  int64_t ShardOffset(int index) const { return shard_offsets_[index]; }
  // MaxBucketNumel is the largest padded bucket: the unit of a gathered buffer.
  int64_t MaxBucketNumel() const { return max_bucket_numel_; }

  // FlatOffset is where `param` starts in the model's flat, unpadded parameter
  // vector (the parameters in order): the world-size-independent coordinate that
  // checkpoints use.
  int64_t FlatOffset(int param) const { return flat_offsets_[param]; }

  // OwnedRange is the piece of `param` that `rank` owns, as [begin, end) element
  // indices into the parameter (empty, begin == end, when it owns none of it).
  // Persistent parameters are owned whole by every rank.
  struct Range {
    int64_t begin = 0;
    int64_t end = 0;
  };
  Range OwnedRange(int param, int rank) const;

  // Describe is one line per bucket: "bucket 0: wte [10,8] | 80 -> 96, shard 48".
  std::string Describe() const;

 private:
  Partition() = default;

  PartitionOptions options_;
  std::vector<ParamSlot> slots_;
  std::vector<Bucket> buckets_;
  std::vector<int64_t> shard_offsets_;
  std::vector<int64_t> flat_offsets_;
  int64_t sharded_numel_ = 0;
  int64_t persistent_numel_ = 0;
  int64_t shard_numel_ = 0;
  int64_t max_bucket_numel_ = 0;
};

}  // namespace loom

#endif  // LOOM_ZERO3_PARTITION_H_
