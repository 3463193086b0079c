// How Loom's Highway kernels map a CpuIsa to a target's code, in one place. A kernel
// file is compiled by hwy/foreach_target.h once per target; each of its AVX2 and AVX3
// passes defines a table of entry points (N_AVX2::kTable, N_AVX3::kTable), and the
// code inside HWY_ONCE picks one:
//
//   // Before foreach_target.h: the AVX2 and AVX3 passes whatever -march says, and no
//   // SSE passes (they would cost build time and never run: kScalar runs each
//   // package's plain C++ reference).
//   #define HWY_COMPILE_ALL_ATTAINABLE
//   #define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4)
//   ...
//   #if HWY_ONCE
//   #include "core/internal/simd_dispatch.h"  // here, after foreach_target.h
//   const Kernels* SimdKernels(CpuIsa isa) {
//     return SimdTableFor(isa, &N_AVX2::kKernels, &N_AVX3::kKernels);
//   }
//   #endif
//
// CpuIsa::kAvx2 runs Highway's AVX2 target and kAvx512 its AVX3 target;
// core/cpu_features.h supports a level exactly where Highway supports its target. This
// is for kernels that callers and tests name by ISA (each is checked bitwise against its
// scalar reference per level); kernels nobody needs to name (core/vector_math.cc,
// core/fma_peak.cc) use Highway's own HWY_DYNAMIC_DISPATCH.
#ifndef LOOM_CORE_INTERNAL_SIMD_DISPATCH_H_
#define LOOM_CORE_INTERNAL_SIMD_DISPATCH_H_

#include "core/cpu_features.h"
#include "hwy/highway.h"

#if HWY_ARCH_X86
static_assert((HWY_TARGETS & HWY_AVX2) != 0 && (HWY_TARGETS & HWY_AVX3) != 0,
              "define HWY_COMPILE_ALL_ATTAINABLE before foreach_target.h: Loom's kernels "
              "need Highway's AVX2 and AVX3 passes");
#endif

namespace loom {
namespace core_internal {

// SimdTableFor returns the table of `isa`'s target: `avx2` for kAvx2, `avx512` for
// kAvx512, null for kScalar (and outside the enum).
template <typename Table>
constexpr const Table* SimdTableFor(CpuIsa isa, const Table* avx2, const Table* avx512) {
  switch (isa) {
    case CpuIsa::kAvx2:
      return avx2;
    case CpuIsa::kAvx512:
      return avx512;
    case CpuIsa::kScalar:
      break;
  }
  return nullptr;
}

}  // namespace core_internal
}  // namespace loom

#endif  // LOOM_CORE_INTERNAL_SIMD_DISPATCH_H_
