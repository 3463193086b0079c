#include "core/large_block_cache.h"

#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/status_matchers.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

constexpr size_t kBig = kLargeBlockBytes;  // bytes: the smallest block cached

class LargeBlockCacheTest : public ::testing::Test {
 protected:
  void TearDown() override { DisableLargeBlockCache(); }
};

// Off (the default), nothing is kept and nothing counted.
TEST_F(LargeBlockCacheTest, OffKeepsNothing) {
  DisableLargeBlockCache();
  { LOOM_ASSERT_OK_AND_ASSIGN(auto a, AlignedBuffer<std::byte>::Create(kBig)); }
  const LargeBlockCacheStats s = GetLargeBlockCacheStats();
  EXPECT_EQ(s.cached_blocks, 0);
  EXPECT_EQ(s.hits, 0);
  EXPECT_EQ(s.misses, 0);
}

// On: a freed large block is the next one of its size, zeroed again by Create
// (the caller sees no earlier contents), and written contents survive only in
// CreateUninitialized's (the caller said it writes every element first).
TEST_F(LargeBlockCacheTest, AFreedBlockIsTheNextOfItsSize) {
  EnableLargeBlockCache(size_t{1} << 30);
  const void* first = nullptr;
  {
    LOOM_ASSERT_OK_AND_ASSIGN(auto a, AlignedBuffer<float>::Create(kBig / sizeof(float)));
    a[0] = 7.0f;
    a[a.size() - 1] = 9.0f;
    first = a.data();
  }
  LargeBlockCacheStats s = GetLargeBlockCacheStats();
  EXPECT_EQ(s.cached_blocks, 1);
  EXPECT_EQ(s.cached_bytes, static_cast<int64_t>(kBig));
  {
    LOOM_ASSERT_OK_AND_ASSIGN(auto b, AlignedBuffer<float>::Create(kBig / sizeof(float)));
    EXPECT_EQ(b.data(), first);
    EXPECT_EQ(b[0], 0.0f);
    EXPECT_EQ(b[b.size() - 1], 0.0f);
    b[0] = 3.0f;
  }
  {
    LOOM_ASSERT_OK_AND_ASSIGN(auto c,
                              AlignedBuffer<float>::CreateUninitialized(kBig / sizeof(float)));
    EXPECT_EQ(c.data(), first);
    EXPECT_EQ(c[0], 3.0f);
  }
  s = GetLargeBlockCacheStats();
  EXPECT_EQ(s.hits, 2);
  EXPECT_EQ(s.misses, 1);  // the first allocation
  // Another size is not served by this block; a small one never touches the cache.
  {
    LOOM_ASSERT_OK_AND_ASSIGN(auto d, AlignedBuffer<std::byte>::Create(kBig + 64));
    EXPECT_NE(static_cast<const void*>(d.data()), first);
    LOOM_ASSERT_OK_AND_ASSIGN(auto e, AlignedBuffer<std::byte>::Create(kBig - 64));
  }
  s = GetLargeBlockCacheStats();
  EXPECT_EQ(s.hits, 2);
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.cached_blocks, 2);
  EXPECT_EQ(s.cached_bytes, static_cast<int64_t>(2 * kBig + 64));
}

// Tensors allocate through AlignedBuffer: a step's same-shaped temporaries reuse.
TEST_F(LargeBlockCacheTest, TensorsOfTheSameShapeReuse) {
  EnableLargeBlockCache(size_t{1} << 30);
  const std::vector<int64_t> shape = {2, 512, 8192};  // 32 MiB of f32
  for (int step = 0; step < 4; ++step) {
    LOOM_ASSERT_OK_AND_ASSIGN(Tensor logits, Tensor::Create(shape, DType::kF32));
    LOOM_ASSERT_OK_AND_ASSIGN(Tensor grad, Tensor::CreateUninitialized(shape, DType::kF32));
  }
  const LargeBlockCacheStats s = GetLargeBlockCacheStats();
  EXPECT_EQ(s.misses, 2);
  EXPECT_EQ(s.hits, 6);
  EXPECT_EQ(s.cached_blocks, 2);
}

// The bound: a block freed beyond it goes back to the system; lowering the bound
// frees what is above it; Release and Disable empty the cache.
TEST_F(LargeBlockCacheTest, TheBoundHolds) {
  EnableLargeBlockCache(2 * kBig);
  {
    std::vector<AlignedBuffer<std::byte>> held;
    for (int i = 0; i < 3; ++i) {
      LOOM_ASSERT_OK_AND_ASSIGN(auto a, AlignedBuffer<std::byte>::CreateUninitialized(kBig));
      held.push_back(std::move(a));
    }
  }
  LargeBlockCacheStats s = GetLargeBlockCacheStats();
  EXPECT_EQ(s.cached_blocks, 2);
  EXPECT_EQ(s.cached_bytes, static_cast<int64_t>(2 * kBig));
  EnableLargeBlockCache(kBig);
  EXPECT_EQ(GetLargeBlockCacheStats().cached_blocks, 1);
  ReleaseLargeBlockCache();
  s = GetLargeBlockCacheStats();
  EXPECT_EQ(s.cached_blocks, 0);
  EXPECT_EQ(s.cached_bytes, 0);
  { LOOM_ASSERT_OK_AND_ASSIGN(auto a, AlignedBuffer<std::byte>::CreateUninitialized(kBig)); }
  EXPECT_EQ(GetLargeBlockCacheStats().cached_blocks, 1);  // still on
  DisableLargeBlockCache();
  EXPECT_EQ(GetLargeBlockCacheStats().cached_blocks, 0);
}

// A block cached for one alignment serves a larger one only where its address has it.
TEST_F(LargeBlockCacheTest, AlignmentIsKept) {
  EnableLargeBlockCache(size_t{1} << 30);
  { LOOM_ASSERT_OK_AND_ASSIGN(auto a, AlignedBuffer<std::byte>::CreateUninitialized(kBig, 64)); }
  LOOM_ASSERT_OK_AND_ASSIGN(auto b,
                            AlignedBuffer<std::byte>::CreateUninitialized(kBig, size_t{1} << 21));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % (size_t{1} << 21), 0u);
}

// Threads allocating and freeing at once (each its own sizes and the same ones):
// every buffer stays its owner's (a pattern written and read back), and the counts
// add up. TSan checks the cache's lock.
TEST_F(LargeBlockCacheTest, ThreadsShareTheCache) {
  EnableLargeBlockCache(size_t{512} << 20);
  constexpr int kThreads = 4;
  constexpr int kRounds = 6;
  std::vector<std::thread> threads;
  std::vector<int> bad(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &bad] {
      for (int round = 0; round < kRounds; ++round) {
        const size_t bytes = kBig + static_cast<size_t>(64 * (round % 2 == 0 ? 0 : t + 1));
        auto a = AlignedBuffer<uint32_t>::CreateUninitialized(bytes / sizeof(uint32_t));
        if (!a.ok()) {
          ++bad[t];
          continue;
        }
        const uint32_t mark = static_cast<uint32_t>(t * 1000 + round);
        for (size_t i = 0; i < a->size(); i += 4096) (*a)[i] = mark;
        std::this_thread::yield();
        for (size_t i = 0; i < a->size(); i += 4096) bad[t] += (*a)[i] != mark;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
  const LargeBlockCacheStats s = GetLargeBlockCacheStats();
  EXPECT_EQ(s.hits + s.misses, kThreads * kRounds);
  EXPECT_GT(s.hits, 0);
}

}  // namespace
}  // namespace loom
