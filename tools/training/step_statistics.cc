#include "tools/training/step_statistics.h"

#include <algorithm>

namespace loom {

void StepStatistics::Add(const StepReport& report) {
  if (history_ > 0) {
    if (recent_.size() == history_) recent_.pop_front();
    recent_.push_back(report);
  }
  final_loss_ = report.loss;
  final_eval_loss_ = report.eval_loss;
  peak_model_state_bytes_ = std::max(peak_model_state_bytes_, report.model_state_bytes);
  comm_bytes_ += report.comm_bytes;
  if (steps_ == 0) {
    first_breakdown_ = report.breakdown;
    first_busy_ = report.host_cpu_busy;
  } else {
    later_breakdown_sum_.Add(report.breakdown);
    if (report.host_cpu_busy >= 0) {
      later_busy_sum_ += report.host_cpu_busy;
      ++later_busy_steps_;
    }
  }
  // The last step is held back until the next one comes: it is left out.
  if (pending_faults_ >= 0) {
    steady_faults_ += pending_faults_;
    ++steady_fault_steps_;
  }
  pending_faults_ = steps_ >= 2 ? report.page_faults : -1;
  ++steps_;
}

void StepStatistics::FillSummary(TrainSummary* summary) const {
  if (steps_ == 0) return;
  summary->steps = recent_;
  summary->final_loss = final_loss_;
  summary->final_eval_loss = final_eval_loss_;
  summary->peak_model_state_bytes_per_rank =
      std::max(summary->peak_model_state_bytes_per_rank, peak_model_state_bytes_);
  summary->comm_bytes_per_rank_per_step = comm_bytes_ / steps_;
  summary->page_faults_per_step =
      steady_fault_steps_ > 0
          ? static_cast<double>(steady_faults_) / static_cast<double>(steady_fault_steps_)
          : -1.0;
  if (steps_ == 1) {
    summary->step_breakdown_s = first_breakdown_;
    summary->host_cpu_busy = first_busy_;
    return;
  }
  summary->step_breakdown_s = StepBreakdown{};
  summary->step_breakdown_s.Add(later_breakdown_sum_, 1.0 / static_cast<double>(steps_ - 1));
  summary->host_cpu_busy =
      later_busy_steps_ > 0 ? later_busy_sum_ / static_cast<double>(later_busy_steps_) : -1.0;
}

}  // namespace loom
