// OneDnnBf16Gemm: bf16 x bf16 -> f32 matrix products on oneDNN's matmul primitive, the hardware
// path of Gemm(..., GemmPrecision::kBf16) (private to //tensor_parallel/layers:gemm, which falls
// back to OpenBLAS on the rounded inputs where this path is unavailable).
//
// A primitive is created once per part shape (m, n, k, transposes, leading dimensions, alpha and
// beta) and kept for the process, in one cache shared by every thread. Each is created with a user
// scratchpad: every calling thread passes a scratchpad, a stream and memory objects of its own, so
// tensor-parallel ranks running as threads execute the same primitive at once safely (oneDNN's
// library-managed scratchpad would tie a primitive to the thread that created it).
//
// Threads: Debian's oneDNN runs on OpenMP (libgomp), whose waiting threads spin on their CPU:
// measured, its two-thread products ran below its one-thread speed as soon as another thread
// wanted the second core (OpenBLAS's pool in the training job, or another process). So oneDNN
// runs every product on one OpenMP thread (set per call, then restored), and Loom splits a
// product of `threads` threads into up to that many parts of C's rows (multiples of 16, none
// below kMinMacsPerPart multiply-adds), each part one oneDNN product, run by the calling thread
// and the helpers of its own HelperTeam (core/internal/helper_team.h), which yield and then sleep while idle.
// The rounding of A and B is split between them too. A part's bits depend only on its shape, so
// a product's bits are the same from call to call at one thread count (not across counts). Under
// ThreadSanitizer this path is off: TSan cannot see libgomp's synchronization inside oneDNN.
//
// Example:
//   LOOM_RETURN_IF_ERROR(OneDnnBf16Gemm(Dense(x, m, k), Transpose::kNo, Dense(w, n, k),
//                                       Transpose::kYes, Dense(y, m, n), 1.0f, 0.0f, 2));
//   // y = bf16(x) * bf16(w)^T, on 2 threads (Unavailable on a CPU without AVX512_BF16)
#ifndef LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_ONEDNN_GEMM_H_
#define LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_ONEDNN_GEMM_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tensor_parallel/layers/gemm.h"

namespace loom {
namespace gemm_internal {

// OneDnnBf16Usable returns OK where products can run on oneDNN here, otherwise Unavailable saying
// why: a ThreadSanitizer build, a CPU without AVX512_BF16, a oneDNN whose effective ISA lacks it
// (ONEDNN_MAX_CPU_ISA), or an engine that failed.
absl::Status OneDnnBf16Usable();

// OneDnnBf16Gemm computes C = alpha * op(A) * op(B) + beta * C from A and B rounded to bf16
// (core/half_convert.h; per-thread scratch, grown to the largest product and kept; an input
// given in bf16 is read where it lies), with f32
// accumulation, on up to `threads` threads (see above). The caller has checked the shapes
// (op(A) [m,k], op(B) [k,n], C [m,n], all of m, n, k >= 1 and within 32 bits; spans long
// enough). Unavailable, with C untouched, where oneDNN cannot run it with a hardware kernel: as
// OneDnnBf16Usable, a part oneDNN refuses to create or offers only as its reference
// implementation, or a full primitive cache (kMaxCachedPrimitives shapes); the caller then
// computes it elsewhere. Internal naming the oneDNN call and its error string for a failure
// after that; ResourceExhausted if scratch cannot grow. `bias`, when given (n values), is added
// to every row of C in the product's epilogue (oneDNN's matmul bias: each element the f32
// product plus its bias, one addition, so the bits of adding it after the product).
absl::Status OneDnnBf16Gemm(const GemmBf16Input& a, Transpose trans_a, const GemmBf16Input& b,
                            Transpose trans_b, MatrixView c, float alpha, float beta, int threads,
                            const float* bias = nullptr);

// The fewest multiply-adds (m x n x k) a part gets (about 20 us on one core), so that handing it
// to a helper costs little against it.
inline constexpr int64_t kMinMacsPerPart = int64_t{1} << 22;

// The most product shapes the cache keeps (a program past it gets Unavailable, and so OpenBLAS, for
// new shapes; the training job uses a few dozen).
inline constexpr int kMaxCachedPrimitives = 512;

// OneDnnBf16Implementation returns oneDNN's name for the implementation it picks for the first
// part of a dense product of this shape at `threads` ("brg:avx512_core_bf16"), creating and
// caching the primitive; errors as OneDnnBf16Gemm.
absl::StatusOr<std::string> OneDnnBf16Implementation(int64_t m, int64_t n, int64_t k,
                                                     Transpose trans_a, Transpose trans_b,
                                                     int threads);

}  // namespace gemm_internal
}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_ONEDNN_GEMM_H_
