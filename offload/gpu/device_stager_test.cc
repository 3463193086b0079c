// DeviceStager. The option checks run on every machine; copies, event ordering and the
// argument checks that ask the driver skip (reported as skipped) without a CUDA device.
#include "offload/gpu/device_stager.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "core/gpu/cuda_status.h"
#include "core/gpu/cuda_stream.h"
#include "core/gpu/device_buffer.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload/gpu/internal/test_kernels.h"
#include "offload/host_pool.h"

namespace loom {
namespace {

using gpu_test_internal::Gate;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

bool HasDevice() {
  const absl::StatusOr<int> count = CudaDeviceCountOrZero();
  return count.ok() && *count > 0;
}

absl::Time Soon() { return absl::Now() + absl::Seconds(20); }

void FillSeeded(absl::Span<std::byte> bytes, uint32_t seed) {
  uint32_t x = seed;
  for (std::byte& b : bytes) {
    x = x * 1664525u + 1013904223u;
    b = std::byte(x >> 24);
  }
}

absl::Span<std::byte> Span(DeviceBuffer& buffer) {
  return absl::MakeSpan(buffer.data(), buffer.size());
}

std::unique_ptr<HostMemoryPool> PinnedPool(size_t budget) {
  HostPoolOptions options;
  options.budget_bytes = budget;
  options.kind = HostMemoryKind::kPinned;
  absl::StatusOr<std::unique_ptr<HostMemoryPool>> pool = HostMemoryPool::Create(options);
  EXPECT_THAT(pool.status(), IsOk());
  return pool.ok() ? *std::move(pool) : nullptr;
}

TEST(DeviceStagerOptionsTest, NegativeDeviceIsRefused) {
  EXPECT_THAT(DeviceStager::Create({.device = -1}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("DeviceStager: device is -1; it must be >= 0")));
}

TEST(DeviceStagerOptionsTest, NeedsADevice) {
  if (HasDevice()) GTEST_SKIP() << "this machine has a CUDA device";
  EXPECT_THAT(DeviceStager::Create({.device = 0}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA device")));
}

TEST(DeviceStagerTest, DeviceOutsideTheCountIsRefused) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device on this machine";
  LOOM_ASSERT_OK_AND_ASSIGN(const int count, CudaDeviceCountOrZero());
  EXPECT_THAT(DeviceStager::Create({.device = count}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is outside [0, ")));
}

TEST(DeviceStagerTest, RoundTripsAreBitwiseEqual) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device on this machine";
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceStager> stager, DeviceStager::Create({}));
  std::unique_ptr<HostMemoryPool> pool = PinnedPool(size_t{160} << 20);
  ASSERT_NE(pool, nullptr);
  for (const size_t bytes : {size_t{1}, size_t{4097}, (size_t{1} << 20) + 3, size_t{64} << 20}) {
    SCOPED_TRACE(bytes);
    LOOM_ASSERT_OK_AND_ASSIGN(HostBlock in, pool->Allocate(bytes));
    LOOM_ASSERT_OK_AND_ASSIGN(HostBlock out, pool->Allocate(bytes));
    FillSeeded(in.bytes(), static_cast<uint32_t>(bytes));
    LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer device,
                              DeviceBuffer::Allocate(MemorySpace::kDevice, bytes));
    LOOM_ASSERT_OK_AND_ASSIGN(CudaEvent up, stager->Upload(in.bytes(), Span(device)));
    // The download is on the other copy stream: only the event orders it after the upload.
    LOOM_ASSERT_OK_AND_ASSIGN(CudaEvent down, stager->Download(Span(device), out.bytes(), &up));
    ASSERT_THAT(down.Wait(Soon()), IsOk());
    EXPECT_EQ(std::memcmp(in.data(), out.data(), bytes), 0);
  }
  EXPECT_THAT(stager->Synchronize(Soon()), IsOk());
}

// Compute waits for the copy it needs and for no other: with the upload stream held
// behind a gate after copy A, a kernel that waits on A's event finishes, and B (enqueued
// after the gate) has not landed.
TEST(DeviceStagerTest, ComputeWaitsOnlyForTheCopyItNeeds) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device on this machine";
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceStager> stager, DeviceStager::Create({}));
  LOOM_ASSERT_OK_AND_ASSIGN(CudaStream compute, CudaStream::Create(0));
  std::unique_ptr<HostMemoryPool> pool = PinnedPool(size_t{16} << 20);
  ASSERT_NE(pool, nullptr);
  constexpr size_t kWords = (1 << 20) + 3;
  constexpr size_t kBytes = kWords * 4;
  LOOM_ASSERT_OK_AND_ASSIGN(HostBlock a, pool->Allocate(kBytes));
  LOOM_ASSERT_OK_AND_ASSIGN(HostBlock b, pool->Allocate(kBytes));
  LOOM_ASSERT_OK_AND_ASSIGN(HostBlock seen, pool->Allocate(kBytes));
  FillSeeded(a.bytes(), 1);
  FillSeeded(b.bytes(), 2);
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer slot_a,
                            DeviceBuffer::Allocate(MemorySpace::kDevice, kBytes));
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer slot_b,
                            DeviceBuffer::Allocate(MemorySpace::kDevice, kBytes));
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer copy,
                            DeviceBuffer::Allocate(MemorySpace::kDevice, kBytes));

  Gate gate;
  ASSERT_EQ(gate.Init(), cudaSuccess);
  LOOM_ASSERT_OK_AND_ASSIGN(CudaEvent landed_a, stager->Upload(a.bytes(), Span(slot_a)));
  ASSERT_EQ(gate.Hold(stager->upload_stream().get()), cudaSuccess);
  LOOM_ASSERT_OK_AND_ASSIGN(CudaEvent landed_b, stager->Upload(b.bytes(), Span(slot_b)));

  ASSERT_THAT(compute.WaitFor(landed_a), IsOk());
  ASSERT_EQ(gpu_test_internal::LaunchCopyWords(reinterpret_cast<const uint32_t*>(slot_a.data()),
                                               reinterpret_cast<uint32_t*>(copy.data()), kWords,
                                               compute.get()),
            cudaSuccess);
  LOOM_ASSERT_OK_AND_ASSIGN(CudaEvent computed, CudaEvent::Create(0));
  ASSERT_THAT(computed.Record(compute), IsOk());

  EXPECT_THAT(computed.Wait(Soon()), IsOk()) << "compute waited for more than copy A";
  LOOM_ASSERT_OK_AND_ASSIGN(const bool b_done, landed_b.Done());
  EXPECT_FALSE(b_done) << "copy B ran past the gate";
  // The host wait has a deadline: the held stream is DeadlineExceeded, not a hang.
  EXPECT_THAT(
      stager->Synchronize(absl::Now() + absl::Milliseconds(50)),
      StatusIs(absl::StatusCode::kDeadlineExceeded,
               HasSubstr("DeviceStager upload stream: CUDA stream on device 0 still busy")));

  gate.Open();
  EXPECT_THAT(landed_b.Wait(Soon()), IsOk());
  EXPECT_FALSE(gate.timed_out());
  ASSERT_THAT(copy.CopyToHost(seen.bytes()), IsOk());
  EXPECT_EQ(std::memcmp(seen.data(), a.data(), kBytes), 0);
  EXPECT_THAT(stager->Synchronize(Soon()), IsOk());
}

