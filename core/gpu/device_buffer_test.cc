// DeviceBuffer, CudaStream and CudaEvent. Host buffers and the error texts are
// checked on every machine; device round trips skip (reported as skipped) where
// there is no CUDA device.
#include "core/gpu/device_buffer.h"

#include <cstdint>
#include <vector>

#include "absl/time/clock.h"
#include "core/gpu/cuda_status.h"
#include "core/gpu/cuda_stream.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

absl::Span<const std::byte> Bytes(const std::vector<uint32_t>& v) {
  return absl::MakeConstSpan(reinterpret_cast<const std::byte*>(v.data()), v.size() * 4);
}
absl::Span<std::byte> Bytes(std::vector<uint32_t>& v) {
  return absl::MakeSpan(reinterpret_cast<std::byte*>(v.data()), v.size() * 4);
}

std::vector<uint32_t> Seeded(size_t n, uint32_t seed) {
  std::vector<uint32_t> v(n);
  uint32_t x = seed;
  for (auto& e : v) e = x = x * 1664525u + 1013904223u;
  return v;
}

bool HasDevice() {
  absl::StatusOr<int> count = CudaDeviceCountOrZero();
  return count.ok() && *count > 0;
}

TEST(CudaStatusTest, NamesTheCallAndTheError) {
  EXPECT_THAT(CudaStatus(cudaSuccess, "cudaFree(p)"), IsOk());
  EXPECT_THAT(CudaStatus(cudaErrorMemoryAllocation, "cudaMalloc(&p, 1 << 40)"),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("cudaMalloc(&p, 1 << 40) failed: cudaErrorMemoryAllocation")));
  EXPECT_THAT(CudaStatus(cudaErrorNoDevice, "cudaSetDevice(0)"),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("cudaErrorNoDevice")));
  EXPECT_THAT(CudaStatus(cudaErrorLaunchFailure, "kernel"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("cudaErrorLaunchFailure")));
}

TEST(DeviceBufferTest, HostBuffersRoundTripAndCheckRanges) {
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer buffer, DeviceBuffer::Allocate(MemorySpace::kHost, 400));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % 64, 0u);
  const std::vector<uint32_t> in = Seeded(100, 7);
  std::vector<uint32_t> out(100);
  ASSERT_THAT(buffer.CopyFromHost(Bytes(in)), IsOk());
  ASSERT_THAT(buffer.CopyToHost(Bytes(out)), IsOk());
  EXPECT_EQ(in, out);
  EXPECT_THAT(buffer.CopyFromHost(Bytes(in), 4),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr("400 bytes at offset 4 do not fit in 400")));
  DeviceBuffer moved = std::move(buffer);
  EXPECT_EQ(moved.size(), 400u);
  EXPECT_EQ(buffer.size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is empty
}

TEST(DeviceBufferTest, DeviceMemoryNeedsADevice) {
  if (HasDevice()) GTEST_SKIP() << "this machine has a CUDA device";
  EXPECT_THAT(DeviceBuffer::Allocate(MemorySpace::kDevice, 64),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("needs a CUDA device")));
  EXPECT_THAT(CudaStream::Create(0),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA device")));
}

TEST(DeviceBufferTest, DeviceAndPinnedRoundTripThroughAStream) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device on this machine";
  const size_t n = (size_t{1} << 20) + 3;
  const std::vector<uint32_t> in = Seeded(n, 11);
  std::vector<uint32_t> out(n);
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer pinned,
                            DeviceBuffer::Allocate(MemorySpace::kHostPinned, n * 4));
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer device, DeviceBuffer::Allocate(MemorySpace::kDevice, n * 4));
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer back, DeviceBuffer::Allocate(MemorySpace::kDevice, n * 4));
  ASSERT_THAT(pinned.CopyFromHost(Bytes(in)), IsOk());
  LOOM_ASSERT_OK_AND_ASSIGN(CudaStream stream, CudaStream::Create(0));
  LOOM_ASSERT_OK_AND_ASSIGN(CudaEvent start, CudaEvent::Create(0, /*timing=*/true));
  LOOM_ASSERT_OK_AND_ASSIGN(CudaEvent end, CudaEvent::Create(0, /*timing=*/true));
  ASSERT_THAT(start.Record(stream), IsOk());
  ASSERT_THAT(stream.CopyAsync(device.data(), pinned.data(), n * 4), IsOk());
  ASSERT_THAT(stream.CopyAsync(back.data(), device.data(), n * 4), IsOk());
  ASSERT_THAT(end.Record(stream), IsOk());
  ASSERT_THAT(end.Wait(absl::Now() + absl::Seconds(30)), IsOk());
  ASSERT_THAT(stream.Synchronize(absl::Now() + absl::Seconds(30)), IsOk());
  EXPECT_THAT(CudaEvent::ElapsedSeconds(start, end), IsOkAndHolds(::testing::Gt(0.0)));
  ASSERT_THAT(back.CopyToHost(Bytes(out)), IsOk());
  EXPECT_EQ(in, out);
  EXPECT_THAT(DeviceBuffer::Allocate(MemorySpace::kDevice, 64, /*device=*/999),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("device 999 is outside")));
}

}  // namespace
}  // namespace loom
