// cuBLAS for the tensor-parallel layers: an owned cuBLAS handle bound to one
// CudaStream, cuBLAS errors as absl::Status, and GpuGemm, which is Gemm
// (tensor_parallel/layers/gemm.h) on device memory: the same row-major views,
// transposes, alpha/beta accumulation, shape checks and empty-shape rules, so a layer
// can swap one for the other and compare the results (see README.md for the bound).
//
// The views are gemm.h's ConstMatrixView / MatrixView whose spans hold device
// pointers (AsDeviceFloats); GpuGemm checks that they do before enqueuing anything.
// Work is enqueued on the handle's stream and GpuGemm returns without waiting: the
// results are there once the stream is synchronized.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(/*device=*/0));
//   LOOM_ASSIGN_OR_RETURN(CublasHandle cublas, CublasHandle::Create(stream));
//   // a, b, c: DeviceBuffers of 6, 6 and 4 floats holding [2,3], [3,2], [2,2]
//   LOOM_RETURN_IF_ERROR(GpuGemm(cublas, Dense(AsDeviceFloats(a), 2, 3), Transpose::kNo,
//                                Dense(AsDeviceFloats(b), 3, 2), Transpose::kNo,
//                                Dense(AsDeviceFloats(c), 2, 2)));
//   LOOM_RETURN_IF_ERROR(stream.Synchronize(absl::Now() + absl::Seconds(10)));
//   // c == {4, 5, 10, 11} for a = {1, 2, 3, 4, 5, 6}, b = {1, 0, 0, 1, 1, 1}
//   GpuGemm(cublas, Dense(AsDeviceFloats(a), 2, 3), Transpose::kNo,
//           Dense(AsDeviceFloats(a), 2, 3), Transpose::kNo, ...);
//   // InvalidArgument: "GpuGemm: op(A) is [2,3] but op(B) is [2,3]: inner dimensions differ"
#ifndef LOOM_TENSOR_PARALLEL_GPU_CUBLAS_GEMM_H_
#define LOOM_TENSOR_PARALLEL_GPU_CUBLAS_GEMM_H_

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/gpu/cuda_stream.h"
#include "core/gpu/device_buffer.h"
#include "tensor_parallel/layers/gemm.h"

namespace loom {

// CublasStatus: OK for CUBLAS_STATUS_SUCCESS; otherwise a Status naming `call`, with
// cublasGetStatusName, the number and cublasGetStatusString. Codes: ResourceExhausted
// for ALLOC_FAILED, FailedPrecondition for NOT_INITIALIZED and ARCH_MISMATCH,
// InvalidArgument for INVALID_VALUE, Unimplemented for NOT_SUPPORTED, Internal else.
absl::Status CublasStatus(cublasStatus_t status, absl::string_view call);

// How cuBLAS may compute f32 products.
enum class CublasMath {
  // CUBLAS_PEDANTIC_MATH: f32 multiplies and f32 accumulation only, whatever the
  // environment (no TF32, no BF16x9 emulation), so results stay within the stated
  // bound of the CPU Gemm. The default.
  kPedantic,
  // CUBLAS_DEFAULT_MATH: also f32 for Sgemm, but leaves cuBLAS's environment
  // overrides in effect.
  kDefault,
};

// CublasHandle: one cublasHandle_t, owned and move-only, on the stream it was
// created for. The stream must outlive the handle. A handle serves one host thread
// at a time (cuBLAS's rule); every rank thread creates its own.
class CublasHandle {
 public:
  // Create makes a handle on stream.device() that enqueues on `stream`, with `math`.
  // FailedPrecondition without a CUDA device; InvalidArgument for a device outside
  // [0, count); otherwise the CUDA or cuBLAS error naming the call.
  static absl::StatusOr<CublasHandle> Create(const CudaStream& stream,
                                             CublasMath math = CublasMath::kPedantic);

  // An empty handle: every GpuGemm on it returns FailedPrecondition.
  CublasHandle() = default;
  CublasHandle(CublasHandle&& other) noexcept;
  CublasHandle& operator=(CublasHandle&& other) noexcept;
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  ~CublasHandle();

  cublasHandle_t get() const { return handle_; }
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }
  bool empty() const { return handle_ == nullptr; }

 private:
  CublasHandle(cublasHandle_t handle, cudaStream_t stream, int device)
      : handle_(handle), stream_(stream), device_(device) {}

  cublasHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
};

// AsDeviceFloats returns `buffer`'s bytes as floats (size() / 4 of them), for views
// on device memory.
absl::Span<float> AsDeviceFloats(DeviceBuffer& buffer);
absl::Span<const float> AsDeviceFloats(const DeviceBuffer& buffer);

// CheckDeviceMemory returns OK when `bytes` (non-empty) lie in device memory of
// `device`, or InvalidArgument naming `what` and the memory type it found (host,
// unregistered host, managed, another device). Empty ranges are always OK.
absl::Status CheckDeviceMemory(const void* data, size_t bytes, int device, absl::string_view what);

// GpuGemm computes C = alpha * op(A) * op(B) + beta * C on `cublas`'s stream, with
// Gemm's meaning and checks: row-major views, op transposes when asked. Returns
// InvalidArgument (naming the shapes, as Gemm does, prefixed "GpuGemm:") when op(A)
// is not [m,k], op(B) not [k,n] and C not [m,n], when a view's ld is below its cols,
// when a span is too short for its rows and ld, or when a dimension or ld exceeds
// 32 bits; FailedPrecondition for an empty handle; InvalidArgument when a non-empty
// operand is not device memory of the handle's device; otherwise the cuBLAS or CUDA
// error naming the call. Empty products (m, n or k zero) are fine: C is then only
// scaled by beta (set to zero for beta == 0, as Gemm does).
//
// C must not overlap A or B. Enqueued asynchronously: read C after synchronizing.
absl::Status GpuGemm(const CublasHandle& cublas, ConstMatrixView a, Transpose trans_a,
                     ConstMatrixView b, Transpose trans_b, MatrixView c, float alpha = 1.0f,
                     float beta = 0.0f);

}  // namespace loom

// LOOM_CUBLAS_RETURN_IF_ERROR(cublasSgemm(...)) returns CublasStatus from the
// enclosing function (which returns Status or StatusOr) when the call fails.
#define LOOM_CUBLAS_RETURN_IF_ERROR(expr)                      \
  do {                                                         \
    const cublasStatus_t loom_cublas_status_ = (expr);         \
    if (loom_cublas_status_ != CUBLAS_STATUS_SUCCESS) {        \
      return ::loom::CublasStatus(loom_cublas_status_, #expr); \
    }                                                          \
  } while (false)

#endif  // LOOM_TENSOR_PARALLEL_GPU_CUBLAS_GEMM_H_
