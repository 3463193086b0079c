// DeviceGemm: the GEMM engine `train --device=cuda` installs on every rank thread
// (tensor_parallel/layers/gemm.h's ScopedGemmEngine), so the layers' products run on a
// GPU through cuBLAS (tensor_parallel/gpu/cublas_gemm_engine.h) while everything else
// stays where it is. Built both ways: with --config=cuda it makes the cuBLAS engine;
// without, DeviceGemmAvailable() is false and MakeDeviceGemmEngine is Unimplemented,
// so the CPU build of the job needs no CUDA.
//
// Example:
//   if (!DeviceGemmAvailable()) ...;  // refuse --device=cuda up front
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GemmEngine> gpu, MakeDeviceGemmEngine(0));
//   ScopedGemmEngine on_gpu(gpu.get());
//   ...  // this thread's layers multiply on the GPU
//   DeviceGemmProducts(*gpu);  // products it ran
#ifndef LOOM_TOOLS_TRAINING_DEVICE_GEMM_H_
#define LOOM_TOOLS_TRAINING_DEVICE_GEMM_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "tensor_parallel/layers/gemm.h"

namespace loom {

// Whether this binary was built with CUDA (--config=cuda).
bool DeviceGemmAvailable();

// MakeDeviceGemmEngine returns a cuBLAS engine on CUDA device `device`:
// Unimplemented in a build without CUDA; FailedPrecondition on a machine without a
// device; InvalidArgument for a device out of range.
absl::StatusOr<std::unique_ptr<GemmEngine>> MakeDeviceGemmEngine(int device);

// The products `engine` (made by MakeDeviceGemmEngine) has run; 0 for any other.
int64_t DeviceGemmProducts(const GemmEngine& engine);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_DEVICE_GEMM_H_
