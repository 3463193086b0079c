// The local math of one rank's shard of ColumnParallelLinear and RowParallelLinear
// (tensor_parallel/layers) on device memory, through GpuGemm (cublas_gemm.h):
//
//   forward          y  = x W^T (+ b)     x [rows, in], W [out, in], y [rows, out]
//   input gradient   dx = dy W            dy [rows, out], dx [rows, in]
//   weight gradient  dW = dy^T x, db = column sums of dy
//
// with the CPU layers' order of operations: the product first, then the bias added
// to every row (bitwise the CPU's AddBias), and db summed row by row from zero
// (bitwise the CPU's SumRows). Only the GEMMs differ from the CPU, within the bound
// in README.md.
//
// A layer is these pieces plus its collectives, which stay on the CPU Communicator
// here (AllReduceSumThroughHost copies to the host and back); NCCL on device buffers
// is separate work. Column-parallel: GpuLinearForward with the local bias;
// backward: GpuLinearBackwardInput, all-reduce dx, GpuLinearBackwardWeight.
// Row-parallel: GpuLinearForward without bias, all-reduce y, GpuAddBias; backward:
// both gradients local. Weights are f32 on the device: a layer that stores bf16
// weights widens them on the host before the copy (Tensor::ConvertTo), the same
// values the CPU layer widens for each product.
//
// Example (column-parallel shard, device views of x [5,4], w [3,4], b [3], y [5,3]):
//   LOOM_RETURN_IF_ERROR(GpuLinearForward(cublas, x, w, b, y));
//   LOOM_RETURN_IF_ERROR(GpuLinearBackwardInput(cublas, dy, w, dx));   // dx [5,4]
//   LOOM_RETURN_IF_ERROR(AllReduceSumThroughHost(tp, cublas, dx.data));
//   LOOM_RETURN_IF_ERROR(GpuLinearBackwardWeight(cublas, dy, x, dw, db));
//   GpuLinearForward(cublas, x /*[5,7]*/, w /*[3,4]*/, b, y);
//   // InvalidArgument: "GpuLinearForward: x is [5,7] but w is [3,4]: in features differ"
#ifndef LOOM_TENSOR_PARALLEL_GPU_GPU_LINEAR_H_
#define LOOM_TENSOR_PARALLEL_GPU_GPU_LINEAR_H_

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/communicator.h"
#include "tensor_parallel/gpu/cublas_gemm.h"
#include "tensor_parallel/layers/gemm.h"

namespace loom {

// GpuLinearForward enqueues y = x w^T and then, when `bias` is non-empty, adds it to
// every row of y. InvalidArgument naming the shapes unless x is [rows, in], w
// [out, in], y [rows, out] and bias empty or [out]; InvalidArgument when bias is not
// device memory; otherwise GpuGemm's errors (FailedPrecondition for an empty handle).
absl::Status GpuLinearForward(const CublasHandle& cublas, ConstMatrixView x, ConstMatrixView w,
                              absl::Span<const float> bias, MatrixView y);

// GpuAddBias enqueues y[i, :] += bias for every row (a row-parallel layer adds its
// bias after the all-reduce). InvalidArgument naming the sizes unless bias has
// y.cols values and y's ld >= cols; FailedPrecondition for an empty handle;
// InvalidArgument for operands not in device memory; the CUDA error otherwise.
absl::Status GpuAddBias(const CublasHandle& cublas, absl::Span<const float> bias, MatrixView y);

// GpuLinearBackwardInput enqueues dx = dy w. InvalidArgument naming the shapes
// unless dy is [rows, out], w [out, in] and dx [rows, in]; otherwise GpuGemm's errors.
absl::Status GpuLinearBackwardInput(const CublasHandle& cublas, ConstMatrixView dy,
                                    ConstMatrixView w, MatrixView dx);

// GpuLinearBackwardWeight enqueues dw = dy^T x and, when `db` is non-empty, db =
// the column sums of dy. InvalidArgument naming the shapes unless dy is [rows, out],
// x [rows, in], dw [out, in] and db empty or [out]; otherwise as GpuLinearForward.
absl::Status GpuLinearBackwardWeight(const CublasHandle& cublas, ConstMatrixView dy,
                                     ConstMatrixView x, MatrixView dw, absl::Span<float> db);

// AllReduceSumThroughHost sums `values` (device memory of the handle's device) over
// the ranks of `tp`: waits for the handle's stream, copies to the host, all-reduces
// on the Communicator and copies back (synchronously). Does nothing for tp.size() == 1,
// as the CPU layers. FailedPrecondition for an empty handle; InvalidArgument when
// values are not device memory; otherwise the CUDA or collective error.
absl::Status AllReduceSumThroughHost(Communicator& tp, const CublasHandle& cublas,
                                     absl::Span<float> values);

}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_GPU_GPU_LINEAR_H_
