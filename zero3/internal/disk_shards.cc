#include "zero3/internal/disk_shards.h"

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace loom {
namespace zero3_internal {
namespace {

template <typename T>
absl::Span<std::byte> AsBytes(std::vector<T>& v) {
  return absl::MakeSpan(reinterpret_cast<std::byte*>(v.data()), v.size() * sizeof(T));
}

template <typename T>
absl::Span<const std::byte> AsBytes(absl::Span<const T> v) {
  return absl::MakeConstSpan(reinterpret_cast<const std::byte*>(v.data()), v.size() * sizeof(T));
}

}  // namespace

std::string DiskShards::OptimizerName(int bucket) const {
  return absl::StrCat(prefix_, ".r", rank_, ".b", bucket);
}

int64_t DiskShards::OptimizerNumel(int64_t numel) const {
  return numel * (compute_dtype_ == DType::kBF16 ? 3 : 2);
}

absl::Status DiskShards::ReadOptimizer(int bucket, absl::Span<float> into) const {
  return homes_.optimizer->Read(
      OptimizerName(bucket),
      absl::MakeSpan(reinterpret_cast<std::byte*>(into.data()), into.size() * sizeof(float)));
}

absl::StatusOr<std::vector<float>> DiskShards::ReadOptimizer(int bucket, int64_t numel) const {
  std::vector<float> stored(static_cast<size_t>(OptimizerNumel(numel)));
  LOOM_RETURN_IF_ERROR(ReadOptimizer(bucket, absl::MakeSpan(stored)));
  return stored;
}

absl::Status DiskShards::WriteOptimizer(int bucket, absl::Span<const float> stored) {
  return homes_.optimizer->Write(OptimizerName(bucket), AsBytes(stored));
}

int64_t DiskShards::ShardBytes(int64_t numel) const {
  return numel * (compute_dtype_ == DType::kBF16 ? 2 : 4);
}

absl::Status DiskShards::ReadParams(int bucket, absl::Span<std::byte> into) const {
  return homes_.params->Read(ParamName(bucket), into);
}

absl::Status DiskShards::WriteParams(int bucket, absl::Span<const std::byte> shard) {
  return homes_.params->Write(ParamName(bucket), shard);
}

absl::StatusOr<std::vector<float>> DiskShards::ReadParamWeights(int bucket, int64_t numel) const {
  std::vector<float> weights(static_cast<size_t>(numel));
  LOOM_RETURN_IF_ERROR(ReadParams(bucket, AsBytes(weights)));
  return weights;
}

absl::Status DiskShards::ReadGrads(int bucket, int64_t numel, bool stored,
                                   std::vector<float>& f32, std::vector<BFloat16>& bf16) const {
  const size_t n = static_cast<size_t>(numel);
  const bool in_bf16 = compute_dtype_ == DType::kBF16;
  f32.assign(in_bf16 ? 0 : n, 0.0f);
  bf16.assign(in_bf16 ? n : 0, BFloat16());
  if (!stored) return absl::OkStatus();
  return homes_.grads->Read(GradName(bucket), in_bf16 ? AsBytes(bf16) : AsBytes(f32));
}

absl::Status DiskShards::WriteGrads(int bucket, const std::vector<float>& f32,
                                    const std::vector<BFloat16>& bf16) {
  return homes_.grads->Write(GradName(bucket), f32.empty() ? AsBytes(absl::MakeConstSpan(bf16))
                                                           : AsBytes(absl::MakeConstSpan(f32)));
}

void DiskShards::RemoveBucket(int bucket) {
  if (homes_.optimizer != nullptr) homes_.optimizer->Remove(OptimizerName(bucket)).IgnoreError();
  if (homes_.params != nullptr) homes_.params->Remove(ParamName(bucket)).IgnoreError();
  if (homes_.grads != nullptr) homes_.grads->Remove(GradName(bucket)).IgnoreError();
}

}  // namespace zero3_internal
}  // namespace loom
