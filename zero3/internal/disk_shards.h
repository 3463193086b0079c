// DiskShards: where a ZeRO engine keeps a bucket's state on NVMe (ZeRO-Infinity's
// offload_optimizer, offload_param and the gradient shards), the home policy
// apart from the engine's passes. Each kind of state has its own DiskTier (they may
// be one) and its own tensor name, so that several engines share a tier under
// distinct prefixes:
//   optimizer  "<prefix>.r<rank>.b<bucket>"    m, v and (bf16) the f32 master, f32
//   parameters "<prefix>.r<rank>.b<bucket>.w"  the shard in the compute dtype
//   gradients  "<prefix>.r<rank>.b<bucket>.g"  the shard in the compute dtype
// A home left null keeps that state in memory; the engine asks has_*() first.
//
// Example:
//   DiskShards disk({.optimizer = tier}, "zero3", /*rank=*/1, DType::kBF16);
//   LOOM_RETURN_IF_ERROR(disk.WriteOptimizer(/*bucket=*/0, stored));   // 3 * numel floats
//   LOOM_RETURN_IF_ERROR(disk.ReadOptimizer(0, absl::MakeSpan(stored)));
//   disk.RemoveBucket(0);   // when the engine goes: the state is swap space
#ifndef LOOM_ZERO3_INTERNAL_DISK_SHARDS_H_
#define LOOM_ZERO3_INTERNAL_DISK_SHARDS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/dtype.h"
#include "core/half.h"
#include "offload/disk/disk_tier.h"

namespace loom {
namespace zero3_internal {

class DiskShards {
 public:
  struct Homes {
    DiskTier* optimizer = nullptr;
    DiskTier* params = nullptr;
    DiskTier* grads = nullptr;
  };

  DiskShards(Homes homes, std::string prefix, int rank, DType compute_dtype)
      : homes_(homes), prefix_(std::move(prefix)), rank_(rank), compute_dtype_(compute_dtype) {}

  bool has_optimizer() const { return homes_.optimizer != nullptr; }
  bool has_params() const { return homes_.params != nullptr; }
  bool has_grads() const { return homes_.grads != nullptr; }

  std::string OptimizerName(int bucket) const;
  std::string ParamName(int bucket) const { return OptimizerName(bucket) + ".w"; }
  std::string GradName(int bucket) const { return OptimizerName(bucket) + ".g"; }

  // The optimizer state of a shard of `numel` elements: m, v and (bf16 compute)
  // the f32 master, `numel` floats each, in that order.
  int64_t OptimizerNumel(int64_t numel) const;
  // ReadOptimizer fills `into` (OptimizerNumel floats); DataLoss for a corrupted
  // tensor, as DiskTier::Read.
  absl::Status ReadOptimizer(int bucket, absl::Span<float> into) const;
  absl::StatusOr<std::vector<float>> ReadOptimizer(int bucket, int64_t numel) const;
  absl::Status WriteOptimizer(int bucket, absl::Span<const float> stored);

  // A parameter or gradient shard of `numel` elements, in the compute dtype.
  int64_t ShardBytes(int64_t numel) const;
  absl::Status ReadParams(int bucket, absl::Span<std::byte> into) const;
  absl::Status WriteParams(int bucket, absl::Span<const std::byte> shard);
  // ReadParamWeights: an f32 engine's parameter shard, which is its master.
  absl::StatusOr<std::vector<float>> ReadParamWeights(int bucket, int64_t numel) const;

  // ReadGrads sets `f32` (f32 compute, `bf16` emptied) or `bf16` (bf16 compute) to
  // the bucket's `numel`-element gradient shard: zeros when `stored` is false
  // (nothing written since the last step). WriteGrads writes whichever of the two
  // is not empty.
  absl::Status ReadGrads(int bucket, int64_t numel, bool stored, std::vector<float>& f32,
                         std::vector<BFloat16>& bf16) const;
  absl::Status WriteGrads(int bucket, const std::vector<float>& f32,
                          const std::vector<BFloat16>& bf16);

  // RemoveBucket removes whatever of the bucket's state this object's homes hold
  // (errors ignored: it runs as the engine goes away).
  void RemoveBucket(int bucket);

 private:
  Homes homes_;
  std::string prefix_;
  int rank_ = 0;
  DType compute_dtype_ = DType::kF32;
};

}  // namespace zero3_internal
}  // namespace loom

#endif  // LOOM_ZERO3_INTERNAL_DISK_SHARDS_H_
