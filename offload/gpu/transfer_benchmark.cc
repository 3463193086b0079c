// Host <-> device copy throughput, 1 MiB .. 1 GiB, GB/s (bytes_per_second):
//
//   BM_H2D_Stager / BM_D2H_Stager     DeviceStager::Upload / Download from pinned memory
//                                     (a HostMemoryPool block), waiting on its event
//   BM_H2D_Memcpy / BM_D2H_Memcpy     a plain cudaMemcpyAsync of the same pinned bytes on
//                                     a stream, then a stream sync: the copy bound
//   BM_H2D_Pageable / BM_D2H_Pageable the same plain copy from pageable memory
//
// Stager / Memcpy at the same size is the stager's share of the bound; Pageable shows
// what pinning buys. Each is a wall-clock time per copy (UseRealTime), the host waiting
// on the copy; buffers are allocated once (1 GiB of each kind) and reused.
//
//   ./bazelw run --config=cuda //offload/gpu:transfer_benchmark
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/time/clock.h"
#include "benchmark/benchmark.h"
#include "core/gpu/cuda_status.h"
#include "core/gpu/cuda_stream.h"
#include "core/gpu/device_buffer.h"
#include "offload/gpu/device_stager.h"
#include "offload/host_pool.h"

namespace loom {
namespace {

constexpr size_t kMaxBytes = size_t{1} << 30;

struct Buffers {
  std::unique_ptr<DeviceStager> stager;
  CudaStream stream;
  std::unique_ptr<HostMemoryPool> pool;
  HostBlock pinned;
  DeviceBuffer pageable;
  DeviceBuffer device;
};

// The buffers, made on first use; the error (as text) where they cannot be.
Buffers* GetBuffers(std::string* error) {
  static std::string* const failure = new std::string;
  static Buffers* const buffers = [&]() -> Buffers* {
    const absl::StatusOr<int> count = CudaDeviceCountOrZero();
    if (!count.ok() || *count == 0) {
      *failure = "no CUDA device";
      return nullptr;
    }
    auto b = std::make_unique<Buffers>();
    absl::StatusOr<std::unique_ptr<DeviceStager>> stager = DeviceStager::Create({});
    absl::StatusOr<CudaStream> stream = CudaStream::Create(0);
    absl::StatusOr<std::unique_ptr<HostMemoryPool>> pool =
        HostMemoryPool::Create({.budget_bytes = kMaxBytes, .kind = HostMemoryKind::kPinned});
    absl::StatusOr<DeviceBuffer> pageable = DeviceBuffer::Allocate(MemorySpace::kHost, kMaxBytes);
    absl::StatusOr<DeviceBuffer> device = DeviceBuffer::Allocate(MemorySpace::kDevice, kMaxBytes);
    for (const absl::Status& s :
         {stager.status(), stream.status(), pool.status(), pageable.status(), device.status()}) {
      if (!s.ok()) {
        *failure = std::string(s.message());
        return nullptr;
      }
    }
    absl::StatusOr<HostBlock> pinned = (*pool)->Allocate(kMaxBytes);
    if (!pinned.ok()) {
      *failure = std::string(pinned.status().message());
      return nullptr;
    }
    b->stager = *std::move(stager);
    b->stream = *std::move(stream);
    b->pool = *std::move(pool);
    b->pinned = *std::move(pinned);
    b->pageable = *std::move(pageable);
    b->device = *std::move(device);
    // Pageable pages touched once, so the first timed copy does not fault them in.
    for (size_t i = 0; i < kMaxBytes; i += 4096) b->pageable.data()[i] = std::byte{1};
    return b.release();
  }();
  *error = *failure;
  return buffers;
}

absl::Time Deadline() { return absl::Now() + absl::Seconds(60); }

enum class Path { kStager, kMemcpy, kPageable };

void Transfer(benchmark::State& state, bool to_device, Path path) {
  std::string error;
  Buffers* b = GetBuffers(&error);
  if (b == nullptr) {
    state.SkipWithError(error.c_str());
    return;
  }
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::byte* const host = path == Path::kPageable ? b->pageable.data() : b->pinned.data();
  std::byte* const device = b->device.data();
  for (auto _ : state) {
    absl::Status status;
    if (path == Path::kStager) {
      absl::StatusOr<CudaEvent> done =
          to_device
              ? b->stager->Upload(absl::MakeConstSpan(host, bytes), absl::MakeSpan(device, bytes))
              : b->stager->Download(absl::MakeConstSpan(device, bytes),
                                    absl::MakeSpan(host, bytes));
      status = done.ok() ? done->Wait(Deadline()) : done.status();
    } else {
      status = CudaStatus(
          cudaMemcpyAsync(to_device ? static_cast<void*>(device) : static_cast<void*>(host),
                          to_device ? static_cast<void*>(host) : static_cast<void*>(device), bytes,
                          to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                          b->stream.get()),
          "cudaMemcpyAsync");
      if (status.ok()) status = b->stream.Synchronize(Deadline());
    }
    if (!status.ok()) {
      state.SkipWithError(std::string(status.message()).c_str());
      return;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

void BM_H2D_Stager(benchmark::State& state) { Transfer(state, true, Path::kStager); }
void BM_H2D_Memcpy(benchmark::State& state) { Transfer(state, true, Path::kMemcpy); }
void BM_H2D_Pageable(benchmark::State& state) { Transfer(state, true, Path::kPageable); }
void BM_D2H_Stager(benchmark::State& state) { Transfer(state, false, Path::kStager); }
void BM_D2H_Memcpy(benchmark::State& state) { Transfer(state, false, Path::kMemcpy); }
void BM_D2H_Pageable(benchmark::State& state) { Transfer(state, false, Path::kPageable); }

void Sizes(benchmark::internal::Benchmark* b) {
  b->RangeMultiplier(4)->Range(1 << 20, 1 << 30)->UseRealTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_H2D_Stager)->Apply(Sizes);
BENCHMARK(BM_H2D_Memcpy)->Apply(Sizes);
BENCHMARK(BM_H2D_Pageable)->Apply(Sizes);
BENCHMARK(BM_D2H_Stager)->Apply(Sizes);
BENCHMARK(BM_D2H_Memcpy)->Apply(Sizes);
BENCHMARK(BM_D2H_Pageable)->Apply(Sizes);

}  // namespace
}  // namespace loom