// A download ordered after compute does not start before it: with compute held, the
// download's event stays pending; once open, the host gets the computed words.
TEST(DeviceStagerTest, DownloadWaitsForTheComputeItFollows) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device on this machine";
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceStager> stager, DeviceStager::Create({}));
  LOOM_ASSERT_OK_AND_ASSIGN(CudaStream compute, CudaStream::Create(0));
  std::unique_ptr<HostMemoryPool> pool = PinnedPool(size_t{8} << 20);
  ASSERT_NE(pool, nullptr);
  constexpr size_t kWords = 100003;
  LOOM_ASSERT_OK_AND_ASSIGN(HostBlock in, pool->Allocate(kWords * 4));
  LOOM_ASSERT_OK_AND_ASSIGN(HostBlock out, pool->Allocate(kWords * 4));
  FillSeeded(in.bytes(), 3);
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer slot,
                            DeviceBuffer::Allocate(MemorySpace::kDevice, kWords * 4));

  Gate gate;
  ASSERT_EQ(gate.Init(), cudaSuccess);
  LOOM_ASSERT_OK_AND_ASSIGN(CudaEvent landed, stager->Upload(in.bytes(), Span(slot)));
  ASSERT_THAT(compute.WaitFor(landed), IsOk());
  ASSERT_EQ(gate.Hold(compute.get()), cudaSuccess);
  ASSERT_EQ(gpu_test_internal::LaunchAddToWords(reinterpret_cast<uint32_t*>(slot.data()), kWords, 7,
                                                compute.get()),
            cudaSuccess);
  LOOM_ASSERT_OK_AND_ASSIGN(CudaEvent computed, CudaEvent::Create(0));
  ASSERT_THAT(computed.Record(compute), IsOk());
  LOOM_ASSERT_OK_AND_ASSIGN(CudaEvent back, stager->Download(Span(slot), out.bytes(), &computed));

  EXPECT_THAT(landed.Wait(Soon()), IsOk());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  LOOM_ASSERT_OK_AND_ASSIGN(const bool early, back.Done());
  EXPECT_FALSE(early) << "the download did not wait for the compute";
  EXPECT_THAT(back.Wait(absl::Now() + absl::Milliseconds(20)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("not reached after")));

  gate.Open();
  ASSERT_THAT(back.Wait(Soon()), IsOk());
  EXPECT_FALSE(gate.timed_out());
  const absl::Span<const uint32_t> want = in.As<uint32_t>();
  const absl::Span<const uint32_t> got = out.As<uint32_t>();
  size_t wrong = 0;
  for (size_t i = 0; i < kWords; ++i) wrong += got[i] != want[i] + 7;
  EXPECT_EQ(wrong, 0u);
}

