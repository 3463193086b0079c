// DevicePrefetchStream. Validate runs on every machine; the stream itself skips
// (reported as skipped) without a CUDA device.
//
// The ordering test holds the compute stream behind a gate at tensor 0 and walks the
// whole stream while it is held (the host never blocks in Next). Then, with depth d:
// uploads 0..d have landed (the copies ran while compute was held: overlap), no upload
// past d has (each needs a slot whose compute has not run: no overwrite of a slot in
// use), and no download has (each follows its compute). After the gate opens, every
// tensor's compute saw its own bytes and every download holds the computed result.
#include "offload/gpu/device_prefetch_stream.h"

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "core/gpu/cuda_status.h"
#include "core/gpu/cuda_stream.h"
#include "core/gpu/device_buffer.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload/gpu/device_stager.h"
#include "offload/gpu/internal/test_kernels.h"
#include "offload/host_pool.h"

namespace loom {
namespace {

using gpu_test_internal::Gate;
using ::testing::HasSubstr;

bool HasDevice() {
  const absl::StatusOr<int> count = CudaDeviceCountOrZero();
  return count.ok() && *count > 0;
}

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

// --- Validate: no device needed. -------------------------------------------------

TEST(DevicePrefetchValidateTest, NamesTheProblem) {
  std::vector<std::byte> four(4), eight(8);
  const std::vector<DeviceTensor> ok = {{"a", absl::MakeConstSpan(four), {}}};
  EXPECT_THAT(DevicePrefetchStream::Validate(ok, {.depth = 1}), IsOk());
  EXPECT_THAT(DevicePrefetchStream::Validate(ok, {.depth = 64}), IsOk());
  EXPECT_THAT(DevicePrefetchStream::Validate(ok, {.depth = 0}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("DevicePrefetchStream: depth is 0; it must be in [1, 64]")));
  EXPECT_THAT(DevicePrefetchStream::Validate(ok, {.depth = 65}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("depth is 65")));
  EXPECT_THAT(
      DevicePrefetchStream::Validate({}, {.depth = 1}),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("DevicePrefetchStream: no tensors")));
  EXPECT_THAT(
      DevicePrefetchStream::Validate({{"a", absl::MakeConstSpan(four), {}}, {"b", {}, {}}}, {}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("tensor 'b' (tensor 1) has no bytes to upload")));
  EXPECT_THAT(
      DevicePrefetchStream::Validate({{"a", absl::MakeConstSpan(four), absl::MakeSpan(eight)}}, {}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("tensor 'a' (tensor 0) downloads 8 bytes but uploads only 4")));
}

// --- With a device. -----------------------------------------------------------

struct Fixture {
  std::unique_ptr<DeviceStager> stager;
  CudaStream compute;
  std::unique_ptr<HostMemoryPool> pool;
};

absl::StatusOr<Fixture> MakeFixture(size_t budget) {
  Fixture f;
  LOOM_ASSIGN_OR_RETURN(f.stager, DeviceStager::Create({}));
  LOOM_ASSIGN_OR_RETURN(f.compute, CudaStream::Create(0));
  HostPoolOptions options;
  options.budget_bytes = budget;
  options.kind = HostMemoryKind::kPinned;
  LOOM_ASSIGN_OR_RETURN(f.pool, HostMemoryPool::Create(options));
  return f;
}

class DevicePrefetchOrderTest : public ::testing::TestWithParam<int> {};

TEST_P(DevicePrefetchOrderTest, CopiesOverlapComputeAndNeverOverwriteASlotInUse) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device on this machine";
  const int depth = GetParam();
  constexpr size_t kTensors = 6;
  LOOM_ASSERT_OK_AND_ASSIGN(Fixture f, MakeFixture(size_t{64} << 20));

  // Distinct sizes (the slots hold the largest) and distinct, seeded words.
  std::vector<HostBlock> in, out;
  std::vector<DeviceBuffer> seen;
  std::vector<DeviceTensor> tensors;
  for (size_t i = 0; i < kTensors; ++i) {
    const size_t words = (size_t{1} << 18) + 1000 * i + 1;
    LOOM_ASSERT_OK_AND_ASSIGN(HostBlock a, f.pool->Allocate(words * 4));
    LOOM_ASSERT_OK_AND_ASSIGN(HostBlock b, f.pool->Allocate(words * 4));
    uint32_t x = static_cast<uint32_t>(i + 1);
    for (uint32_t& w : a.As<uint32_t>()) w = x = x * 1664525u + 1013904223u;
    LOOM_ASSERT_OK_AND_ASSIGN(DeviceBuffer d,
                              DeviceBuffer::Allocate(MemorySpace::kDevice, words * 4));
    tensors.push_back({absl::StrCat("layer", i), a.bytes(), b.bytes()});
    in.push_back(std::move(a));
    out.push_back(std::move(b));
    seen.push_back(std::move(d));
  }

