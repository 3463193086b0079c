// DeviceTrainer without CUDA (the default build): none.
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "tools/training/device_trainer.h"

namespace loom {

bool DeviceTrainingAvailable() { return false; }

absl::StatusOr<std::unique_ptr<DeviceTrainer>> MakeDeviceTrainer(const GptConfig& config,
                                                                 int64_t, bool,
                                                                 const std::string&) {
  return absl::UnimplementedError(absl::StrCat(
      "no device trainer for ", config.ToString(),
      ": this binary was built without CUDA (build with --config=cuda)"));
}

}  // namespace loom
