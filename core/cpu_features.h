// CpuIsa: the x86-64 instruction-set levels Loom's SIMD kernels are built for, and
// whether this CPU (and OS) runs them. Every package with per-ISA kernels (the
// reductions in collectives, the codecs, the CPU AdamW) asks here, so they agree on
// what "AVX-512 supported" means: the union of the features any of their kernels use.
//
//   kScalar  plain C++; runs everywhere.
//   kAvx2    AVX2, FMA, F16C, BMI1/2, LZCNT, MOVBE (256-bit lanes): Highway's HWY_AVX2.
//   kAvx512  kAvx2 + AVX-512 F, VL, DQ, BW and CD (512-bit lanes): Highway's HWY_AVX3
//            plus CD.
// The kernels written with Highway run its AVX2 and AVX3 targets' code, which may use
// any of those instructions, so a level is supported only where all of them are (the
// test holds this to hwy::SupportedTargets()).
//
// Example:
//   BestCpuIsa();                      // CpuIsa::kAvx512 on a Skylake-SP or later
//   CpuSupports(CpuIsa::kAvx2);        // true there too
//   CpuIsaName(CpuIsa::kAvx512);       // "avx512"
#ifndef LOOM_CORE_CPU_FEATURES_H_
#define LOOM_CORE_CPU_FEATURES_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace loom {

enum class CpuIsa : uint8_t { kScalar, kAvx2, kAvx512 };

// AllCpuIsas returns every level, slowest first (for parametrized tests and benchmarks).
absl::Span<const CpuIsa> AllCpuIsas();

// CpuSupports returns whether this CPU and OS run `isa`'s kernels (the OS must save
// the wider registers: __builtin_cpu_supports checks XCR0). Detected once.
bool CpuSupports(CpuIsa isa);

// BestCpuIsa returns the fastest supported level.
CpuIsa BestCpuIsa();

// CpuSupportsAvx512Bf16 returns whether this CPU and OS run AVX-512 BF16
// (vdpbf16ps: bf16 dot products accumulated in f32) on top of kAvx512: where the
// bf16 matrix products of tensor_parallel/layers/gemm.h run on hardware. Detected once.
bool CpuSupportsAvx512Bf16();

// CapCpuIsa makes this process answer as a CPU that runs at most `max`, and AVX-512
// BF16 only with allow_avx512_bf16: CpuSupports, BestCpuIsa and
// CpuSupportsAvx512Bf16 report the host's features within the cap (a cap above
// the host changes nothing). For tests that run the kernels a smaller CPU would
// choose, on a bigger host: call it first thing in main, before any kernel has
// chosen (some choose once). Highway's dispatch, oneDNN (ONEDNN_MAX_CPU_ISA) and
// OpenBLAS (OPENBLAS_CORETYPE) are capped by their own means;
// core/internal/isa_capped_test_main.cc caps all four.
void CapCpuIsa(CpuIsa max, bool allow_avx512_bf16);

// CpuIsaName returns "scalar", "avx2" or "avx512" ("unknown" outside the enum).
absl::string_view CpuIsaName(CpuIsa isa);

// UsableCpus returns the CPUs this process may run on (its affinity mask; the
// hardware's count where that cannot be read), at least 1. Transports ask it
// whether a waiter may spin: with more busy threads than CPUs, a spinning waiter
// takes the CPU from the thread it waits for.
int UsableCpus();

}  // namespace loom

#endif  // LOOM_CORE_CPU_FEATURES_H_
