// EstimatedActivationBytes: topology/memory_estimate's prediction of the
// activation bytes one pipeline rank of the job keeps for its backward, from
// the job's flags and its schedule: the rank's stage models (their blocks, the
// embedding on stage 0, the head on the last), each in-flight microbatch holding
// its own context (GptStageModule) and each split backward its weight work until
// the weight pass, walked over the rank's actions (1F1B's first stage: pp
// microbatches; GPipe's: all of them), f32 activations
// with fused attention, bf16 linear inputs under --dtype bf16, --recompute, and
// the busiest cp rank's ceil(seq_len / cp) positions. The job prints it beside
// the measured peak (GptModel's bookkeeping, which the formula counts term by
// term: gpt_model_test checks them equal).
//
// Example (--layers 2 --hidden 64 --heads 4 --vocab 64 --seq_len 1024, pp 1):
//   EstimatedActivationBytes(options, schedule, /*pp_rank=*/0);  // 9,560 B x
//   1,024
//   // --cp 4: 9,560 B x 256 positions
#ifndef LOOM_TOOLS_TRAINING_ACTIVATION_ESTIMATE_H_
#define LOOM_TOOLS_TRAINING_ACTIVATION_ESTIMATE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "pipeline/schedule.h"
#include "pipeline/stage_layout.h"
#include "tools/training/train_options.h"

namespace loom {

// EstimatedActivationBytes returns the estimate for pipeline rank `pp_rank` of
// `schedule` (its layout's layers, or the job's spread evenly). InvalidArgument
// for a rank outside the schedule or sizes the estimate rejects.
absl::StatusOr<int64_t> EstimatedActivationBytes(const TrainJobOptions &options,
                                                 const Schedule &schedule,
                                                 int64_t pp_rank);

} // namespace loom

#endif // LOOM_TOOLS_TRAINING_ACTIVATION_ESTIMATE_H_
