// OneDnnBf16Gemm: bf16 x bf16 -> f32 matrix products on oneDNN's matmul primitive, the hardware
// path of Gemm(..., GemmPrecision::kBf16) (private to //tensor_parallel/layers:gemm, which rounds
// the inputs and falls back to OpenBLAS where this path is unavailable).
//
// A primitive is created once per product shape (m, n, k, transposes, C's ld, alpha, beta and
// thread count: oneDNN fixes its blocking and work split for the threads it is created for) and
// kept for the process, in one cache shared by every thread. Each is created with a user
// scratchpad: every calling thread passes a scratchpad, a stream and memory objects of its own, so
// tensor-parallel ranks running as threads execute the same primitive at once safely (oneDNN's
// library-managed scratchpad would tie a primitive to the thread that created it).
//
// Threads: Debian's oneDNN runs on OpenMP (libgomp). Each product sets the calling thread's OpenMP
// thread count to `threads` and restores it afterwards; each calling thread gets its own OpenMP
// team. Under ThreadSanitizer this path is off: TSan cannot see libgomp's synchronization.
//
// Example:
//   std::vector<BFloat16> a16 = ..., b16 = ...;     // [m,k] and [n,k], rounded
//   LOOM_RETURN_IF_ERROR(OneDnnBf16Gemm({a16, m, k}, Transpose::kNo, {b16, n, k},
//                                       Transpose::kYes, Dense(c, m, n), 1.0f, 0.0f, 2));
//   // c = a16 * b16^T, on 2 threads (Unavailable on a CPU without AVX512_BF16)
#ifndef LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_ONEDNN_GEMM_H_
#define LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_ONEDNN_GEMM_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/half.h"
#include "tensor_parallel/layers/gemm.h"

namespace loom {
namespace gemm_internal {

// PackedBf16: a dense row-major bf16 matrix of rows x cols as stored (a transposed operand is
// stored [k,m] or [n,k], as in Gemm).
struct PackedBf16 {
  absl::Span<const BFloat16> data;
  int64_t rows = 0;
  int64_t cols = 0;
};

// OneDnnBf16Usable returns OK where products can run on oneDNN here, otherwise Unavailable saying
// why: a ThreadSanitizer build, a CPU without AVX512_BF16, a oneDNN whose effective ISA lacks it
// (ONEDNN_MAX_CPU_ISA), or an engine that failed.
absl::Status OneDnnBf16Usable();

// OneDnnBf16Gemm computes C = alpha * op(A) * op(B) + beta * C with f32 accumulation on `threads`
// OpenMP threads. The caller has checked the shapes (op(A) [m,k], op(B) [k,n], C [m,n], all of m,
// n, k >= 1 and within 32 bits; spans long enough). Unavailable (C untouched) where oneDNN cannot
// run it with a hardware kernel: as OneDnnBf16Usable, a primitive oneDNN refuses to create or
// offers only as its reference implementation, or a full primitive cache (kMaxCachedPrimitives
// shapes); the caller then computes it elsewhere. Internal naming the oneDNN call and its error
// string for a failure after that; ResourceExhausted if the scratchpad cannot grow.
absl::Status OneDnnBf16Gemm(PackedBf16 a, Transpose trans_a, PackedBf16 b, Transpose trans_b,
                            MatrixView c, float alpha, float beta, int threads);

// The most product shapes the cache keeps (a program past it gets Unavailable, and so OpenBLAS, for
// new shapes; the training job uses a few dozen).
inline constexpr int kMaxCachedPrimitives = 512;

// OneDnnBf16Implementation returns oneDNN's name for the implementation it picks for a dense
// product of this shape ("brg:avx512_core_bf16"), creating and caching the primitive; errors as
// OneDnnBf16Gemm.
absl::StatusOr<std::string> OneDnnBf16Implementation(int64_t m, int64_t n, int64_t k,
                                                     Transpose trans_a, Transpose trans_b,
                                                     int threads);

}  // namespace gemm_internal
}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_ONEDNN_GEMM_H_
