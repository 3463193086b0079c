// Reduction kernels: the element-wise combine step of Loom's collectives (all-reduce,
// reduce-scatter, reduce), on host memory, for every core DType and ReduceOp.
//
// ReduceInto folds a received chunk into a local one in their own dtype. For f16 and
// bf16 over many ranks an f32 accumulator keeps the rounding to 16 bits to one step at
// the end: LoadAccumulator, AccumulateInto per peer, StoreAccumulator. kAvg reduces as
// kSum; the division by the rank count happens once, at the end (FinishAverage, or
// StoreAccumulator's divisor).
//
// Results, identical bit for bit on every CPU and every ISA path in the default
// floating-point environment (round to nearest, FTZ and DAZ off; the kernels do not
// change MXCSR, and other settings are untested):
// - Floats: each element is one IEEE operation rounded once, to nearest even. f16 and
//   bf16 are widened exactly, combined in f32 and rounded once to 16 bits per call.
// - NaN propagates: for sum, prod, min and max, if either input is NaN the result is
//   NaN, and every NaN these produce (0 * Inf and Inf - Inf included) is the canonical
//   quiet NaN: positive, payload 0 (f32 0x7FC00000, f64 0x7FF8000000000000, f16 0x7E00,
//   bf16 0x7FC0). x86 returns the payload of whichever NaN operand comes first, and
//   compilers swap the operands of commutative operations, so a payload would not be
//   reproducible. Conversions and divisions (LoadAccumulator, StoreAccumulator,
//   FinishAverage) keep a NaN's sign and payload, quieted, as core/half.h does.
// - Signed zeros: min(-0, +0) is -0 and max(-0, +0) is +0 in either order (IEEE
//   754-2019 minimum / maximum).
// - Integers: sum and prod wrap modulo 2^bits (two's complement; computed in the
//   unsigned type, so there is no signed-overflow UB); FinishAverage truncates toward
//   zero, as NCCL's ncclAvg does. A sum that wrapped averages to a wrapped value, as in
//   NCCL.
//
// Vector code runs where the CPU has it, chosen once at run time: AVX-512F + AVX-512BW
// + F16C, else AVX2 + F16C, else scalar. It covers
// - ReduceInto and ReduceTo: f32, f64, f16, bf16 and i32 with every op; i64, i8 and u8 with sum,
//   avg, min and max. i64, i8 and u8 prod run scalar (neither AVX2 nor AVX-512F has a
//   64-bit multiply; x86 has no 8-bit one).
// - AccumulateInto, LoadAccumulator, StoreAccumulator: every dtype and op they take.
// - FinishAverage: f32, f64, f16 and bf16; integers run scalar (x86 has no SIMD
//   integer division).
//
// Buffers may start at any address aligned to their element size. A source and a
// destination must be either exactly the same memory (in place, element by element)
// or disjoint. The functions keep no state beyond the ISA chosen once, so they may run
// concurrently on disjoint destinations, sharing sources.
//
// Example:
//   std::vector<float> mine = {1.0f, -0.0f, 7.0f};
//   const std::vector<float> theirs = {2.0f, 0.0f, NAN};
//   ReduceInto(ReduceOp::kMin, ConstBufferView::Of(absl::MakeConstSpan(theirs)),
//              BufferView::Of(absl::MakeSpan(mine)));
//   // OK; mine == {1.0f, -0.0f, NaN (bits 0x7FC00000)}
//
//   std::vector<int32_t> counts = {7, -7, INT32_MAX};
//   BufferView view = BufferView::Of(absl::MakeSpan(counts));
//   ReduceInto(ReduceOp::kAvg, view, view);   // counts == {14, -14, -2} (wrapped)
//   FinishAverage(view, 4);                   // counts == {3, -3, 0} (toward zero)
//
//   // bf16 gradients of 4 ranks, summed in f32, averaged and rounded once:
//   std::vector<float> acc(n);
//   LOOM_RETURN_IF_ERROR(LoadAccumulator(grads[0], absl::MakeSpan(acc)));
//   for (int r = 1; r < 4; ++r) {
//     LOOM_RETURN_IF_ERROR(AccumulateInto(ReduceOp::kAvg, grads[r], absl::MakeSpan(acc)));
//   }
//   LOOM_RETURN_IF_ERROR(StoreAccumulator(acc, /*divisor=*/4, out));
//
//   ReduceInto(ReduceOp::kSum, f32_view, bf16_view);
//   // InvalidArgument: "ReduceInto: src is f32 but dst is bf16"
#ifndef LOOM_COLLECTIVES_REDUCE_REDUCE_KERNELS_H_
#define LOOM_COLLECTIVES_REDUCE_REDUCE_KERNELS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "core/buffer_view.h"
#include "core/reduce_op.h"

