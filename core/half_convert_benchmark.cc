// Throughput of the batch 16-bit float conversions on each ISA (BM_<conversion>/<isa>/
// <elements>: scalar, avx2, avx512), from L1-resident (4K elements) to DRAM-bound (16M
// elements) spans. Bytes processed count both the source read and the destination
// written.
//
//   ./bazelw run //core:half_convert_benchmark
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "benchmark/benchmark.h"
#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/half.h"
#include "core/internal/half_convert.h"

namespace loom {
namespace {

namespace hci = half_convert_internal;

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
void RunConversion(benchmark::State& state, hci::Kernel<Src, Dst> hci::Kernels::*kernel,
                   CpuIsa isa) {
  if (!hci::IsaSupported(isa)) {
    state.SkipWithError("this CPU cannot run these kernels");
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
  const hci::Kernel<Src, Dst> convert = hci::KernelsFor(isa).*kernel;
  for (auto _ : state) {
    convert(in, out);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(size * (sizeof(Src) + sizeof(Dst))));
}

// 4K elements (16 KiB of f32, L1) to 16M (64 MiB, DRAM).
constexpr int64_t kMinElements = int64_t{1} << 12;
constexpr int64_t kMaxElements = int64_t{1} << 24;

template <typename Src, typename Dst>
void Register(const char* name, hci::Kernel<Src, Dst> hci::Kernels::*kernel) {
  for (const CpuIsa isa : AllCpuIsas()) {
    benchmark::RegisterBenchmark(absl::StrCat("BM_", name, "/", CpuIsaName(isa)).c_str(),
                                 [kernel, isa](benchmark::State& state) {
                                   RunConversion(state, kernel, isa);
                                 })
        ->RangeMultiplier(8)
        ->Range(kMinElements, kMaxElements);
  }
}

[[maybe_unused]] const bool kRegistered = [] {
  Register("F32ToBF16", &hci::Kernels::f32_to_bf16);
  Register("BF16ToF32", &hci::Kernels::bf16_to_f32);
  Register("F32ToF16", &hci::Kernels::f32_to_f16);
  Register("F16ToF32", &hci::Kernels::f16_to_f32);
  return true;
}();

}  // namespace
}  // namespace loom
