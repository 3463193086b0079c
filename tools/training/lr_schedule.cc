#include "tools/training/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace loom {
namespace {

constexpr char kName[] = "LrSchedule";
constexpr double kPi = 3.14159265358979323846;

}  // namespace

absl::Status LrSchedule::Validate() const {
  if (!std::isfinite(lr) || lr < 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": --lr ", lr, " must be finite and not negative"));
  }
  if (!std::isfinite(lr_min) || lr_min < 0.0f || lr_min > lr) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": --lr_min ", lr_min, " must be in [0, --lr ", lr, "]"));
  }
  if (total_steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": --steps ", total_steps, " must be at least 1"));
  }
  if (warmup_steps < 0 || warmup_steps > total_steps) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": --warmup_steps ", warmup_steps,
                                                   " must be in [0, --steps ", total_steps, "]"));
  }
  return absl::OkStatus();
}

float LrSchedule::LrAt(int64_t step) const {
  step = std::clamp<int64_t>(step, 1, std::max<int64_t>(total_steps, 1));
  const double peak = static_cast<double>(lr);
  if (step <= warmup_steps) {
    // The ratio first, so that step == warmup_steps gives exactly 1 and the peak exactly.
    return static_cast<float>(peak *
                              (static_cast<double>(step) / static_cast<double>(warmup_steps)));
  }
  // Exactly lr_min, whatever cos(pi) rounds to.
  if (step == total_steps) return lr_min;
  const double progress =
      static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
  const double floor = static_cast<double>(lr_min);
  // With lr_min == lr the second term is exactly 0, so the rate is exactly lr.
  return static_cast<float>(floor + (peak - floor) * 0.5 * (1.0 + std::cos(kPi * progress)));
}

}  // namespace loom
