// CublasGemmEngine: a GemmEngine (tensor_parallel/layers/gemm.h) that runs the products
// of host-memory views on a CUDA device through GpuGemm: the operands are copied to
// the device (row by row where ld > cols, so the columns past C's cols are never
// written), multiplied with cuBLAS in f32 (pedantic math: within the bound of
// internal/gpu_testing.h of OpenBLAS), and C is copied back before Run returns.
//
// It is what `train --device=cuda` installs on each rank thread: every layer's Gemm
// runs on the GPU while activations, weights and the optimizer stay in host memory.
// The device buffers grow to the largest product seen and are kept; each Run waits
// for its copies (with `timeout`), so the host views can change as soon as it returns.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<CublasGemmEngine> gpu,
//                         CublasGemmEngine::Create({.device = 0}));
//   ScopedGemmEngine on_gpu(gpu.get());
//   LOOM_RETURN_IF_ERROR(Gemm(Dense(a, m, k), Transpose::kNo, Dense(b, k, n),
//                             Transpose::kNo, Dense(absl::MakeSpan(c), m, n)));  // on the GPU
//   CublasGemmEngine::Create({.device = 7});
//   // InvalidArgument: "CUDA device 7 is outside [0, 1)" (the count this machine has)
#ifndef LOOM_TENSOR_PARALLEL_GPU_CUBLAS_GEMM_ENGINE_H_
#define LOOM_TENSOR_PARALLEL_GPU_CUBLAS_GEMM_ENGINE_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/gpu/cuda_stream.h"
#include "core/gpu/device_buffer.h"
#include "tensor_parallel/gpu/cublas_gemm.h"
#include "tensor_parallel/layers/gemm.h"

namespace loom {

struct CublasGemmEngineOptions {
  int device = 0;
  // The longest one product (copies in, GEMM, copy out) may take; past it Run returns
  // DeadlineExceeded and the engine is unusable (its stream may still be busy).
  absl::Duration timeout = absl::Seconds(60);
};

class CublasGemmEngine : public GemmEngine {
 public:
  // Create makes the engine's stream and cuBLAS handle on options.device.
  // FailedPrecondition without a CUDA device; InvalidArgument for a device out of range
  // or a timeout <= 0; otherwise the CUDA or cuBLAS error.
  static absl::StatusOr<std::unique_ptr<CublasGemmEngine>> Create(
      const CublasGemmEngineOptions& options);

  absl::string_view name() const override { return "cuBLAS f32 (pedantic)"; }
  absl::Status Run(ConstMatrixView a, Transpose trans_a, ConstMatrixView b, Transpose trans_b,
                   MatrixView c, float alpha, float beta) override;

  // Products run and bytes copied each way so far.
  int64_t products() const { return products_; }
  int64_t bytes_to_device() const { return bytes_to_device_; }
  int64_t bytes_to_host() const { return bytes_to_host_; }

 private:
  CublasGemmEngine(CudaStream stream, CublasHandle cublas, CublasGemmEngineOptions options)
      : stream_(std::move(stream)), cublas_(std::move(cublas)), options_(options) {}

  // Grows `buffer` to at least `bytes` (contents not kept).
  absl::Status Reserve(DeviceBuffer& buffer, size_t bytes);

  CudaStream stream_;
  CublasHandle cublas_;
  CublasGemmEngineOptions options_;
  DeviceBuffer a_, b_, c_;  // packed (ld = cols) device copies
  bool broken_ = false;
  int64_t products_ = 0;
  int64_t bytes_to_device_ = 0;
  int64_t bytes_to_host_ = 0;
};

}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_GPU_CUBLAS_GEMM_ENGINE_H_
