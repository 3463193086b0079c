// Throughput of ReduceInto (op sum) per dtype and ISA, against memcpy of a buffer of
// the same size as the bound, from L1-resident (4 KiB) to DRAM-bound (64 MiB) buffers.
//
// The argument is the size of one buffer in bytes. Bytes processed count every byte
// read or written: ReduceInto reads src and dst and writes dst, 3 x the buffer size
// per call; memcpy reads src and writes dst, 2 x. So equal GB/s means equal memory
// traffic per second.
//
//   ./bazelw run //collectives/reduce:reduce_kernels_benchmark
//   (add -- --benchmark_repetitions=3 --benchmark_report_aggregates_only=true for
//   medians on a noisy machine)
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>

#include "absl/types/span.h"
#include "benchmark/benchmark.h"
#include "collectives/reduce/internal/reduce_kernels.h"
#include "collectives/reduce/reduce_kernels.h"
#include "core/aligned_buffer.h"
#include "core/buffer_view.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/reduce_op.h"

namespace loom {
namespace {

namespace ri = reduce_internal;

// Fill writes finite values of magnitude 1..2 (no subnormals, whose microcode assists
// would measure something else), with random signs.
void Fill(DType dtype, void* data, size_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> magnitude(1.0f, 2.0f);
  const auto value = [&] { return (rng() & 1) != 0 ? magnitude(rng) : -magnitude(rng); };
  for (size_t i = 0; i < size; ++i) {
    switch (dtype) {
      case DType::kF32:
        static_cast<float*>(data)[i] = value();
        break;
      case DType::kBF16:
        static_cast<BFloat16*>(data)[i] = ToBFloat16(value());
        break;
      case DType::kF16:
        static_cast<Float16*>(data)[i] = ToFloat16(value());
        break;
      case DType::kI32:
        static_cast<int32_t*>(data)[i] = static_cast<int32_t>(rng());
        break;
      default:
        std::memset(data, 0, size * DTypeSize(dtype));
        return;
    }
  }
}

void BM_ReduceInto(benchmark::State& state, DType dtype, ri::Isa isa) {
  if (!ri::IsaSupported(isa)) {
    state.SkipWithError("this CPU lacks the ISA");
    return;
  }
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t size = bytes / DTypeSize(dtype);
  auto src = AlignedBuffer<std::byte>::Create(bytes);
  auto dst = AlignedBuffer<std::byte>::Create(bytes);
  if (!src.ok() || !dst.ok()) {
    state.SkipWithError("could not allocate the buffers");
    return;
  }
  Fill(dtype, src->data(), size, 1);
  Fill(dtype, dst->data(), size, 2);
  const ConstBufferView in(src->data(), size, dtype);
  const BufferView out(dst->data(), size, dtype);
  const ri::Kernels& kernels = ri::KernelsFor(isa);
  for (auto _ : state) {
    kernels.reduce_into(ReduceOp::kSum, in, out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(3 * bytes));
  state.SetLabel(std::string(ri::IsaName(isa)));
}

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  auto src = AlignedBuffer<std::byte>::Create(bytes);
  auto dst = AlignedBuffer<std::byte>::Create(bytes);
  if (!src.ok() || !dst.ok()) {
    state.SkipWithError("could not allocate the buffers");
    return;
  }
  Fill(DType::kI32, src->data(), bytes / sizeof(int32_t), 1);
  for (auto _ : state) {
    std::memcpy(dst->data(), src->data(), bytes);
    benchmark::DoNotOptimize(dst->data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(2 * bytes));
}

// ReduceTo (public, f32 sum, active ISA): dst = a + b, three distinct buffers.
// Bytes processed: a, b and dst, 3 x the buffer size.
void BM_ReduceTo(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t size = bytes / sizeof(float);
  auto a = AlignedBuffer<std::byte>::Create(bytes);
  auto b = AlignedBuffer<std::byte>::Create(bytes);
  auto dst = AlignedBuffer<std::byte>::Create(bytes);
  if (!a.ok() || !b.ok() || !dst.ok()) {
    state.SkipWithError("could not allocate the buffers");
    return;
  }
  Fill(DType::kF32, a->data(), size, 1);
  Fill(DType::kF32, b->data(), size, 2);
  std::memset(dst->data(), 0, bytes);
  const ConstBufferView in_a(a->data(), size, DType::kF32);
  const ConstBufferView in_b(b->data(), size, DType::kF32);
  const BufferView out(dst->data(), size, DType::kF32);
  for (auto _ : state) {
    if (!ReduceTo(ReduceOp::kSum, in_a, in_b, out).ok()) {
      state.SkipWithError("ReduceTo failed");
      return;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(3 * bytes));
}

// One buffer of 4 KiB (L1) to 64 MiB (DRAM), by factors of 8, plus 64 MiB itself.
constexpr int64_t kMinBytes = int64_t{4} << 10;
constexpr int64_t kMaxBytes = int64_t{64} << 20;

#define LOOM_REDUCE_BENCHMARK(name, dtype, isa)      \
  BENCHMARK_CAPTURE(BM_ReduceInto, name, dtype, isa) \
      ->RangeMultiplier(8)                           \
      ->Range(kMinBytes, kMaxBytes)

LOOM_REDUCE_BENCHMARK(f32_scalar, DType::kF32, ri::Isa::kScalar);
LOOM_REDUCE_BENCHMARK(f32_avx2, DType::kF32, ri::Isa::kAvx2);
LOOM_REDUCE_BENCHMARK(f32_avx512, DType::kF32, ri::Isa::kAvx512);
LOOM_REDUCE_BENCHMARK(bf16_scalar, DType::kBF16, ri::Isa::kScalar);
LOOM_REDUCE_BENCHMARK(bf16_avx2, DType::kBF16, ri::Isa::kAvx2);
LOOM_REDUCE_BENCHMARK(bf16_avx512, DType::kBF16, ri::Isa::kAvx512);
LOOM_REDUCE_BENCHMARK(f16_scalar, DType::kF16, ri::Isa::kScalar);
LOOM_REDUCE_BENCHMARK(f16_avx2, DType::kF16, ri::Isa::kAvx2);
LOOM_REDUCE_BENCHMARK(f16_avx512, DType::kF16, ri::Isa::kAvx512);
LOOM_REDUCE_BENCHMARK(i32_scalar, DType::kI32, ri::Isa::kScalar);
LOOM_REDUCE_BENCHMARK(i32_avx2, DType::kI32, ri::Isa::kAvx2);
LOOM_REDUCE_BENCHMARK(i32_avx512, DType::kI32, ri::Isa::kAvx512);
BENCHMARK(BM_Memcpy)->RangeMultiplier(8)->Range(kMinBytes, kMaxBytes);
BENCHMARK(BM_ReduceTo)->RangeMultiplier(8)->Range(kMinBytes, kMaxBytes);

}  // namespace
}  // namespace loom
