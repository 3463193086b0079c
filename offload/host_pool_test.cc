#include "offload/host_pool.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload/internal/pinned_memory.h"

namespace loom {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr size_t kMiB = size_t{1} << 20;

std::unique_ptr<HostMemoryPool> MakePool(size_t budget, size_t max_cached = SIZE_MAX) {
  HostPoolOptions options;
  options.budget_bytes = budget;
  options.kind = HostMemoryKind::kPageable;
  options.max_cached_bytes = max_cached;
  absl::StatusOr<std::unique_ptr<HostMemoryPool>> pool = HostMemoryPool::Create(options);
  EXPECT_THAT(pool.status(), IsOk());
  return pool.ok() ? *std::move(pool) : nullptr;
}

bool AllZero(absl::Span<const std::byte> bytes) {
  for (std::byte b : bytes) {
    if (b != std::byte{0}) return false;
  }
  return true;
}

TEST(HostPoolTest, RejectsBadOptionsNamingTheValues) {
  HostPoolOptions options;
  EXPECT_THAT(HostMemoryPool::Create(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("budget_bytes is 0")));
  options.budget_bytes = PhysicalMemoryBytes() + 1;
  EXPECT_THAT(HostMemoryPool::Create(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("more than this machine's physical memory"),
                             HasSubstr(std::to_string(PhysicalMemoryBytes() + 1)))));
  options.budget_bytes = kMiB;
  options.alignment = 48;
  EXPECT_THAT(HostMemoryPool::Create(options).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("alignment 48")));
}

TEST(HostPoolTest, PinnedIsRefusedWhereItCannotBeHad) {
  if (offload_internal::PinningAvailable().ok()) GTEST_SKIP() << "pinning works here";
  HostPoolOptions options;
  options.budget_bytes = kMiB;
  options.kind = HostMemoryKind::kPinned;
  EXPECT_THAT(HostMemoryPool::Create(options).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("kind=pinned")));
  options.kind = HostMemoryKind::kAuto;  // Falls back to pageable memory.
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<HostMemoryPool> pool, HostMemoryPool::Create(options));
  EXPECT_EQ(pool->stats().kind, HostMemoryKind::kPageable);
}

TEST(HostPoolTest, BlocksAreZeroedAlignedAndCounted) {
  std::unique_ptr<HostMemoryPool> pool = MakePool(8 * kMiB);
  LOOM_ASSERT_OK_AND_ASSIGN(HostBlock a, pool->Allocate(3 * kMiB));
  LOOM_ASSERT_OK_AND_ASSIGN(HostBlock b, pool->Allocate(100));
  EXPECT_EQ(a.size(), 3 * kMiB);
  EXPECT_EQ(b.size(), 100u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 4096, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 4096, 0u);
  EXPECT_TRUE(AllZero(a.bytes()));
  EXPECT_TRUE(AllZero(b.bytes()));
  EXPECT_EQ(a.As<float>().size(), 3 * kMiB / 4);
  HostPoolStats stats = pool->stats();
  EXPECT_EQ(stats.in_use_bytes, 3 * kMiB + 4096);  // 100 bytes take one aligned unit.
  EXPECT_EQ(stats.blocks_in_use, 2);
  EXPECT_EQ(stats.allocations, 2);
  a = HostBlock();
  stats = pool->stats();
  EXPECT_EQ(stats.in_use_bytes, 4096u);
  EXPECT_EQ(stats.peak_in_use_bytes, 3 * kMiB + 4096);
  EXPECT_EQ(stats.cached_bytes, 3 * kMiB);
  EXPECT_EQ(stats.blocks_in_use, 1);
}

TEST(HostPoolTest, RefusesPastTheBudgetWithTheNumbers) {
  std::unique_ptr<HostMemoryPool> pool = MakePool(4 * kMiB);
  LOOM_ASSERT_OK_AND_ASSIGN(HostBlock held, pool->Allocate(3 * kMiB));
  EXPECT_THAT(pool->Allocate(2 * kMiB).status(),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("allocating 2097152 bytes"),
                             HasSubstr("budget of 4194304 bytes"),
                             HasSubstr("3145728 bytes (3.0 MiB) in use in 1 blocks"))));
  EXPECT_THAT(pool->Allocate(5 * kMiB).status(),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("exceeds the whole budget")));
  EXPECT_THAT(pool->Allocate(0).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0 bytes")));
  EXPECT_EQ(pool->stats().refusals, 2);
  // Exactly what is left still fits.
  LOOM_ASSERT_OK_AND_ASSIGN(HostBlock rest, pool->Allocate(kMiB));
  EXPECT_EQ(pool->stats().in_use_bytes, 4 * kMiB);
}

