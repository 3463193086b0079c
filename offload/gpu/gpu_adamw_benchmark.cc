// GpuAdamWStep's speed against the bound it cannot beat and against the CPU step.
//
// AdamW on f32 state reads params, grads, m and v (16 B/param) and writes params, m and
// v (12 B/param): 28 B/param at HBM speed is the floor. Three cases, one binary:
//   BM_GpuAdamW     the step on device-resident state (CUDA events around the kernel)
//   BM_D2DCopy      cudaMemcpyAsync of 28 B/param worth of bytes (14 read + 14 written),
//                   the achievable HBM rate the step is held to
//   BM_CpuAdamW     AdamWStep (offload/adamw) on the host, every core, f32 state
// Each reports params_per_s; bytes_per_second counts 28 B/param (bytes read + written).
// Inputs are seeded and distinct; a step's result is not checked here (gpu_adamw_test
// holds the GPU step to the CPU step's bits).
//
//   ./bazelw run --config=cuda //offload/gpu:gpu_adamw_benchmark
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "benchmark/benchmark.h"
#include "core/gpu/cuda_status.h"
#include "core/gpu/cuda_stream.h"
#include "core/gpu/device_buffer.h"
#include "core/status_macros.h"
#include "offload/adamw/cpu_adamw.h"
#include "offload/gpu/gpu_adamw.h"

namespace loom {
namespace {

constexpr int64_t kBytesPerParam = 28;


// Seeded, distinct values in about [-0.5, 0.5) (a small LCG; the bits don't matter here).
void Fill(absl::Span<float> out, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (float& f : out) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) * (1.0f / 16777216.0f) - 0.5f;
  }
}

struct DeviceState {
  CudaStream stream;
  DeviceBuffer state;  // [params | grads | m | v], f32
  size_t n = 0;
  GpuAdamWTensors tensors() {
    float* f = reinterpret_cast<float*>(state.data());
    return {absl::MakeSpan(f, n), absl::MakeConstSpan(f + n, n), absl::MakeSpan(f + 2 * n, n),
            absl::MakeSpan(f + 3 * n, n)};
  }
};

absl::StatusOr<DeviceState> MakeDeviceState(size_t n) {
  LOOM_ASSIGN_OR_RETURN(const int devices, CudaDeviceCountOrZero());
  if (devices == 0) return absl::FailedPreconditionError("no CUDA device");
  DeviceState s;
  s.n = n;
  LOOM_ASSIGN_OR_RETURN(s.stream, CudaStream::Create(0));
  LOOM_ASSIGN_OR_RETURN(s.state, DeviceBuffer::Allocate(MemorySpace::kDevice, 16 * n));
  std::vector<float> host(4 * n);
  Fill(absl::MakeSpan(host).first(2 * n), 7);
  for (size_t i = 2 * n; i < 4 * n; ++i) host[i] = 0.0f;
  LOOM_RETURN_IF_ERROR(s.state.CopyFromHost(absl::MakeConstSpan(
      reinterpret_cast<const std::byte*>(host.data()), host.size() * sizeof(float))));
  return s;
}

// Times `enqueue` (work on `stream`) between two timing CudaEvents; returns the
// device seconds. The host waits at most a minute.
template <typename F>
absl::StatusOr<double> EventSeconds(const CudaStream& stream, F enqueue) {
  LOOM_ASSIGN_OR_RETURN(CudaEvent start, CudaEvent::Create(stream.device(), /*timing=*/true));
  LOOM_ASSIGN_OR_RETURN(CudaEvent stop, CudaEvent::Create(stream.device(), /*timing=*/true));
  LOOM_RETURN_IF_ERROR(start.Record(stream));
  LOOM_RETURN_IF_ERROR(enqueue());
  LOOM_RETURN_IF_ERROR(stop.Record(stream));
  LOOM_RETURN_IF_ERROR(stop.Wait(absl::Now() + absl::Seconds(60)));
  return CudaEvent::ElapsedSeconds(start, stop);
}

void Report(benchmark::State& state, size_t n) {
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(n));
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(n) * kBytesPerParam);
  state.counters["params_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * static_cast<double>(n),
                         benchmark::Counter::kIsRate);
}

void BM_GpuAdamW(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  absl::StatusOr<DeviceState> s = MakeDeviceState(n);
  if (!s.ok()) {
    state.SkipWithError(std::string(s.status().message()).c_str());
    return;
  }
  AdamWHyper hyper;
  int64_t step = 0;
  for (auto _ : state) {
    hyper.step = ++step;
    absl::StatusOr<double> t = EventSeconds(s->stream, [&] {
      return GpuAdamWStep(hyper, s->tensors(), s->stream);
    });
    if (!t.ok()) {
      state.SkipWithError(std::string(t.status().message()).c_str());
      return;
    }
    state.SetIterationTime(*t);
  }
  Report(state, n);
}

void BM_D2DCopy(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  absl::StatusOr<DeviceState> s = MakeDeviceState(n);
  if (!s.ok()) {
    state.SkipWithError(std::string(s.status().message()).c_str());
    return;
  }
  // 7n bytes there and back: 14 B/param read and 14 written, the step's 28 B/param.
  const size_t bytes = 7 * n;
  for (auto _ : state) {
    absl::StatusOr<double> t = EventSeconds(s->stream, [&]() -> absl::Status {
      std::byte* base = s->state.data();
      LOOM_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(base + 8 * n, base, bytes, cudaMemcpyDeviceToDevice, s->stream.get()));
      LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(base, base + 8 * n, bytes,
                                                cudaMemcpyDeviceToDevice, s->stream.get()));
      return absl::OkStatus();
    });
    if (!t.ok()) {
      state.SkipWithError(std::string(t.status().message()).c_str());
      return;
    }
    state.SetIterationTime(*t);
  }
  Report(state, n);
}

void BM_CpuAdamW(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  std::vector<float> params(n), grads(n);
  Fill(absl::MakeSpan(params), 7);
  Fill(absl::MakeSpan(grads), 11);
  absl::StatusOr<AdamWState> adam = AdamWState::Create(static_cast<int64_t>(n), StateFormat::kF32);
  if (!adam.ok()) {
    state.SkipWithError(std::string(adam.status().message()).c_str());
    return;
  }
  AdamWOptions options;
  options.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  AdamWHyper hyper;
  int64_t step = 0;
  for (auto _ : state) {
    hyper.step = ++step;
    const absl::Status status =
        AdamWStep(hyper, absl::MakeSpan(params), grads, *adam, options);
    if (!status.ok()) {
      state.SkipWithError(std::string(status.message()).c_str());
      return;
    }
  }
  state.counters["threads"] = options.threads;
  Report(state, n);
}

void Sizes(benchmark::internal::Benchmark* b) {
  b->ArgName("params")->RangeMultiplier(4)->Range(1 << 20, 1 << 28);
}

BENCHMARK(BM_GpuAdamW)->Apply(Sizes)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_D2DCopy)->Apply(Sizes)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CpuAdamW)
    ->ArgName("params")
    ->RangeMultiplier(4)
    ->Range(1 << 20, 1 << 26)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace loom
