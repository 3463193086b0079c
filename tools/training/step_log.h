// StepLog: where //tools:train's step lines go on the printing rank: stdout, the
// --metrics file (every line, streamed) and a bounded sample for --plot. Nothing in
// it grows with the run: a million steps hold what a thousand do.
//
//   LOOM_ASSIGN_OR_RETURN(StepLog log, StepLog::Open(command, /*prints=*/rank == 0));
//   RunTrainJob(command.options, [&](const StepReport& r) { log.Record(r); });
//   LOOM_RETURN_IF_ERROR(log.status());                // a failed metrics append
//   LOOM_RETURN_IF_ERROR(log.WritePlot(command, summary, std::cout));
#ifndef LOOM_TOOLS_TRAINING_STEP_LOG_H_
#define LOOM_TOOLS_TRAINING_STEP_LOG_H_

#include <optional>
#include <ostream>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tools/training/metrics_log.h"
#include "tools/training/metrics_sample.h"
#include "tools/training/train_command.h"
#include "tools/training/train_options.h"

namespace loom {

class StepLog {
 public:
  // The lines the plot keeps without a metrics file (MetricsSample's capacity).
  static constexpr size_t kPlotPoints = 4096;

  // Open: with `prints` and --metrics, opens the file (a resumed run first drops the
  // lines of the steps it will train again). Without `prints`, Record does nothing.
  static absl::StatusOr<StepLog> Open(const TrainCommand& command, bool prints,
                                      std::ostream& out);

  // Record prints `report`'s line, appends it to the metrics file and samples it.
  // A failed append is kept for status() (the run goes on; the job fails after).
  void Record(const StepReport& report);

  // The first failed metrics append, or OK.
  const absl::Status& status() const { return status_; }

  // WritePlot: with --plot, the loss curve as SVG (from the metrics file when there
  // is one, so a resumed run plots the whole run; from the sample otherwise).
  absl::Status WritePlot(const TrainCommand& command, const TrainSummary& summary);

 private:
  StepLog(bool prints, std::ostream& out) : prints_(prints), out_(&out) {}

  bool prints_;
  std::ostream* out_;
  std::optional<MetricsLog> metrics_;
  MetricsSample sample_{kPlotPoints};
  absl::Status status_;
  absl::Time start_ = absl::Now();
};

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_STEP_LOG_H_
