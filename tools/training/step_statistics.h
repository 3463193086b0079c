// StepStatistics: the run's figures from its step reports, kept as running
// aggregates, so that a run of a million steps holds what a run of ten does. The
// summary's totals (final loss, peaks, means) come from the aggregates; of the
// reports themselves only the most recent `history` are kept (the per-step lines
// are streamed: //tools:train's --metrics file has every one).
//
//   StepStatistics stats(/*history=*/1024);
//   for (...) stats.Add(report);        // O(1) memory per step past `history`
//   stats.FillSummary(&summary);        // final_loss, peaks, means, the last reports
#ifndef LOOM_TOOLS_TRAINING_STEP_STATISTICS_H_
#define LOOM_TOOLS_TRAINING_STEP_STATISTICS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>

#include "tools/training/train_options.h"

namespace loom {

class StepStatistics {
 public:
  // `history`: the reports kept (the newest); 0 keeps none.
  explicit StepStatistics(size_t history) : history_(history) {}

  void Add(const StepReport& report);

  int64_t steps() const { return steps_; }

  // Sets in `summary`: steps (the kept reports), final_loss and final_eval_loss
  // (the last step's), peak_model_state_bytes_per_rank (the largest over steps),
  // comm_bytes_per_rank_per_step (the mean), step_breakdown_s and host_cpu_busy
  // (means over the steps, the first left out when there are more: it warms up),
  // page_faults_per_step (the mean from the third step to the one before the
  // last: the last one's window also holds other thread ranks' end of the run).
  // With no step added, leaves them as they are.
  void FillSummary(TrainSummary* summary) const;

 private:
  size_t history_;
  std::deque<StepReport> recent_;
  int64_t steps_ = 0;
  double final_loss_ = 0;
  std::optional<double> final_eval_loss_;
  int64_t peak_model_state_bytes_ = 0;
  int64_t comm_bytes_ = 0;
  // The first step apart (it is left out of the means when there are more).
  StepBreakdown first_breakdown_;
  double first_busy_ = -1;
  StepBreakdown later_breakdown_sum_;
  double later_busy_sum_ = 0;
  int64_t later_busy_steps_ = 0;
  // Page faults of the steps from the third to the one before the last, how many
  // steps counted them, and the last step's (-1: none, or not counted).
  int64_t steady_faults_ = 0;
  int64_t steady_fault_steps_ = 0;
  int64_t pending_faults_ = -1;
};

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_STEP_STATISTICS_H_
