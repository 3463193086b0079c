// Under --config=cuda on a machine with a GPU: the pool's blocks are page-locked.
#include <cuda_runtime.h>

#include <cstring>

#include "core/status_matchers.h"
#include "gtest/gtest.h"
#include "offload/host_pool.h"
#include "offload/internal/pinned_memory.h"

namespace loom {
namespace {

TEST(HostPoolPinnedTest, AutoPinsWhereADeviceIsUsable) {
  const absl::Status available = offload_internal::PinningAvailable();
  if (!available.ok()) GTEST_SKIP() << available.message();
  HostPoolOptions options;
  options.budget_bytes = 8 << 20;
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<HostMemoryPool> pool, HostMemoryPool::Create(options));
  EXPECT_EQ(pool->stats().kind, HostMemoryKind::kPinned);
  LOOM_ASSERT_OK_AND_ASSIGN(HostBlock block, pool->Allocate(1 << 20));
  // The driver knows the block as registered host memory.
  cudaPointerAttributes attributes;
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, block.data()), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeHost);
  // An asynchronous round trip through the device returns the bytes.
  for (size_t i = 0; i < block.size(); ++i) block.data()[i] = std::byte(i * 7 % 251);
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, block.size()), cudaSuccess);
  LOOM_ASSERT_OK_AND_ASSIGN(HostBlock back, pool->Allocate(1 << 20));
  ASSERT_EQ(cudaMemcpyAsync(device, block.data(), block.size(), cudaMemcpyHostToDevice, 0), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(back.data(), device, back.size(), cudaMemcpyDeviceToHost, 0), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(0), cudaSuccess);
  EXPECT_EQ(std::memcmp(block.data(), back.data(), block.size()), 0);
  cudaFree(device);
}

}  // namespace
}  // namespace loom
