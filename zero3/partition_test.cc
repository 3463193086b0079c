#include "zero3/partition.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

PartitionOptions Options(int dp, int64_t bucket, int64_t threshold, int64_t align = 16) {
  PartitionOptions options;
  options.dp_size = dp;
  options.bucket_numel = bucket;
  options.persistence_threshold = threshold;
  options.align_numel = align;
  return options;
}

TEST(PartitionTest, TheHeaderExample) {
  LOOM_ASSERT_OK_AND_ASSIGN(
      const Partition p,
      Partition::Create({{"wte", {10, 8}}, {"ln.g", {8}}, {"fc.w", {8, 8}}}, Options(2, 96, 8)));
  ASSERT_EQ(p.num_buckets(), 2);
  EXPECT_EQ(p.bucket(0).params, std::vector<int>({0}));
  EXPECT_EQ(p.bucket(0).numel, 80);
  EXPECT_EQ(p.bucket(0).padded_numel, 96);
  EXPECT_EQ(p.bucket(0).shard_numel, 48);
  EXPECT_EQ(p.bucket(1).params, std::vector<int>({2}));
  EXPECT_EQ(p.bucket(1).shard_numel, 32);
  EXPECT_TRUE(p.slot(1).persistent);
  EXPECT_EQ(p.slot(1).bucket, -1);
  EXPECT_EQ(p.ShardNumel(), 80);
  EXPECT_EQ(p.ShardOffset(1), 48);
  EXPECT_EQ(p.TotalNumel(), 152);
  EXPECT_EQ(p.PersistentNumel(), 8);
  EXPECT_EQ(p.MaxBucketNumel(), 96);
  EXPECT_EQ(p.FlatOffset(2), 88);
  EXPECT_EQ(p.OwnedRange(0, 0).begin, 0);
  EXPECT_EQ(p.OwnedRange(0, 0).end, 48);
  EXPECT_EQ(p.OwnedRange(0, 1).begin, 48);
  EXPECT_EQ(p.OwnedRange(0, 1).end, 80);
  EXPECT_EQ(p.OwnedRange(1, 1).end, 8);  // persistent: whole on every rank
  EXPECT_EQ(p.Describe(),
            "bucket 0: wte [10,8] | 80 -> 96, shard 48\n"
            "bucket 1: fc.w [8,8] | 64 -> 64, shard 32\n"
            "persistent: ln.g [8] | 8\n");
}

// Units: a unit's parameters share one bucket whatever bucket_numel says (a
// 66-element bucket over a 20-element target), its small parameters included (the
// threshold goes by the unit's total, so a unit is never split between persistent
// and sharded), and unit-less parameters never join a unit's bucket.
TEST(PartitionTest, AUnitIsOneBucketOfItsOwn) {
  std::vector<ParamSpec> specs = {{"a.w", {4, 8}, 0}, {"a.b", {2}, 0}, {"a.v", {4, 8}, 0},
                                  {"b.w", {4, 4}, 1}, {"free", {4, 2}, -1}, {"free2", {4, 2}, -1}};
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition p, Partition::Create(specs, Options(2, 20, 2)));
  ASSERT_EQ(p.num_buckets(), 3);
  EXPECT_EQ(p.bucket(0).params, std::vector<int>({0, 1, 2}));
  EXPECT_EQ(p.bucket(0).numel, 66);
  EXPECT_EQ(p.bucket(0).unit, 0);
  EXPECT_FALSE(p.slot(1).persistent);
  EXPECT_EQ(p.bucket(1).params, std::vector<int>({3}));
  EXPECT_EQ(p.bucket(1).unit, 1);
  EXPECT_EQ(p.bucket(2).params, std::vector<int>({4, 5}));
  EXPECT_EQ(p.bucket(2).unit, -1);
  EXPECT_EQ(p.PersistentNumel(), 0);
}

// The threshold keeps a whole unit when its parameters total at most the
// threshold, even where each is larger than nothing else would keep, and shards a
// unit above it whole, with its tiny parameters: the final norm and the head of a
// GPT are one unit, so no pass ever asks for one of them after releasing the other.
TEST(PartitionTest, PersistenceGoesByTheWholeUnit) {
  std::vector<ParamSpec> specs = {{"ln.g", {8}, 0},      {"ln.b", {8}, 0},  {"head.w", {8, 8}, 0},
                                  {"small.g", {6}, 1},   {"small.b", {6}, 1}, {"lone", {3}, -1}};
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition p, Partition::Create(specs, Options(2, 1000, 12)));
  ASSERT_EQ(p.num_buckets(), 1);
  EXPECT_EQ(p.bucket(0).params, std::vector<int>({0, 1, 2}));  // 80 elements > 12
  EXPECT_FALSE(p.slot(0).persistent);
  EXPECT_TRUE(p.slot(3).persistent);  // the unit totals 12 <= 12
  EXPECT_TRUE(p.slot(4).persistent);
  EXPECT_TRUE(p.slot(5).persistent);  // 3 <= 12 on its own
  EXPECT_EQ(p.PersistentNumel(), 15);
}

