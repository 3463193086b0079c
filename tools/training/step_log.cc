#include "tools/training/step_log.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/atomic_file.h"
#include "tools/training/job_checkpoint.h"
#include "tools/training/loss_plot.h"

namespace loom {

absl::StatusOr<StepLog> StepLog::Open(const TrainCommand& command, bool prints,
                                      std::ostream& out) {
  StepLog log(prints, out);
  const std::string& path = command.outputs.metrics;
  if (!prints || path.empty()) return log;
  const TrainJobOptions& o = command.options;
  absl::StatusOr<int64_t> resumed_at = absl::NotFoundError("no resume");
  if (!o.resume_dir.empty()) resumed_at = LatestCheckpointStep(o.resume_dir);
  absl::StatusOr<MetricsLog> file =
      resumed_at.ok() ? MetricsLog::OpenForResume(path, *resumed_at + 1) : MetricsLog::Open(path);
  if (!file.ok()) return file.status();
  log.metrics_.emplace(std::move(*file));
  return log;
}

void StepLog::Record(const StepReport& r) {
  if (!prints_) return;
  *out_ << r.ToString() << "\n" << std::flush;
  MetricsLine line;
  line.step = r.step;
  line.loss = r.loss;
  line.lr = r.lr;
  line.eval_loss = r.eval_loss;
  line.tokens_per_second = r.tokens_per_second;
  line.bytes_sent = r.comm_bytes;
  line.seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  sample_.Add(line);
  if (metrics_.has_value() && status_.ok()) status_ = metrics_->Append(line);
}

absl::Status StepLog::WritePlot(const TrainCommand& command, const TrainSummary& summary) {
  const std::string& path = command.outputs.plot;
  if (!prints_ || path.empty()) return absl::OkStatus();
  std::vector<MetricsLine> lines;
  if (metrics_.has_value()) {
    // The whole run, earlier runs of it included, thinned as the sample is.
    absl::StatusOr<std::vector<MetricsLine>> all = ReadMetricsFile(command.outputs.metrics);
    if (!all.ok()) return all.status();
    MetricsSample thinned(kPlotPoints);
    for (const MetricsLine& line : *all) thinned.Add(line);
    lines = thinned.Lines();
  } else {
    lines = sample_.Lines();
  }
  const TrainJobOptions& o = command.options;
  LossPlotOptions plot;
  plot.title = absl::StrFormat("train %s  dp=%d tp=%d pp=%d cp=%d", o.model.ToString(), o.dp,
                               o.tp, o.pp, o.cp);
  plot.reference_lines.push_back({"uniform guess log V", summary.uniform_loss});
  if (summary.entropy_rate > 0) {
    plot.reference_lines.push_back({"the chain's entropy rate", summary.entropy_rate});
  }
  absl::StatusOr<std::string> svg = LossPlotSvg(lines, plot);
  if (!svg.ok()) return svg.status();
  if (absl::Status s = WriteFileAtomically(path, *svg); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("--plot: ", s.message()));
  }
  *out_ << "plot: " << path << "\n";
  return absl::OkStatus();
}

}  // namespace loom