  Gate gate;
  ASSERT_EQ(gate.Init(), cudaSuccess);
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DevicePrefetchStream> stream,
                            DevicePrefetchStream::Create(*f.stager, tensors, {.depth = depth}));
  for (size_t k = 0; k <= kTensors; ++k) {
    LOOM_ASSERT_OK_AND_ASSIGN(std::optional<DeviceItem> item, stream->Next(f.compute));
    if (k == kTensors) {
      EXPECT_FALSE(item.has_value());
      break;
    }
    ASSERT_TRUE(item.has_value());
    ASSERT_EQ(item->index, k);
    EXPECT_EQ(*item->name, absl::StrCat("layer", k));
    ASSERT_EQ(item->data.size(), in[k].size());
    if (k == 0) {
      ASSERT_EQ(gate.Hold(f.compute.get()), cudaSuccess);
    }
    // What compute saw of tensor k, then a change the download must bring back.
    const size_t words = item->data.size() / 4;
    uint32_t* const data = reinterpret_cast<uint32_t*>(item->data.data());
    ASSERT_EQ(gpu_test_internal::LaunchCopyWords(data, reinterpret_cast<uint32_t*>(seen[k].data()),
                                                 words, f.compute.get()),
              cudaSuccess);
    ASSERT_EQ(gpu_test_internal::LaunchAddToWords(data, words, static_cast<uint32_t>(k + 1),
                                                  f.compute.get()),
              cudaSuccess);
  }

  // Compute is held at tensor 0; the first depth + 1 uploads still land.
  for (size_t i = 0; i <= static_cast<size_t>(depth) && i < kTensors; ++i) {
    bool done = false;
    const absl::Time deadline = Soon();
    while (!done && absl::Now() < deadline) {
      LOOM_ASSERT_OK_AND_ASSIGN(done, stream->Uploaded(i));
    }
    EXPECT_TRUE(done) << "upload " << i << " did not overlap the held compute";
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (size_t i = 0; i < kTensors; ++i) {
    if (i > static_cast<size_t>(depth)) {
      LOOM_ASSERT_OK_AND_ASSIGN(const bool early, stream->Uploaded(i));
      EXPECT_FALSE(early) << "upload " << i << " overwrote the slot of tensor " << i - depth - 1
                          << " before its compute ran";
    }
    LOOM_ASSERT_OK_AND_ASSIGN(const bool downloaded, stream->Downloaded(i));
    EXPECT_FALSE(downloaded) << "download " << i << " ran before its compute";
  }
  EXPECT_THAT(stream->Finish(absl::Now() + absl::Milliseconds(20)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("DevicePrefetchStream: ")));

  gate.Open();
  ASSERT_THAT(stream->Finish(Soon()), IsOk());
  ASSERT_THAT(f.compute.Synchronize(Soon()), IsOk());
  EXPECT_FALSE(gate.timed_out());
  for (size_t k = 0; k < kTensors; ++k) {
    SCOPED_TRACE(k);
    LOOM_ASSERT_OK_AND_ASSIGN(const bool downloaded, stream->Downloaded(k));
    EXPECT_TRUE(downloaded);
    std::vector<uint32_t> saw(in[k].size() / 4);
    ASSERT_THAT(seen[k].CopyToHost(
                    absl::MakeSpan(reinterpret_cast<std::byte*>(saw.data()), saw.size() * 4)),
                IsOk());
    EXPECT_EQ(std::memcmp(saw.data(), in[k].data(), in[k].size()), 0)
        << "compute on tensor " << k << " saw other bytes";
    const absl::Span<const uint32_t> want = in[k].As<uint32_t>();
    const absl::Span<const uint32_t> got = out[k].As<uint32_t>();
    size_t wrong = 0;
    for (size_t i = 0; i < want.size(); ++i)
      wrong += got[i] != want[i] + static_cast<uint32_t>(k + 1);
    EXPECT_EQ(wrong, 0u) << "download of tensor " << k;
  }
  EXPECT_THAT(stream->Uploaded(kTensors),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("tensor 6 of 6 does not exist")));
}

