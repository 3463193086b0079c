// LrSchedule: the learning rate of each training step, linear warm-up then cosine
// decay. It is a pure function of the step number, so a run resumed at step k uses
// the same rates as the uninterrupted run; nothing about the schedule needs saving
// in a checkpoint beyond the flags themselves.
//
// Steps count from 1, like AdamW's step number. For step <= warmup_steps the rate
// rises linearly to lr (lr * step / warmup_steps); after it, it falls along half a
// cosine from lr (at step warmup_steps) to lr_min (at step total_steps). Steps below 1
// are taken as 1 and steps past total_steps as total_steps.
//
// Example:
//   LrSchedule s{.lr = 1e-3f, .lr_min = 1e-4f, .warmup_steps = 10, .total_steps = 110};
//   LOOM_RETURN_IF_ERROR(s.Validate());
//   s.LrAt(5);    // 5e-4: half way up the warm-up
//   s.LrAt(10);   // 1e-3: the peak
//   s.LrAt(60);   // 5.5e-4: half way down the cosine
//   s.LrAt(110);  // 1e-4: exactly lr_min
//   LrSchedule::Constant(3e-3f, 500).LrAt(k);  // exactly 3e-3f for every k
//   LrSchedule{.lr = 1e-3f, .lr_min = 2e-3f, .total_steps = 5}.Validate()
//   // InvalidArgument: "LrSchedule: --lr_min 0.002 must be in [0, --lr 0.001]"
#ifndef LOOM_TOOLS_TRAINING_LR_SCHEDULE_H_
#define LOOM_TOOLS_TRAINING_LR_SCHEDULE_H_

#include <cstdint>

#include "absl/status/status.h"

namespace loom {

struct LrSchedule {
  float lr = 0.0f;           // --lr: the peak rate, reached at the end of the warm-up
  float lr_min = 0.0f;       // --lr_min: the rate at total_steps, in [0, lr]
  int64_t warmup_steps = 0;  // --warmup_steps: in [0, total_steps]
  int64_t total_steps = 1;   // --steps: the run's last step, >= 1

  // Constant: lr at every step (no warm-up, lr_min == lr). The rate is then exactly
  // `lr`, so runs without a schedule keep bitwise the results they had before one.
  static LrSchedule Constant(float lr, int64_t total_steps) {
    return LrSchedule{lr, lr, 0, total_steps};
  }

  // Validate returns InvalidArgument naming the flags and their values unless lr and
  // lr_min are finite, 0 <= lr_min <= lr, total_steps >= 1 and
  // 0 <= warmup_steps <= total_steps.
  absl::Status Validate() const;

  // LrAt returns the rate of AdamW step `step` (from 1); see the top of this file.
  // Computed in double and rounded once to float. Meaningful only after Validate.
  float LrAt(int64_t step) const;
};

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_LR_SCHEDULE_H_
