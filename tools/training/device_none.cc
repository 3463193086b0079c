// The job's device piece without CUDA (the default build): none.
#include "tools/training/device_gemm.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom {

bool DeviceGemmAvailable() { return false; }

absl::StatusOr<std::unique_ptr<GemmEngine>> MakeDeviceGemmEngine(int device) {
  return absl::UnimplementedError(
      absl::StrCat("no GEMM engine for CUDA device ", device,
                   ": this binary was built without CUDA (build with --config=cuda)"));
}

int64_t DeviceGemmProducts(const GemmEngine&) { return 0; }

}  // namespace loom
