// DeviceGemm with CUDA (--config=cuda): cuBLAS through CublasGemmEngine.
#include "tools/training/device_gemm.h"

#include <memory>
#include <utility>

#include "core/status_macros.h"
#include "tensor_parallel/gpu/cublas_gemm_engine.h"

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