namespace loom {

// ReduceInto sets dst[i] = op(dst[i], src[i]) for every i; kAvg adds (see
// FinishAverage). Returns InvalidArgument, writing nothing, when the dtypes differ
// (naming both), the sizes differ (naming both), a buffer is not aligned to its
// elements, src and dst overlap without being the same memory, or op is not a ReduceOp.
absl::Status ReduceInto(ReduceOp op, ConstBufferView src, BufferView dst);

// ReduceTo sets dst[i] = op(a[i], b[i]) for every i, in one pass (no copy of a into
// dst first); kAvg adds. dst may be exactly a or b (in place) or disjoint from both.
// The result is bitwise that of ReduceInto(op, b, dst) with dst holding a. Returns
// InvalidArgument, writing nothing, when the dtypes or sizes of the three differ
// (naming them), a buffer is not aligned to its elements, dst overlaps a or b without
// being the same memory, or op is not a ReduceOp.
absl::Status ReduceTo(ReduceOp op, ConstBufferView a, ConstBufferView b, BufferView dst);

// AccumulateInto sets acc[i] = op(acc[i], float(src[i])) for an f16, bf16 or f32 src,
// in f32; kAvg adds. Returns InvalidArgument, writing nothing, when src has another
// dtype (naming it), the sizes differ (naming both), src is not aligned to its
// elements, src and acc overlap without being the same memory, or op is not a ReduceOp.
absl::Status AccumulateInto(ReduceOp op, ConstBufferView src, absl::Span<float> acc);

// LoadAccumulator sets acc[i] = float(src[i]), exactly, for an f16, bf16 or f32 src.
// Returns InvalidArgument, writing nothing, when src has another dtype, the sizes
// differ, src is not aligned to its elements, or src and acc overlap without being the
// same memory.
absl::Status LoadAccumulator(ConstBufferView src, absl::Span<float> acc);

// StoreAccumulator sets dst[i] = acc[i] / divisor for an f16, bf16 or f32 dst: the
// quotient is computed in f32 (divisor converted to f32, exact up to 2^24) and rounded
// once to dst's dtype, to nearest even; divisor 1 skips the division. Returns
// InvalidArgument, writing nothing, when divisor < 1, dst has another dtype, the sizes
// differ, dst is not aligned to its elements, or acc and dst overlap without being the
// same memory.
absl::Status StoreAccumulator(absl::Span<const float> acc, int64_t divisor, BufferView dst);

// FinishAverage turns a sum over num_ranks ranks into their average: buf[i] /= num_ranks.
// Integers truncate toward zero (as NCCL's ncclAvg does); f32 and f64 divide in their
// own precision; f16 and bf16 divide in f32 and round once. num_ranks 1 leaves buf
// untouched. Returns InvalidArgument, writing nothing, when num_ranks < 1 or buf is not
// aligned to its elements.
absl::Status FinishAverage(BufferView buf, int64_t num_ranks);

}  // namespace loom

#endif  // LOOM_COLLECTIVES_REDUCE_REDUCE_KERNELS_H_
