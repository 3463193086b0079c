// GpuGemm's TFLOP/s against cuBLAS called directly, and cuBLAS's own peaks.
//
// Square n x n x n products, all operands on the device, timed with CUDA events (a
// warm-up product first, so handle setup and kernel selection stay out):
//   BM_GpuGemm       Loom's GpuGemm: f32, CUBLAS_PEDANTIC_MATH (the CPU-comparable path)
//   BM_CublasSgemm   cublasSgemm on a pedantic handle with no checks: GpuGemm's baseline
//   BM_CublasTf32    cublasGemmEx f32 in, CUBLAS_COMPUTE_32F_FAST_TF32 (tensor cores)
//   BM_CublasBf16    cublasGemmEx bf16 in, f32 out, CUBLAS_COMPUTE_32F: the peak cuBLAS
//                    reaches on this GPU for training-style products
// Each reports tflops = 2 n^3 / time. GpuGemm / Sgemm is Loom's overhead (pointer
// checks per call); Sgemm / Bf16 is what f32 pedantic math leaves on the table.
//
//   ./bazelw run --config=cuda //tensor_parallel/gpu:cublas_gemm_benchmark
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
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
#include "tensor_parallel/gpu/cublas_gemm.h"
#include "tensor_parallel/layers/gemm.h"

namespace loom {
namespace {

enum class Kind { kGpuGemm, kSgemm, kTf32, kBf16 };

struct Setup {
  CudaStream stream;
  CublasHandle cublas;
  DeviceBuffer a, b, c;  // f32, or bf16 for a and b under kBf16
  int64_t n = 0;
};

// Seeded, distinct values in [-1, 1), as f32 or as bf16 bits (truncated: the values
// only need to be ordinary numbers).
std::vector<uint32_t> RandomBits(size_t count, uint32_t seed) {
  std::vector<uint32_t> out(count);
  uint32_t x = seed * 2654435761u + 1;
  for (uint32_t& v : out) {
    x = x * 1664525u + 1013904223u;
    const float f = static_cast<float>(x >> 8) * (2.0f / 16777216.0f) - 1.0f;
    std::memcpy(&v, &f, 4);
  }
  return out;
}

absl::StatusOr<DeviceBuffer> Upload(int64_t count, uint32_t seed, bool bf16) {
  const std::vector<uint32_t> bits = RandomBits(static_cast<size_t>(count), seed);
  std::vector<uint16_t> half;
  absl::Span<const std::byte> bytes(reinterpret_cast<const std::byte*>(bits.data()),
                                    4 * bits.size());
  if (bf16) {
    half.reserve(bits.size());
    for (uint32_t v : bits) half.push_back(static_cast<uint16_t>(v >> 16));
    bytes = absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(half.data()),
                                        2 * half.size());
  }
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer d, DeviceBuffer::Allocate(MemorySpace::kDevice, bytes.size()));
  LOOM_RETURN_IF_ERROR(d.CopyFromHost(bytes));
  return d;
}

absl::StatusOr<Setup> MakeSetup(int64_t n, Kind kind) {
  LOOM_ASSIGN_OR_RETURN(const int devices, CudaDeviceCountOrZero());
  if (devices == 0) return absl::FailedPreconditionError("no CUDA device");
  Setup s;
  s.n = n;
  LOOM_ASSIGN_OR_RETURN(s.stream, CudaStream::Create(0));
  const bool tensor_cores = kind == Kind::kTf32 || kind == Kind::kBf16;
  LOOM_ASSIGN_OR_RETURN(s.cublas,
                        CublasHandle::Create(s.stream, tensor_cores ? CublasMath::kDefault
                                                                    : CublasMath::kPedantic));
  const bool bf16 = kind == Kind::kBf16;
  LOOM_ASSIGN_OR_RETURN(s.a, Upload(n * n, 1, bf16));
  LOOM_ASSIGN_OR_RETURN(s.b, Upload(n * n, 2, bf16));
  LOOM_ASSIGN_OR_RETURN(s.c, DeviceBuffer::Allocate(MemorySpace::kDevice, 4 * n * n));
  return s;
}

