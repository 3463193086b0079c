// Per-ISA kernels behind core/half_convert.h, exposed so that tests and benchmarks can
// run each path explicitly. Callers outside core/ use core/half_convert.h instead.
//
// Every kernel is bitwise equal to the scalar conversions in core/half.h, NaN payloads,
// subnormals and signed zeros included; the tests hold each kernel to that. The vector
// kernels are written once with Google Highway (internal/half_convert.cc) and compiled
// for its AVX2 and AVX3 targets, which serve CpuIsa::kAvx2 and CpuIsa::kAvx512.
//
// Example:
//   if (half_convert_internal::IsaSupported(CpuIsa::kAvx2)) {
//     half_convert_internal::KernelsFor(CpuIsa::kAvx2).f32_to_bf16(src, dst);
//     // dst[i] == ToBFloat16(src[i])
//   }
//   CpuIsaName(half_convert_internal::ActiveIsa());   // "avx512", "avx2" or "scalar"
#ifndef LOOM_CORE_INTERNAL_HALF_CONVERT_H_
#define LOOM_CORE_INTERNAL_HALF_CONVERT_H_

#include <cstddef>

#include "absl/types/span.h"
#include "core/cpu_features.h"
#include "core/half.h"

namespace loom {
namespace half_convert_internal {

template <typename Src, typename Dst>
using Kernel = void (*)(absl::Span<const Src>, absl::Span<Dst>);

// Kernels is one ISA's four conversions. Each requires src.size() == dst.size() (the
// public functions check it) and spans that do not overlap; none fails, and none reads
// or writes an element outside its spans.
struct Kernels {
  Kernel<float, BFloat16> f32_to_bf16;
  Kernel<BFloat16, float> bf16_to_f32;
  Kernel<float, Float16> f32_to_f16;
  Kernel<Float16, float> f16_to_f32;
};

// IsaSupported returns whether `isa`'s kernels run here: CpuSupports(isa)
// (core/cpu_features.h), which holds each level to Highway's target for it.
bool IsaSupported(CpuIsa isa);

// ActiveIsa returns the fastest supported ISA; the public conversions use it.
CpuIsa ActiveIsa();

// KernelsFor returns `isa`'s kernels, supported or not (so that a test can name them
// before it skips); only a supported ISA's may be called.
const Kernels& KernelsFor(CpuIsa isa);

// The scalar kernels (CpuIsa::kScalar): core/half.h's functions in a loop, over raw
// pointers (the spans' operator[] is bounds-checked in Debian's Abseil: a compare and a
// branch per element, 5-15% of these loops).

inline void F32ToBF16Scalar(absl::Span<const float> src, absl::Span<BFloat16> dst) {
  const auto* s = src.data();
  auto* d = dst.data();
  const size_t n = src.size();
  for (size_t i = 0; i < n; ++i) d[i] = ToBFloat16(s[i]);
}

inline void BF16ToF32Scalar(absl::Span<const BFloat16> src, absl::Span<float> dst) {
  const auto* s = src.data();
  auto* d = dst.data();
  const size_t n = src.size();
  for (size_t i = 0; i < n; ++i) d[i] = ToFloat(s[i]);
}

inline void F32ToF16Scalar(absl::Span<const float> src, absl::Span<Float16> dst) {
  const auto* s = src.data();
  auto* d = dst.data();
  const size_t n = src.size();
  for (size_t i = 0; i < n; ++i) d[i] = ToFloat16(s[i]);
}

inline void F16ToF32Scalar(absl::Span<const Float16> src, absl::Span<float> dst) {
  const auto* s = src.data();
  auto* d = dst.data();
  const size_t n = src.size();
  for (size_t i = 0; i < n; ++i) d[i] = ToFloat(s[i]);
}

}  // namespace half_convert_internal
}  // namespace loom

#endif  // LOOM_CORE_INTERNAL_HALF_CONVERT_H_
