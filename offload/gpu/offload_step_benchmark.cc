// One optimizer step with the state offloaded: each layer's params, moments and grads
// live in pinned host memory ([params | exp_avg | exp_avg_sq | grads], f32, 16 B per
// parameter), are streamed to the device (DevicePrefetchStream, depth 1), stepped there
// (GpuAdamWStep) and the first three streamed back (12 B per parameter), layer i+1's
// upload and layer i-1's download overlapping layer i's step.
//
// Each iteration measures, back to back on the same buffers:
//   transfer  the stream alone: every upload and download, no compute
//   compute   GpuAdamWStep alone over the same layers, on state already on the device
//   offload   the stream with the step (the reported time, UseManualTime)
// and reports vs_max = offload / max(compute, transfer): 1.0 is perfect overlap, and
// without overlap it would be about 1 + min / max. All times are wall clock, host
// waiting (with deadlines) until the device is done; counters are per-iteration means.
//
//   ./bazelw run --config=cuda //offload/gpu:offload_step_benchmark
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "benchmark/benchmark.h"
#include "core/gpu/cuda_status.h"
#include "core/gpu/cuda_stream.h"
#include "core/gpu/device_buffer.h"
#include "core/status_macros.h"
#include "offload/adamw/cpu_adamw.h"
#include "offload/gpu/device_prefetch_stream.h"
#include "offload/gpu/device_stager.h"
#include "offload/gpu/gpu_adamw.h"
#include "offload/host_pool.h"

namespace loom {
namespace {

constexpr int kLayers = 8;
constexpr int kDepth = 1;

absl::Time Deadline() { return absl::Now() + absl::Seconds(60); }

// The step's four arrays inside one layer's bytes (host or device).
GpuAdamWTensors Split(absl::Span<std::byte> layer) {
  const size_t n = layer.size() / 16;
  float* const f = reinterpret_cast<float*>(layer.data());
  return {absl::MakeSpan(f, n), absl::MakeConstSpan(f + 3 * n, n), absl::MakeSpan(f + n, n),
          absl::MakeSpan(f + 2 * n, n)};
}

struct Setup {
  std::unique_ptr<DeviceStager> stager;
  CudaStream compute;
  std::unique_ptr<HostMemoryPool> pool;
  std::vector<HostBlock> layers;
  std::vector<DeviceTensor> tensors;
  std::vector<DeviceBuffer> resident;  // compute alone: kDepth + 1 layers on the device
};

absl::StatusOr<Setup> MakeSetup(size_t params_per_layer) {
  LOOM_ASSIGN_OR_RETURN(const int devices, CudaDeviceCountOrZero());
  if (devices == 0) return absl::FailedPreconditionError("no CUDA device");
  const size_t bytes = params_per_layer * 16;
  Setup s;
  LOOM_ASSIGN_OR_RETURN(s.stager, DeviceStager::Create({}));
  LOOM_ASSIGN_OR_RETURN(s.compute, CudaStream::Create(0));
  LOOM_ASSIGN_OR_RETURN(s.pool, HostMemoryPool::Create({.budget_bytes = bytes * kLayers,
                                                        .kind = HostMemoryKind::kPinned}));
  for (int l = 0; l < kLayers; ++l) {
    LOOM_ASSIGN_OR_RETURN(HostBlock block, s.pool->Allocate(bytes));
    // Params and grads set (the pool zeroes the moments); grads follow the params.
    const absl::Span<float> f = block.As<float>();
    for (size_t i = 0; i < params_per_layer; ++i) {
      f[i] = 0.01f * static_cast<float>((i * 7 + l) % 101) - 0.5f;
      f[3 * params_per_layer + i] = 1e-3f * static_cast<float>((i * 13 + l) % 97) - 0.05f;
    }
    s.tensors.push_back({"layer", block.bytes(), block.bytes().first(params_per_layer * 12)});
    s.layers.push_back(std::move(block));
  }
  for (int r = 0; r < kDepth + 1; ++r) {
    LOOM_ASSIGN_OR_RETURN(DeviceBuffer d, DeviceBuffer::Allocate(MemorySpace::kDevice, bytes));
    LOOM_CUDA_RETURN_IF_ERROR(cudaMemset(d.data(), 0, bytes));
    s.resident.push_back(std::move(d));
  }
  LOOM_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return s;
}

// One pass over the layers through the stream; `step` > 0 runs AdamW on each.
absl::Status Streamed(Setup& s, int64_t step) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<DevicePrefetchStream> stream,
                        DevicePrefetchStream::Create(*s.stager, s.tensors, {.depth = kDepth}));
  AdamWHyper hyper;
  hyper.step = step;
  while (true) {
    LOOM_ASSIGN_OR_RETURN(std::optional<DeviceItem> item, stream->Next(s.compute));
    if (!item.has_value()) break;
    if (step > 0) LOOM_RETURN_IF_ERROR(GpuAdamWStep(hyper, Split(item->data), s.compute));
  }
  LOOM_RETURN_IF_ERROR(stream->Finish(Deadline()));
  return s.compute.Synchronize(Deadline());
}

absl::Status ComputeAlone(Setup& s, int64_t step) {
  AdamWHyper hyper;
  hyper.step = step;
  for (int l = 0; l < kLayers; ++l) {
    DeviceBuffer& d = s.resident[l % s.resident.size()];
    LOOM_RETURN_IF_ERROR(GpuAdamWStep(hyper, Split(absl::MakeSpan(d.data(), d.size())), s.compute));
  }
  return s.compute.Synchronize(Deadline());
}

template <typename F>
absl::StatusOr<double> Seconds(F f) {
  const absl::Time start = absl::Now();
  LOOM_RETURN_IF_ERROR(f());
  return absl::ToDoubleSeconds(absl::Now() - start);
}

void BM_OffloadStep(benchmark::State& state) {
  const size_t params = static_cast<size_t>(state.range(0));
  absl::StatusOr<Setup> setup = MakeSetup(params);
  if (!setup.ok()) {
    state.SkipWithError(std::string(setup.status().message()).c_str());
    return;
  }
  double transfer = 0, compute = 0, offload = 0;
  int64_t step = 0;
  for (auto _ : state) {
    ++step;
    absl::StatusOr<double> t = Seconds([&] { return Streamed(*setup, 0); });
    absl::StatusOr<double> c = Seconds([&] { return ComputeAlone(*setup, step); });
    absl::StatusOr<double> o = Seconds([&] { return Streamed(*setup, step); });
    for (const absl::Status& s : {t.status(), c.status(), o.status()}) {
      if (!s.ok()) {
        state.SkipWithError(std::string(s.message()).c_str());
        return;
      }
    }
    transfer += *t;
    compute += *c;
    offload += *o;
    state.SetIterationTime(*o);
  }
  const double n = static_cast<double>(state.iterations());
  state.counters["transfer_ms"] = 1e3 * transfer / n;
  state.counters["compute_ms"] = 1e3 * compute / n;
  state.counters["offload_ms"] = 1e3 * offload / n;
  state.counters["vs_max"] = offload / std::max(compute, transfer);
  state.counters["serial/offload"] = (compute + transfer) / offload;
  // Bytes over the bus per step: 16 B/param up, 12 B/param down.
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * kLayers *
                          static_cast<int64_t>(params) * 28);
}

BENCHMARK(BM_OffloadStep)
    ->ArgName("params_per_layer")
    ->RangeMultiplier(4)
    ->Range(1 << 18, 1 << 24)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace loom
