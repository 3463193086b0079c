// GemmThroughput: the FLOP/s Gemm's own backend reaches on this machine, at a square
// product large enough to run at its best (n = 1024 by default), on the calling thread
// and its GemmThreads() helpers. It is the other half of an honest MFU denominator
// beside core/fma_peak's instruction peaks: where the products run on a unit that no
// instruction loop here measures (AMX tiles under oneDNN's avx512_core_amx_bf16
// kernel, a library's assembly the FMA loop does not match), the backend's best
// product is a floor for that unit's peak, and an MFU over the larger of the two
// cannot pass 1 through a denominator that is too small.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(double flops, MeasureGemmThroughput(GemmPrecision::kBf16,
//                                                             absl::Milliseconds(40)));
//   // ~4.2e11 on 2 Zen 4 cores (oneDNN brg:avx512_core_bf16, 2 GEMM threads)
//   MeasureGemmThroughput(GemmPrecision::kF32, absl::Milliseconds(40), /*n=*/0);
//   // InvalidArgument: "MeasureGemmThroughput: n = 0 is not in [16, 8192]"
#ifndef LOOM_TENSOR_PARALLEL_LAYERS_GEMM_THROUGHPUT_H_
#define LOOM_TENSOR_PARALLEL_LAYERS_GEMM_THROUGHPUT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tensor_parallel/layers/gemm.h"

namespace loom {

// MeasureGemmThroughput runs n x n x n products of `precision` (2 n^3 FLOP each)
// through Gemm for about `duration` after one warm-up product, and returns the best
// single product's FLOP/s. InvalidArgument for n outside [16, 8192] or a duration
// not in (0, 10 s]; Gemm's own error otherwise.
absl::StatusOr<double> MeasureGemmThroughput(GemmPrecision precision, absl::Duration duration,
                                             int64_t n = 1024);

}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_LAYERS_GEMM_THROUGHPUT_H_