INSTANTIATE_TEST_SUITE_P(Depths, DevicePrefetchOrderTest, ::testing::Values(1, 2, 5, 8));

TEST(DevicePrefetchStreamTest, WritesBackIntoTheUploadedMemory) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device on this machine";
  LOOM_ASSERT_OK_AND_ASSIGN(Fixture f, MakeFixture(size_t{16} << 20));
  std::vector<HostBlock> blocks;
  std::vector<std::vector<uint32_t>> want;
  std::vector<DeviceTensor> tensors;
  for (size_t i = 0; i < 5; ++i) {
    const size_t words = 1000 * (i + 1) + 3;
    LOOM_ASSERT_OK_AND_ASSIGN(HostBlock b, f.pool->Allocate(words * 4));
    uint32_t x = static_cast<uint32_t>(100 + i);
    for (uint32_t& w : b.As<uint32_t>()) w = x = x * 1664525u + 1013904223u;
    want.emplace_back(b.As<uint32_t>().begin(), b.As<uint32_t>().end());
    // The first half comes back (as the params and moments do, not the grads).
    tensors.push_back({absl::StrCat("t", i), b.bytes(), b.bytes().first(words / 2 * 4)});
    for (size_t w = 0; w < words / 2; ++w) want.back()[w] += 3;
    blocks.push_back(std::move(b));
  }
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DevicePrefetchStream> stream,
                            DevicePrefetchStream::Create(*f.stager, tensors, {.depth = 1}));
  while (true) {
    LOOM_ASSERT_OK_AND_ASSIGN(std::optional<DeviceItem> item, stream->Next(f.compute));
    if (!item.has_value()) break;
    ASSERT_EQ(gpu_test_internal::LaunchAddToWords(reinterpret_cast<uint32_t*>(item->data.data()),
                                                  item->data.size() / 4, 3, f.compute.get()),
              cudaSuccess);
  }
  ASSERT_THAT(stream->Finish(Soon()), IsOk());
  for (size_t i = 0; i < blocks.size(); ++i) {
    const absl::Span<const uint32_t> got = blocks[i].As<uint32_t>();
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want[i].begin())) << "tensor " << i;
  }
  // After the end: nullopt again, nothing enqueued.
  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<DeviceItem> after, stream->Next(f.compute));
  EXPECT_FALSE(after.has_value());
}

TEST(DevicePrefetchStreamTest, ErrorsNameTheTensorAndTheStream) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device on this machine";
  LOOM_ASSERT_OK_AND_ASSIGN(Fixture f, MakeFixture(size_t{1} << 20));
  std::vector<std::byte> pageable(256);
  EXPECT_THAT(
      DevicePrefetchStream::Create(*f.stager, {{"w", absl::MakeConstSpan(pageable), {}}}, {}),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("DevicePrefetchStream: upload of 'w' (tensor 0): DeviceStager::Upload: "
                         "host (0x")));

  LOOM_ASSERT_OK_AND_ASSIGN(HostBlock a, f.pool->Allocate(256));
  LOOM_ASSERT_OK_AND_ASSIGN(HostBlock b, f.pool->Allocate(256));
  LOOM_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DevicePrefetchStream> stream,
      DevicePrefetchStream::Create(*f.stager, {{"a", a.bytes(), {}}, {"b", b.bytes(), {}}},
                                   {.depth = 3}));
  EXPECT_EQ(stream->slot_bytes(), 256u);
  EXPECT_THAT(
      stream->Next(*std::make_unique<CudaStream>()),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("the compute stream is empty")));
  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<DeviceItem> first, stream->Next(f.compute));
  ASSERT_TRUE(first.has_value());
  LOOM_ASSERT_OK_AND_ASSIGN(CudaStream other, CudaStream::Create(0));
  EXPECT_THAT(stream->Next(other), StatusIs(absl::StatusCode::kFailedPrecondition,
                                            HasSubstr("another compute stream than before")));
  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<DeviceItem> second, stream->Next(f.compute));
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->index, 1u);
  EXPECT_THAT(stream->Finish(Soon()), IsOk());
}

}  // namespace
}  // namespace loom
