// DeviceReduceTo against the bound it is held to: a device-to-device cudaMemcpyAsync
// moving the same bytes. The argument is the size of one operand in bytes (1 MiB to
// 256 MiB); a reduction moves 3x that (reads a and b, writes out), and the copy copies
// 1.5x it (reads and writes it: the same 3x). Each iteration is timed on the device
// with CUDA events around one call; GB/s is 10^9 bytes moved per second.
//
//   ./bazelw run --config=cuda //core/gpu:device_reduce_benchmark
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "core/dtype.h"
#include "core/gpu/cuda_status.h"
#include "core/gpu/cuda_stream.h"
#include "core/gpu/device_buffer.h"
#include "core/gpu/device_reduce.h"
#include "core/reduce_op.h"
#include "core/status_macros.h"

namespace loom {
namespace {

bool HasDevice() {
  const absl::StatusOr<int> count = CudaDeviceCountOrZero();
  return count.ok() && *count > 0;
}

// Timer: a stream and a pair of timing events on device 0.
struct Timer {
  static absl::StatusOr<Timer> Create() {
    Timer timer;
    LOOM_ASSIGN_OR_RETURN(timer.stream, CudaStream::Create(0));
    LOOM_ASSIGN_OR_RETURN(timer.start, CudaEvent::Create(0, /*timing=*/true));
    LOOM_ASSIGN_OR_RETURN(timer.end, CudaEvent::Create(0, /*timing=*/true));
    return timer;
  }

  // Time returns the device seconds that `enqueue` (work on `stream`) took.
  template <typename Enqueue>
  absl::StatusOr<double> Time(Enqueue&& enqueue) {
    LOOM_RETURN_IF_ERROR(start.Record(stream));
    LOOM_RETURN_IF_ERROR(enqueue());
    LOOM_RETURN_IF_ERROR(end.Record(stream));
    LOOM_RETURN_IF_ERROR(end.Wait(absl::Now() + absl::Seconds(30)));
    return CudaEvent::ElapsedSeconds(start, end);
  }

  CudaStream stream;
  CudaEvent start;
  CudaEvent end;
};

absl::StatusOr<DeviceBuffer> Zeroed(size_t bytes) {
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::Allocate(MemorySpace::kDevice, bytes));
  LOOM_CUDA_RETURN_IF_ERROR(cudaMemset(buffer.data(), 0, bytes));
  // The memset runs on the legacy default stream, which the timing stream ignores.
  LOOM_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return buffer;
}

// Run times `enqueue` once per iteration (after one untimed warm-up call) and reports
// `moved` bytes per call as GB/s and bytes_per_second.
template <typename Enqueue>
void Run(benchmark::State& state, Timer& timer, size_t moved, Enqueue&& enqueue) {
  absl::StatusOr<double> warm_up = timer.Time(enqueue);
  if (!warm_up.ok()) {
    state.SkipWithError(std::string(warm_up.status().message()).c_str());
    return;
  }
  double seconds = 0;
  for (auto _ : state) {
    const absl::StatusOr<double> elapsed = timer.Time(enqueue);
    if (!elapsed.ok()) {
      state.SkipWithError(std::string(elapsed.status().message()).c_str());
      break;
    }
    state.SetIterationTime(*elapsed);
    seconds += *elapsed;
  }
  const double total = static_cast<double>(moved) * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(total));
  state.counters["GB/s"] = seconds > 0 ? total / seconds / 1e9 : 0.0;
}

template <DType kDType>
void BM_DeviceReduceSum(benchmark::State& state) {
  if (!HasDevice()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / DTypeSize(kDType);
  absl::StatusOr<Timer> timer = Timer::Create();
  absl::StatusOr<DeviceBuffer> a = Zeroed(bytes);
  absl::StatusOr<DeviceBuffer> b = Zeroed(bytes);
  absl::StatusOr<DeviceBuffer> out = Zeroed(bytes);
  for (const absl::Status& status : {timer.status(), a.status(), b.status(), out.status()}) {
    if (!status.ok()) {
      state.SkipWithError(std::string(status.message()).c_str());
      return;
    }
  }
  Run(state, *timer, 3 * bytes, [&] {
    return DeviceReduceTo(ReduceOp::kSum, kDType, a->data(), b->data(), out->data(), count,
                          timer->stream.get());
  });
}

void BM_MemcpyDeviceToDevice(benchmark::State& state) {
  if (!HasDevice()) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const size_t copied = static_cast<size_t>(state.range(0)) * 3 / 2;
  absl::StatusOr<Timer> timer = Timer::Create();
  absl::StatusOr<DeviceBuffer> src = Zeroed(copied);
  absl::StatusOr<DeviceBuffer> dst = Zeroed(copied);
  for (const absl::Status& status : {timer.status(), src.status(), dst.status()}) {
    if (!status.ok()) {
      state.SkipWithError(std::string(status.message()).c_str());
      return;
    }
  }
  Run(state, *timer, 2 * copied, [&] {
    return CudaStatus(cudaMemcpyAsync(dst->data(), src->data(), copied, cudaMemcpyDeviceToDevice,
                                      timer->stream.get()),
                      "cudaMemcpyAsync(dst, src, copied, cudaMemcpyDeviceToDevice, stream)");
  });
}

constexpr int64_t kMiB = int64_t{1} << 20;

BENCHMARK_TEMPLATE(BM_DeviceReduceSum, DType::kF32)
    ->RangeMultiplier(4)
    ->Range(kMiB, 256 * kMiB)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(BM_DeviceReduceSum, DType::kBF16)
    ->RangeMultiplier(4)
    ->Range(kMiB, 256 * kMiB)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MemcpyDeviceToDevice)
    ->RangeMultiplier(4)
    ->Range(kMiB, 256 * kMiB)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace loom
