// Throughput of the batch 16-bit float conversions, scalar kernels against AVX-512, from
// L1-resident (4K elements) to DRAM-bound (16M elements) spans. Bytes processed count
// both the source read and the destination written.
//
//   ./bazelw run //core:half_convert_benchmark
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "absl/types/span.h"
#include "benchmark/benchmark.h"
#include "core/aligned_buffer.h"
#include "core/half.h"
#include "core/internal/half_convert.h"

namespace loom {
namespace {

namespace hci = half_convert_internal;

template <typename Src, typename Dst>
using Kernel = void (*)(absl::Span<const Src>, absl::Span<Dst>);

// Values spread over the f16 range with a few NaNs, Infs and subnormals mixed in, so no
// kernel benefits from uniform input.
float InputValue(std::mt19937& rng) {
  std::uniform_real_distribution<float> value(-70000.0f, 70000.0f);
  std::uniform_int_distribution<int> special(0, 99);
  switch (special(rng)) {
    case 0:
      return std::numeric_limits<float>::quiet_NaN();
    case 1:
      return -std::numeric_limits<float>::infinity();
    case 2:
      return std::numeric_limits<float>::denorm_min();
    default:
      return value(rng);
  }
}

template <typename T>
T FromFloat(float value);
template <>
float FromFloat(float value) {
  return value;
}
template <>
BFloat16 FromFloat(float value) {
  return ToBFloat16(value);
}
template <>
Float16 FromFloat(float value) {
  return ToFloat16(value);
}

template <typename Src, typename Dst>
void RunConversion(benchmark::State& state, Kernel<Src, Dst> kernel, hci::Isa isa) {
  if (isa == hci::Isa::kAvx512 && !hci::CpuHasAvx512()) {
    state.SkipWithError("this CPU lacks AVX-512F, AVX-512BW or F16C");
    return;
  }
  const size_t size = static_cast<size_t>(state.range(0));
  auto src = AlignedBuffer<Src>::Create(size);
  auto dst = AlignedBuffer<Dst>::Create(size);
  if (!src.ok() || !dst.ok()) {
    state.SkipWithError("could not allocate the buffers");
    return;
  }
  std::mt19937 rng(7);
  for (size_t i = 0; i < size; ++i) (*src)[i] = FromFloat<Src>(InputValue(rng));
  const absl::Span<const Src> in = src->span();
  const absl::Span<Dst> out = dst->span();
  for (auto _ : state) {
    kernel(in, out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(size * (sizeof(Src) + sizeof(Dst))));
  state.SetLabel(std::string(hci::IsaName(isa)));
}

void BM_F32ToBF16_Scalar(benchmark::State& state) {
  RunConversion(state, &hci::F32ToBF16Scalar, hci::Isa::kScalar);
}
void BM_F32ToBF16_Avx512(benchmark::State& state) {
  RunConversion(state, &hci::F32ToBF16Avx512, hci::Isa::kAvx512);
}
void BM_BF16ToF32_Scalar(benchmark::State& state) {
  RunConversion(state, &hci::BF16ToF32Scalar, hci::Isa::kScalar);
}
void BM_BF16ToF32_Avx512(benchmark::State& state) {
  RunConversion(state, &hci::BF16ToF32Avx512, hci::Isa::kAvx512);
}
void BM_F32ToF16_Scalar(benchmark::State& state) {
  RunConversion(state, &hci::F32ToF16Scalar, hci::Isa::kScalar);
}
void BM_F32ToF16_Avx512(benchmark::State& state) {
  RunConversion(state, &hci::F32ToF16Avx512, hci::Isa::kAvx512);
}
void BM_F16ToF32_Scalar(benchmark::State& state) {
  RunConversion(state, &hci::F16ToF32Scalar, hci::Isa::kScalar);
}
void BM_F16ToF32_Avx512(benchmark::State& state) {
  RunConversion(state, &hci::F16ToF32Avx512, hci::Isa::kAvx512);
}

// 4K elements (16 KiB of f32, L1) to 16M (64 MiB, DRAM).
constexpr int64_t kMinElements = int64_t{1} << 12;
constexpr int64_t kMaxElements = int64_t{1} << 24;

BENCHMARK(BM_F32ToBF16_Scalar)->RangeMultiplier(8)->Range(kMinElements, kMaxElements);
BENCHMARK(BM_F32ToBF16_Avx512)->RangeMultiplier(8)->Range(kMinElements, kMaxElements);
BENCHMARK(BM_BF16ToF32_Scalar)->RangeMultiplier(8)->Range(kMinElements, kMaxElements);
BENCHMARK(BM_BF16ToF32_Avx512)->RangeMultiplier(8)->Range(kMinElements, kMaxElements);
BENCHMARK(BM_F32ToF16_Scalar)->RangeMultiplier(8)->Range(kMinElements, kMaxElements);
BENCHMARK(BM_F32ToF16_Avx512)->RangeMultiplier(8)->Range(kMinElements, kMaxElements);
BENCHMARK(BM_F16ToF32_Scalar)->RangeMultiplier(8)->Range(kMinElements, kMaxElements);
BENCHMARK(BM_F16ToF32_Avx512)->RangeMultiplier(8)->Range(kMinElements, kMaxElements);

}  // namespace
}  // namespace loom