absl::Status Enqueue(Setup& s, Kind kind) {
  const int n = static_cast<int>(s.n);
  const float alpha = 1.0f, beta = 0.0f;
  switch (kind) {
    case Kind::kGpuGemm:
      return GpuGemm(s.cublas, Dense(AsDeviceFloats(std::as_const(s.a)), n, n), Transpose::kNo,
                     Dense(AsDeviceFloats(std::as_const(s.b)), n, n), Transpose::kNo,
                     Dense(AsDeviceFloats(s.c), n, n));
    case Kind::kSgemm:
      LOOM_CUBLAS_RETURN_IF_ERROR(cublasSgemm(
          s.cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha,
          reinterpret_cast<const float*>(s.b.data()), n, reinterpret_cast<const float*>(s.a.data()),
          n, &beta, reinterpret_cast<float*>(s.c.data()), n));
      return absl::OkStatus();
    case Kind::kTf32:
      LOOM_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(
          s.cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, s.b.data(), CUDA_R_32F, n,
          s.a.data(), CUDA_R_32F, n, &beta, s.c.data(), CUDA_R_32F, n,
          CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
      return absl::OkStatus();
    case Kind::kBf16:
      LOOM_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(
          s.cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, s.b.data(), CUDA_R_16BF, n,
          s.a.data(), CUDA_R_16BF, n, &beta, s.c.data(), CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
          CUBLAS_GEMM_DEFAULT));
      return absl::OkStatus();
  }
  return absl::InternalError("unknown kind");
}

// The device seconds of one product, between two timing CudaEvents (the host waits
// at most a minute).
absl::StatusOr<double> TimedSeconds(Setup& s, Kind kind) {
  LOOM_ASSIGN_OR_RETURN(CudaEvent start, CudaEvent::Create(s.stream.device(), /*timing=*/true));
  LOOM_ASSIGN_OR_RETURN(CudaEvent stop, CudaEvent::Create(s.stream.device(), /*timing=*/true));
  LOOM_RETURN_IF_ERROR(start.Record(s.stream));
  LOOM_RETURN_IF_ERROR(Enqueue(s, kind));
  LOOM_RETURN_IF_ERROR(stop.Record(s.stream));
  LOOM_RETURN_IF_ERROR(stop.Wait(absl::Now() + absl::Seconds(60)));
  return CudaEvent::ElapsedSeconds(start, stop);
}

template <Kind kKind>
void BM_Gemm(benchmark::State& state) {
  const int64_t n = state.range(0);
  absl::StatusOr<Setup> s = MakeSetup(n, kKind);
  absl::Status warm = s.ok() ? TimedSeconds(*s, kKind).status() : s.status();
  if (!warm.ok()) {
    state.SkipWithError(std::string(warm.message()).c_str());
    return;
  }
  for (auto _ : state) {
    absl::StatusOr<double> t = TimedSeconds(*s, kKind);
    if (!t.ok()) {
      state.SkipWithError(std::string(t.status().message()).c_str());
      return;
    }
    state.SetIterationTime(*t);
  }
  state.counters["tflops"] = benchmark::Counter(
      2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) * 1e-12 *
          static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

void Sizes(benchmark::internal::Benchmark* b) {
  b->ArgName("n")->RangeMultiplier(2)->Range(1024, 8192)->UseManualTime()->Unit(
      benchmark::kMicrosecond);
}

BENCHMARK_TEMPLATE(BM_Gemm, Kind::kGpuGemm)->Name("BM_GpuGemm")->Apply(Sizes);
BENCHMARK_TEMPLATE(BM_Gemm, Kind::kSgemm)->Name("BM_CublasSgemm")->Apply(Sizes);
BENCHMARK_TEMPLATE(BM_Gemm, Kind::kTf32)->Name("BM_CublasTf32")->Apply(Sizes);
BENCHMARK_TEMPLATE(BM_Gemm, Kind::kBf16)->Name("BM_CublasBf16")->Apply(Sizes);

}  // namespace
}  // namespace loom