// Every element of every sharded parameter is owned by exactly one rank, the
// buckets tile each rank's shard without gaps, and the padding is what alignment
// needs and no more: over random models, dp sizes and options.
TEST(PartitionTest, RandomModelsAreCoveredExactlyOnce) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int dp = 1 + static_cast<int>(rng() % 9);
    const int64_t bucket = 1 + static_cast<int64_t>(rng() % 200);
    const int64_t threshold = static_cast<int64_t>(rng() % 12);
    const int64_t align = 1 + static_cast<int64_t>(rng() % 20);
    std::vector<ParamSpec> specs;
    const int n = static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) {
      std::vector<int64_t> shape;
      const int rank = static_cast<int>(rng() % 3);
      for (int d = 0; d < rank; ++d) shape.push_back(static_cast<int64_t>(rng() % 17));
      specs.push_back({absl::StrCat("p", i), shape});
    }
    SCOPED_TRACE(absl::StrCat("trial ", trial, " dp ", dp, " bucket ", bucket, " threshold ",
                              threshold, " align ", align));
    LOOM_ASSERT_OK_AND_ASSIGN(const Partition p,
                              Partition::Create(specs, Options(dp, bucket, threshold, align)));
    int64_t total = 0;
    int64_t shard_offset = 0;
    for (int b = 0; b < p.num_buckets(); ++b) {
      const Bucket& bk = p.bucket(b);
      EXPECT_FALSE(bk.params.empty());
      EXPECT_EQ(bk.shard_numel % align, 0);
      EXPECT_EQ(bk.padded_numel, bk.shard_numel * dp);
      EXPECT_GE(bk.padded_numel, bk.numel);
      EXPECT_LT(bk.padded_numel - bk.numel, dp * align + dp);  // padding is bounded
      EXPECT_EQ(p.ShardOffset(b), shard_offset);
      shard_offset += bk.shard_numel;
      int64_t offset = 0;
      for (const int param : bk.params) {
        EXPECT_EQ(p.slot(param).bucket, b);
        EXPECT_EQ(p.slot(param).offset, offset);
        offset += p.slot(param).numel;
      }
      EXPECT_EQ(offset, bk.numel);
      // A bucket over the target holds one parameter.
      if (bk.numel > bucket) {
        EXPECT_EQ(bk.params.size(), 1u);
      }
    }
    EXPECT_EQ(p.ShardNumel(), shard_offset);
    for (int i = 0; i < p.num_params(); ++i) {
      const ParamSlot& slot = p.slot(i);
      EXPECT_EQ(p.FlatOffset(i), total);
      total += slot.numel;
      EXPECT_EQ(slot.persistent, slot.numel <= threshold);
      if (slot.persistent) continue;
      int64_t next = 0;  // ranks' ranges tile the parameter in rank order
      for (int r = 0; r < dp; ++r) {
        const Partition::Range range = p.OwnedRange(i, r);
        EXPECT_LE(range.begin, range.end);
        if (range.begin == range.end) continue;
        EXPECT_EQ(range.begin, next) << "param " << i << " rank " << r;
        next = range.end;
      }
      EXPECT_EQ(next, slot.numel) << "param " << i;
    }
    EXPECT_EQ(p.TotalNumel(), total);
  }
}

TEST(PartitionTest, EmptyModelAndZeroSizeParameters) {
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition empty, Partition::Create({}, Options(4, 16, 0)));
  EXPECT_EQ(empty.num_buckets(), 0);
  EXPECT_EQ(empty.ShardNumel(), 0);
  // A zero-size parameter is under every threshold, so it is persistent and in no bucket.
  LOOM_ASSERT_OK_AND_ASSIGN(const Partition p,
                            Partition::Create({{"a", {0, 5}}, {"b", {3}}}, Options(2, 16, 0)));
  EXPECT_TRUE(p.slot(0).persistent);
  EXPECT_EQ(p.num_buckets(), 1);
  EXPECT_EQ(p.bucket(0).shard_numel, 16);  // 3 elements, 2 ranks, aligned to 16
  EXPECT_EQ(p.OwnedRange(1, 1).begin, p.OwnedRange(1, 1).end);  // rank 1 holds padding only
}

TEST(PartitionTest, BadInputIsNamed) {
  EXPECT_THAT(Partition::Create({}, Options(0, 16, 0)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("PartitionOptions.dp_size 0 is below 1")));
  EXPECT_THAT(Partition::Create({}, Options(2, 0, 0)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("PartitionOptions.bucket_numel 0 is below 1")));
  EXPECT_THAT(Partition::Create({}, Options(2, 4, -1)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("PartitionOptions.persistence_threshold -1 is negative")));
  EXPECT_THAT(Partition::Create({}, Options(2, 4, 0, 0)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("PartitionOptions.align_numel 0 is below 1")));
  EXPECT_THAT(Partition::Create({{"ok", {2}}, {"w", {3, -1}}}, Options(2, 16, 0)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("parameter 1 (\"w\") has shape [3,-1]: extents must be >= 0")));
  EXPECT_THAT(Partition::Create({{"huge", {int64_t{1} << 40, int64_t{1} << 40}}},
                                Options(2, 16, 0)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflows int64")));
}

}  // namespace
}  // namespace loom
