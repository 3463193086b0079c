// Per-ISA kernels behind core/half_convert.h, exposed so that tests and benchmarks can
// run each path explicitly. Callers outside core/ use core/half_convert.h instead.
//
// Every kernel is bitwise equal to the scalar conversions in core/half.h, NaN payloads,
// subnormals and signed zeros included; the tests hold each kernel to that.
//
// Example:
//   if (half_convert_internal::CpuHasAvx512()) {
//     half_convert_internal::F32ToBF16Avx512(src, dst);   // dst[i] == ToBFloat16(src[i])
//   }
//   half_convert_internal::IsaName(half_convert_internal::ActiveIsa());   // "avx512" or "scalar"
#ifndef LOOM_CORE_INTERNAL_HALF_CONVERT_H_
#define LOOM_CORE_INTERNAL_HALF_CONVERT_H_

#include <cstddef>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/half.h"

namespace loom {
namespace half_convert_internal {

// The instruction sets a batch conversion can run on.
enum class Isa {
  kScalar,  // The core/half.h functions in a loop; runs everywhere.
  kAvx512,  // AVX-512F + AVX-512BW + F16C, 16 elements per step.
};

// CpuHasAvx512 returns CpuSupports(CpuIsa::kAvx512) (core/cpu_features.h): AVX-512F,
// BW and CD over AVX2 and F16C.
bool CpuHasAvx512();

// ActiveIsa returns the fastest Isa this CPU supports; the public conversions use it.
Isa ActiveIsa();

// IsaName returns "scalar" or "avx512".
absl::string_view IsaName(Isa isa);

// The kernels below require src.size() == dst.size() (the public functions check it)
// and, for the Avx512 ones, CpuHasAvx512(); they never fail.

inline void F32ToBF16Scalar(absl::Span<const float> src, absl::Span<BFloat16> dst) {
  for (size_t i = 0; i < src.size(); ++i) dst[i] = ToBFloat16(src[i]);
}

inline void BF16ToF32Scalar(absl::Span<const BFloat16> src, absl::Span<float> dst) {
  for (size_t i = 0; i < src.size(); ++i) dst[i] = ToFloat(src[i]);
}

inline void F32ToF16Scalar(absl::Span<const float> src, absl::Span<Float16> dst) {
  for (size_t i = 0; i < src.size(); ++i) dst[i] = ToFloat16(src[i]);
}

inline void F16ToF32Scalar(absl::Span<const Float16> src, absl::Span<float> dst) {
  for (size_t i = 0; i < src.size(); ++i) dst[i] = ToFloat(src[i]);
}

void F32ToBF16Avx512(absl::Span<const float> src, absl::Span<BFloat16> dst);
void BF16ToF32Avx512(absl::Span<const BFloat16> src, absl::Span<float> dst);
void F32ToF16Avx512(absl::Span<const float> src, absl::Span<Float16> dst);
void F16ToF32Avx512(absl::Span<const Float16> src, absl::Span<float> dst);

}  // namespace half_convert_internal
}  // namespace loom

#endif  // LOOM_CORE_INTERNAL_HALF_CONVERT_H_