TEST(DeviceStagerTest, ArgumentsAreCheckedNamingTheSpan) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device on this machine";
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceStager> stager, DeviceStager::Create({}));
  std::unique_ptr<HostMemoryPool> pool = PinnedPool(1 << 20);
  ASSERT_NE(pool, nullptr);
  LOOM_ASSERT_OK_AND_ASSIGN(HostBlock pinned, pool->Allocate(128));
  LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer device, DeviceBuffer::Allocate(MemorySpace::kDevice, 128));
  std::vector<std::byte> pageable(128);

  EXPECT_THAT(stager->Upload(pinned.bytes().first(64), Span(device)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("DeviceStager::Upload: host has 64 bytes but device has 128")));
  EXPECT_THAT(stager->Download(Span(device), pinned.bytes().first(64)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("DeviceStager::Download: device has 128 bytes but host has 64")));
  EXPECT_THAT(stager->Upload(absl::MakeConstSpan(pageable), Span(device)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       MatchesRegex("DeviceStager::Upload: host \\(0x[0-9a-f]+\\) is pageable host "
                                    "memory, not pinned host memory .*")));
  EXPECT_THAT(stager->Upload(pinned.bytes(), pinned.bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("device (0x")));
  EXPECT_THAT(stager->Download(Span(device), Span(device)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("host (0x")));

  // A stager that allows pageable memory copies it, synchronously as CUDA does.
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DeviceStager> lenient,
                            DeviceStager::Create({.device = 0, .require_pinned = false}));
  FillSeeded(absl::MakeSpan(pageable), 9);
  std::vector<std::byte> back(128);
  LOOM_ASSERT_OK_AND_ASSIGN(CudaEvent up,
                            lenient->Upload(absl::MakeConstSpan(pageable), Span(device)));
  LOOM_ASSERT_OK_AND_ASSIGN(CudaEvent down,
                            lenient->Download(Span(device), absl::MakeSpan(back), &up));
  ASSERT_THAT(down.Wait(Soon()), IsOk());
  EXPECT_EQ(pageable, back);
}

}  // namespace
}  // namespace loom
