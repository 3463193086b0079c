#include "zero3/internal/disk_shards.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/status_matchers.h"
#include "core/temp_dir_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload/disk/disk_tier.h"

namespace loom {
namespace zero3_internal {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<DiskTier> MakeTier(const std::string& dir) {
  DiskTierOptions options;
  options.directories = {dir};
  options.stripe_bytes = 64 << 10;
  options.checksum_block_bytes = 4096;
  absl::StatusOr<std::unique_ptr<DiskTier>> tier = DiskTier::Create(options);
  EXPECT_THAT(tier.status(), IsOk());
  return tier.ok() ? std::move(*tier) : nullptr;
}

std::vector<float> Ramp(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + 0.25f * static_cast<float>(i);
  return v;
}

TEST(DiskShardsTest, NamesEachKindOfStateApart) {
  DiskShards disk({}, "job7.m1", 3, DType::kF32);
  EXPECT_EQ(disk.OptimizerName(12), "job7.m1.r3.b12");
  EXPECT_EQ(disk.ParamName(12), "job7.m1.r3.b12.w");
  EXPECT_EQ(disk.GradName(12), "job7.m1.r3.b12.g");
  EXPECT_FALSE(disk.has_optimizer() || disk.has_params() || disk.has_grads());
}

TEST(DiskShardsTest, SizesFollowTheComputeDtype) {
  const DiskShards f32({}, "z", 0, DType::kF32);
  const DiskShards bf16({}, "z", 0, DType::kBF16);
  EXPECT_EQ(f32.OptimizerNumel(100), 200);   // m, v (the master is the parameters)
  EXPECT_EQ(bf16.OptimizerNumel(100), 300);  // m, v and the f32 master
  EXPECT_EQ(f32.ShardBytes(100), 400);
  EXPECT_EQ(bf16.ShardBytes(100), 200);
}

// Every kind of state round-trips bit for bit through one shared tier, in both
// compute dtypes and at sizes that are not a multiple of the 4 KiB block, and
// RemoveBucket leaves nothing behind.
TEST(DiskShardsTest, EveryKindRoundTripsAndIsRemoved) {
  const std::string dir = FreshTestDirectory("disk_shards");
  std::unique_ptr<DiskTier> tier = MakeTier(dir);
  ASSERT_NE(tier, nullptr);
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    DiskShards disk({tier.get(), tier.get(), tier.get()}, "zero3", 1, dtype);
    for (const int64_t numel : {int64_t{1}, int64_t{1000}, int64_t{40001}}) {
      const int bucket = static_cast<int>(numel % 7);
      const std::vector<float> stored =
          Ramp(static_cast<size_t>(disk.OptimizerNumel(numel)), -3.0f);
      LOOM_ASSERT_OK(disk.WriteOptimizer(bucket, stored));
      LOOM_ASSERT_OK_AND_ASSIGN(const std::vector<float> back, disk.ReadOptimizer(bucket, numel));
      EXPECT_EQ(back, stored) << numel;

      std::vector<std::byte> shard(static_cast<size_t>(disk.ShardBytes(numel)));
      for (size_t i = 0; i < shard.size(); ++i) shard[i] = static_cast<std::byte>(i * 31 + 7);
      LOOM_ASSERT_OK(disk.WriteParams(bucket, shard));
      std::vector<std::byte> shard_back(shard.size());
      LOOM_ASSERT_OK(disk.ReadParams(bucket, absl::MakeSpan(shard_back)));
      EXPECT_EQ(shard_back, shard) << numel;

      // Gradients: zeros until one is stored, then what was written.
      std::vector<float> f32 = {9.0f};
      std::vector<BFloat16> bf16 = {ToBFloat16(9.0f)};
      LOOM_ASSERT_OK(disk.ReadGrads(bucket, numel, /*stored=*/false, f32, bf16));
      const bool in_bf16 = dtype == DType::kBF16;
      ASSERT_EQ(f32.size(), in_bf16 ? 0u : static_cast<size_t>(numel));
      ASSERT_EQ(bf16.size(), in_bf16 ? static_cast<size_t>(numel) : 0u);
      for (const float x : f32) ASSERT_EQ(x, 0.0f);
      for (const BFloat16 x : bf16) ASSERT_EQ(ToFloat(x), 0.0f);
      const std::vector<float> grads = Ramp(static_cast<size_t>(numel), 1.0f);
      for (size_t i = 0; i < grads.size(); ++i) {
        if (in_bf16) {
          bf16[i] = ToBFloat16(grads[i]);
        } else {
          f32[i] = grads[i];
        }
      }
      LOOM_ASSERT_OK(disk.WriteGrads(bucket, f32, bf16));
      std::vector<float> f32_back;
      std::vector<BFloat16> bf16_back;
      LOOM_ASSERT_OK(disk.ReadGrads(bucket, numel, /*stored=*/true, f32_back, bf16_back));
      EXPECT_EQ(f32_back, f32);
      ASSERT_EQ(bf16_back.size(), bf16.size());
      for (size_t i = 0; i < bf16.size(); ++i) ASSERT_EQ(bf16_back[i].bits, bf16[i].bits) << i;

      EXPECT_TRUE(tier->Contains(disk.OptimizerName(bucket)));
      disk.RemoveBucket(bucket);
      EXPECT_FALSE(tier->Contains(disk.OptimizerName(bucket)));
      EXPECT_FALSE(tier->Contains(disk.ParamName(bucket)));
      EXPECT_FALSE(tier->Contains(disk.GradName(bucket)));
    }
  }
}

TEST(DiskShardsTest, AMissingOrShortTensorIsAnError) {
  const std::string dir = FreshTestDirectory("disk_shards_missing");
  std::unique_ptr<DiskTier> tier = MakeTier(dir);
  ASSERT_NE(tier, nullptr);
  DiskShards disk({tier.get(), nullptr, nullptr}, "zero3", 0, DType::kF32);
  EXPECT_FALSE(disk.ReadOptimizer(4, 10).ok());
  LOOM_ASSERT_OK(disk.WriteOptimizer(4, Ramp(20, 0.0f)));
  const absl::StatusOr<std::vector<float>> longer = disk.ReadOptimizer(4, 11);
  EXPECT_FALSE(longer.ok());
  EXPECT_THAT(std::string(longer.status().message()), HasSubstr("zero3.r0.b4"));
  disk.RemoveBucket(4);  // only the optimizer home is set: nothing else is touched
  EXPECT_FALSE(tier->Contains(disk.OptimizerName(4)));
}

}  // namespace
}  // namespace zero3_internal
}  // namespace loom
