// Per-ISA kernels behind collectives/reduce/reduce_kernels.h, exposed so that tests and
// benchmarks can run each instruction set explicitly. Callers outside this package use
// the public header, which checks its arguments and picks ActiveIsa().
//
// Every kernel gives the same bits as the scalar one on every input: vector and scalar
// code do the same single-rounding IEEE operations (no FMA contraction; the package is
// built with -ffp-contract=off), and every NaN a reduction produces is replaced by the
// canonical NaN below, so the payload never depends on which operand the hardware or
// the compiler happened to put first.
//
// Example:
//   const Kernels& kernels = KernelsFor(Isa::kAvx2);
//   if (IsaSupported(Isa::kAvx2)) kernels.reduce_into(ReduceOp::kSum, src, dst);
//   IsaName(ActiveIsa());                      // "avx512", "avx2" or "scalar"
#ifndef LOOM_COLLECTIVES_REDUCE_INTERNAL_REDUCE_KERNELS_H_
#define LOOM_COLLECTIVES_REDUCE_INTERNAL_REDUCE_KERNELS_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/buffer_view.h"
#include "core/cpu_features.h"
#include "core/reduce_op.h"

namespace loom {
namespace reduce_internal {

// The canonical quiet NaNs: positive, quiet bit set, zero payload. They narrow to each
// other: f32 0x7FC00000 -> bf16 0x7FC0 and f16 0x7E00.
inline constexpr uint32_t kCanonicalNaNF32Bits = 0x7FC00000u;
inline constexpr uint64_t kCanonicalNaNF64Bits = 0x7FF8000000000000u;

// The instruction-set levels, as core/cpu_features.h defines and detects them (one
// definition of "supported" for every package's kernels).
using Isa = CpuIsa;
inline absl::Span<const Isa> AllIsas() { return AllCpuIsas(); }
inline bool IsaSupported(Isa isa) { return CpuSupports(isa); }
inline Isa ActiveIsa() { return BestCpuIsa(); }
inline absl::string_view IsaName(Isa isa) { return CpuIsaName(isa); }

// Kernels is one ISA's implementation of the public functions, minus their checks.
// Each one requires what the public function checks (matching sizes, supported dtypes,
// element-aligned and identical-or-disjoint buffers, divisor and num_ranks >= 1, a
// valid op) and IsaSupported(isa); it never fails. kAvg reduces as kSum. Where an ISA
// has no vector code for a combination (see reduce_kernels.h) it runs the scalar one.
struct Kernels {
  void (*reduce_into)(ReduceOp op, ConstBufferView src, BufferView dst);
  // dst = op(a, b); dst may be a or b exactly, or disjoint from both.
  void (*reduce_to)(ReduceOp op, ConstBufferView a, ConstBufferView b, BufferView dst);
  void (*accumulate_into)(ReduceOp op, ConstBufferView src, absl::Span<float> acc);
  void (*load_accumulator)(ConstBufferView src, absl::Span<float> acc);
  void (*store_accumulator)(absl::Span<const float> acc, int64_t divisor, BufferView dst);
  void (*finish_average)(BufferView buf, int64_t num_ranks);
};

// KernelsFor returns the kernels of `isa`, supported or not (so a test can name them
// before it skips).
const Kernels& KernelsFor(Isa isa);

// The scalar reference kernels; the vector ones fall back to them where they have no
// vector code.
void ReduceIntoScalar(ReduceOp op, ConstBufferView src, BufferView dst);
void ReduceToScalar(ReduceOp op, ConstBufferView a, ConstBufferView b, BufferView dst);
void AccumulateIntoScalar(ReduceOp op, ConstBufferView src, absl::Span<float> acc);
void LoadAccumulatorScalar(ConstBufferView src, absl::Span<float> acc);
void StoreAccumulatorScalar(absl::Span<const float> acc, int64_t divisor, BufferView dst);
void FinishAverageScalar(BufferView buf, int64_t num_ranks);

// SimdKernels returns the vector kernels of kAvx2 or kAvx512 (internal/reduce_simd.cc,
// written once with Highway and compiled for its AVX2 and AVX3 targets); nullptr for
// kScalar.
const Kernels* SimdKernels(Isa isa);

}  // namespace reduce_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_REDUCE_INTERNAL_REDUCE_KERNELS_H_