TEST(HostPoolTest, ReusedBlocksComeBackZeroed) {
  std::unique_ptr<HostMemoryPool> pool = MakePool(4 * kMiB);
  std::byte* first = nullptr;
  {
    LOOM_ASSERT_OK_AND_ASSIGN(HostBlock block, pool->Allocate(kMiB));
    first = block.data();
    std::memset(block.data(), 0xAB, block.size());
  }
  LOOM_ASSERT_OK_AND_ASSIGN(HostBlock again, pool->Allocate(kMiB));
  EXPECT_EQ(again.data(), first);
  EXPECT_TRUE(AllZero(again.bytes()));
  EXPECT_EQ(pool->stats().cache_hits, 1);
}

TEST(HostPoolTest, CachedBlocksAreDroppedToMakeRoom) {
  std::unique_ptr<HostMemoryPool> pool = MakePool(4 * kMiB);
  { LOOM_ASSERT_OK_AND_ASSIGN(HostBlock block, pool->Allocate(3 * kMiB)); }
  EXPECT_EQ(pool->stats().cached_bytes, 3 * kMiB);
  // 2 MiB does not fit next to the 3 MiB cached block: the cache gives way.
  LOOM_ASSERT_OK_AND_ASSIGN(HostBlock other, pool->Allocate(2 * kMiB));
  const HostPoolStats stats = pool->stats();
  EXPECT_EQ(stats.cached_bytes, 0u);
  EXPECT_EQ(stats.in_use_bytes, 2 * kMiB);
  EXPECT_EQ(stats.cache_hits, 0);
}

TEST(HostPoolTest, CacheLimitIsHonoured) {
  std::unique_ptr<HostMemoryPool> pool = MakePool(4 * kMiB, /*max_cached=*/0);
  { LOOM_ASSERT_OK_AND_ASSIGN(HostBlock block, pool->Allocate(kMiB)); }
  EXPECT_EQ(pool->stats().cached_bytes, 0u);
  pool = MakePool(4 * kMiB);
  { LOOM_ASSERT_OK_AND_ASSIGN(HostBlock block, pool->Allocate(kMiB)); }
  pool->ReleaseCache();
  EXPECT_EQ(pool->stats().cached_bytes, 0u);
}

TEST(HostPoolTest, BlocksMayOutliveThePoolAndMove) {
  std::unique_ptr<HostMemoryPool> pool = MakePool(kMiB);
  LOOM_ASSERT_OK_AND_ASSIGN(HostBlock block, pool->Allocate(1000));
  pool.reset();
  std::memset(block.data(), 7, block.size());  // Still valid memory (ASan would say).
  HostBlock moved = std::move(block);
  EXPECT_TRUE(block.empty());  // NOLINT(bugprone-use-after-move): documented state.
  EXPECT_EQ(moved.size(), 1000u);
  EXPECT_EQ(moved.data()[999], std::byte{7});
}

TEST(HostPoolTest, ConcurrentUseNeverExceedsTheBudget) {
  constexpr size_t kBudget = 2 * kMiB;
  std::unique_ptr<HostMemoryPool> pool = MakePool(kBudget);
  std::vector<std::thread> threads;
  std::atomic<int64_t> granted{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1234 + t);
      std::vector<HostBlock> held;
      for (int i = 0; i < 300; ++i) {
        const size_t bytes = 4096 * (1 + rng() % 64);
        absl::StatusOr<HostBlock> block = pool->Allocate(bytes);
        if (block.ok()) {
          ++granted;
          block->data()[0] = std::byte{static_cast<unsigned char>(t)};
          held.push_back(*std::move(block));
        } else {
          EXPECT_EQ(block.status().code(), absl::StatusCode::kResourceExhausted);
        }
        const HostPoolStats now = pool->stats();
        EXPECT_LE(now.in_use_bytes + now.cached_bytes, kBudget);
        if (held.size() > 3 || rng() % 2 == 0) {
          if (!held.empty()) held.erase(held.begin());
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  const HostPoolStats stats = pool->stats();
  EXPECT_EQ(stats.in_use_bytes, 0u);
  EXPECT_EQ(stats.blocks_in_use, 0);
  EXPECT_LE(stats.peak_in_use_bytes, kBudget);
  EXPECT_EQ(stats.allocations, granted.load());
  EXPECT_GT(granted.load(), 0);
}

}  // namespace
}  // namespace loom
