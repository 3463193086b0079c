#include "tensor_parallel/gpu/cublas_gemm_engine.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/gpu/cuda_status.h"
#include "core/status_macros.h"

namespace loom {
namespace {

size_t Floats(int64_t rows, int64_t cols) { return static_cast<size_t>(rows * cols); }

// Copies a rows x cols host view (rows `ld` floats apart) into packed device memory,
// or back: one 2-D copy, touching none of the host columns past `cols`.
absl::Status CopyRows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                      int64_t rows, int64_t cols, cudaMemcpyKind kind, cudaStream_t stream) {
  LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch,
                                              static_cast<size_t>(cols) * sizeof(float),
                                              static_cast<size_t>(rows), kind, stream));
  return absl::OkStatus();
}

absl::Status ToDevice(DeviceBuffer& dst, const float* src, int64_t rows, int64_t cols, int64_t ld,
                      cudaStream_t stream) {
  return CopyRows(dst.data(), static_cast<size_t>(cols) * sizeof(float), src,
                  static_cast<size_t>(ld) * sizeof(float), rows, cols, cudaMemcpyHostToDevice,
                  stream);
}

}  // namespace

absl::StatusOr<std::unique_ptr<CublasGemmEngine>> CublasGemmEngine::Create(
    const CublasGemmEngineOptions& options) {
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("CublasGemmEngine: timeout is ",
                                                   absl::FormatDuration(options.timeout),
                                                   "; it must be > 0"));
  }
  LOOM_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(options.device));
  LOOM_ASSIGN_OR_RETURN(CublasHandle cublas, CublasHandle::Create(stream, CublasMath::kPedantic));
  return std::unique_ptr<CublasGemmEngine>(
      new CublasGemmEngine(std::move(stream), std::move(cublas), options));
}

absl::Status CublasGemmEngine::Reserve(DeviceBuffer& buffer, size_t bytes) {
  if (buffer.size() >= bytes) return absl::OkStatus();
  buffer = DeviceBuffer();  // free first: the old and new need not fit together
  LOOM_ASSIGN_OR_RETURN(buffer,
                        DeviceBuffer::Allocate(MemorySpace::kDevice, bytes, options_.device));
  return absl::OkStatus();
}

absl::Status CublasGemmEngine::Run(ConstMatrixView a, Transpose trans_a, ConstMatrixView b,
                                   Transpose trans_b, MatrixView c, float alpha, float beta) {
  if (broken_) {
    return absl::FailedPreconditionError(
        "CublasGemmEngine: an earlier product passed its timeout; the engine's stream may "
        "still be busy, so it runs no more");
  }
  const size_t a_floats = Floats(a.rows, a.cols);
  const size_t b_floats = Floats(b.rows, b.cols);
  const size_t c_floats = Floats(c.rows, c.cols);
  LOOM_RETURN_IF_ERROR(Reserve(a_, a_floats * sizeof(float)));
  LOOM_RETURN_IF_ERROR(Reserve(b_, b_floats * sizeof(float)));
  LOOM_RETURN_IF_ERROR(Reserve(c_, c_floats * sizeof(float)));
  const cudaStream_t stream = stream_.get();
  const absl::Status enqueued = [&]() -> absl::Status {
    LOOM_RETURN_IF_ERROR(ToDevice(a_, a.data.data(), a.rows, a.cols, a.ld, stream));
    LOOM_RETURN_IF_ERROR(ToDevice(b_, b.data.data(), b.rows, b.cols, b.ld, stream));
    if (beta != 0.0f) {
      LOOM_RETURN_IF_ERROR(ToDevice(c_, c.data.data(), c.rows, c.cols, c.ld, stream));
    }
    LOOM_RETURN_IF_ERROR(GpuGemm(
        cublas_, Dense(AsDeviceFloats(std::as_const(a_)).first(a_floats), a.rows, a.cols),
        trans_a, Dense(AsDeviceFloats(std::as_const(b_)).first(b_floats), b.rows, b.cols),
        trans_b, Dense(AsDeviceFloats(c_).first(c_floats), c.rows, c.cols), alpha, beta));
    return CopyRows(c.data.data(), static_cast<size_t>(c.ld) * sizeof(float), c_.data(),
                    static_cast<size_t>(c.cols) * sizeof(float), c.rows, c.cols,
                    cudaMemcpyDeviceToHost, stream);
  }();
  // Wait even when enqueuing failed part way: copies already enqueued read and write
  // the caller's memory, which must be left alone once Run returns.
  const absl::Status done = stream_.Synchronize(absl::Now() + options_.timeout);
  if (absl::IsDeadlineExceeded(done)) broken_ = true;
  LOOM_RETURN_IF_ERROR(enqueued);
  LOOM_RETURN_IF_ERROR(done);
  ++products_;
  bytes_to_device_ += static_cast<int64_t>(
      (a_floats + b_floats + (beta != 0.0f ? c_floats : 0)) * sizeof(float));
  bytes_to_host_ += static_cast<int64_t>(c_floats * sizeof(float));
  return absl::OkStatus();
}

}  // namespace loom
