// CompareWithReference: the job's check against one rank. The same model, seed and
// global batch trained on one rank (dp = pp = tp = 1, zero 0, GPipe) must end with
// the same parameters, up to the rounding of other summation orders (tools/docs/correctness.md
// measures how far that holds).
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(TrainSummary summary, RunTrainJob(options, nullptr));
//   LOOM_ASSIGN_OR_RETURN(ReferenceComparison c, CompareWithReference(options, summary));
//   c.max_abs_param_diff / c.max_abs_param;     // 1e-6 after 30 steps
#ifndef LOOM_TOOLS_TRAINING_REFERENCE_H_
#define LOOM_TOOLS_TRAINING_REFERENCE_H_

#include "absl/status/statusor.h"
#include "tools/training/train_options.h"

namespace loom {

// CompareWithReference trains the same model with the same seed and the same
// global batch on one rank (dp = pp = tp = 1, zero 0) and returns the largest
// absolute difference between `summary`'s final parameters (every rank's tp shard)
// and the reference's, and the reference's final loss.
// ReferenceOptions: the one-rank run CompareWithReference trains, built afresh
// from `options`' model, data, batch and optimizer fields alone.
TrainJobOptions ReferenceOptions(const TrainJobOptions& options);

struct ReferenceComparison {
  double max_abs_param_diff = 0;
  double max_abs_param = 0;  // the reference's largest magnitude, for a relative bound
  double reference_final_loss = 0;
};
absl::StatusOr<ReferenceComparison> CompareWithReference(const TrainJobOptions& options,
                                                         const TrainSummary& summary);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_REFERENCE_H_
