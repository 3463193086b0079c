// The job's device piece with CUDA (--config=cuda): the GEMM engine (cuBLAS through
// CublasGemmEngine). The AdamW of --offload=gpu is offload/device_adamw.h.
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "tensor_parallel/gpu/cublas_gemm_engine.h"
#include "tools/training/device_gemm.h"

namespace loom {

bool DeviceGemmAvailable() { return true; }

absl::StatusOr<std::unique_ptr<GemmEngine>> MakeDeviceGemmEngine(int device) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<CublasGemmEngine> engine,
                        CublasGemmEngine::Create({.device = device}));
  return std::unique_ptr<GemmEngine>(std::move(engine));
}

int64_t DeviceGemmProducts(const GemmEngine& engine) {
  const auto* cublas = dynamic_cast<const CublasGemmEngine*>(&engine);
  return cublas == nullptr ? 0 : cublas->products();
}

}  // namespace loom
