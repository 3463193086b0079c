// Element-wise reductions of CUDA device memory: the combine step of a GPU collective
// (sum a received chunk into a local one) and the final division of an average,
// enqueued on a stream. Results are those of the CPU kernels in
// collectives/reduce/reduce_kernels.h, bit for bit, for every DType and op:
// - Floats: one IEEE operation rounded once, to nearest even; f16 and bf16 are widened
//   exactly, combined in f32 and rounded once when stored.
// - Every NaN that sum, prod, min and max produce is the canonical quiet NaN (f32
//   0x7FC00000, f64 0x7FF8000000000000, f16 0x7E00, bf16 0x7FC0); min(-0, +0) is -0 and
//   max(-0, +0) is +0 (IEEE 754-2019 minimum / maximum).
// - Integer sum and prod wrap modulo 2^bits; an integer average truncates toward zero.
//
// kAvg is not an element-wise op: as in the CPU collectives, an average is reduced as
// kSum and divided once, at the end, by DeviceFinishAverage. DeviceReduceTo rejects it,
// so that a caller who forgets the division gets an error, not a silent sum.
//
// Pointers are device-accessible memory (cudaMalloc, or mapped pinned host memory) of
// the current device, aligned to their element size. Pointers that share their offset
// within 16 bytes (all aligned, or all one element in) run with 16-byte loads and
// stores; others run one element at a time.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(/*device=*/0));
//   // mine, theirs: DeviceBuffers of n bf16 gradients each, on device 0.
//   LOOM_RETURN_IF_ERROR(DeviceReduceTo(ReduceOp::kSum, DType::kBF16, mine.data(),
//                                       theirs.data(), mine.data(), n, stream.get()));
//   LOOM_RETURN_IF_ERROR(DeviceFinishAverage(DType::kBF16, mine.data(), n, 2, stream.get()));
//   LOOM_RETURN_IF_ERROR(stream.Synchronize(absl::Now() + absl::Seconds(10)));
//   // mine[i] == ToBFloat16(ToFloat(ToBFloat16(ToFloat(mine[i]) + ToFloat(theirs[i]))) / 2)
//
//   DeviceReduceTo(ReduceOp::kAvg, DType::kF32, a, b, out, n, stream.get());
//   // InvalidArgument: "DeviceReduceTo: op avg is not element-wise; reduce with sum and
//   //                   divide once with DeviceFinishAverage"
#ifndef LOOM_CORE_GPU_DEVICE_REDUCE_H_
#define LOOM_CORE_GPU_DEVICE_REDUCE_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "core/dtype.h"
#include "core/reduce_op.h"

namespace loom {

// DeviceReduceTo enqueues out[i] = op(a[i], b[i]) for i in [0, count) on `stream`
// (nullptr: the legacy default stream) and returns without waiting; the result is
// ready when the stream's later work runs or a wait on it returns. out may be exactly a
// or b (in place) or disjoint from both. count 0 enqueues nothing and makes no CUDA
// call. Returns InvalidArgument, enqueuing nothing, for op kAvg, an op or dtype that is
// not an enumerator, a null pointer with count > 0, a pointer not aligned to its
// elements, out overlapping a or b without being the same memory, or a byte size that
// overflows (each naming the values); the launch's CUDA error otherwise (CudaStatus,
// naming the kernel and its launch shape; FailedPrecondition without a device).
absl::Status DeviceReduceTo(ReduceOp op, DType dtype, const void* a, const void* b, void* out,
                            size_t count, cudaStream_t stream);

// DeviceFinishAverage enqueues buf[i] /= num_ranks, turning a sum over num_ranks ranks
// into their average as collectives/reduce's FinishAverage does: integers truncate
// toward zero; f32 and f64 divide in their own precision; f16 and bf16 divide in f32
// and round once; a NaN keeps its sign and payload, quieted. num_ranks 1 and count 0
// enqueue nothing. Returns InvalidArgument for num_ranks < 1, a dtype that is not an
// enumerator, a null or misaligned buf with count > 0, or a byte size that overflows;
// the launch's CUDA error otherwise.
absl::Status DeviceFinishAverage(DType dtype, void* buf, size_t count, int64_t num_ranks,
                                 cudaStream_t stream);

}  // namespace loom

#endif  // LOOM_CORE_GPU_DEVICE_REDUCE_H_
