// DeviceAdamW without CUDA (the default build): none.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "offload/device_adamw.h"

namespace loom {

absl::StatusOr<std::unique_ptr<DeviceAdamW>> MakeDeviceAdamW(int device, int64_t) {
  return absl::UnimplementedError(
      absl::StrCat("no AdamW on CUDA device ", device,
                   ": this binary was built without CUDA (build with --config=cuda)"));
}

}  // namespace loom
