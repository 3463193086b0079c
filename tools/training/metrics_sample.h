// MetricsSample: a bounded picture of a run's metrics lines, for a loss plot drawn
// without a metrics file. It keeps every line until `capacity`, then every second
// one, then every fourth, ... (the stride doubles each time it fills), and always
// the newest line: at most capacity + 1 lines however long the run, spread evenly
// over it, so memory stays flat over a million steps.
//
//   MetricsSample sample(/*capacity=*/4096);
//   for (...) sample.Add(line);
//   LossPlotSvg(sample.Lines(), options);
#ifndef LOOM_TOOLS_TRAINING_METRICS_SAMPLE_H_
#define LOOM_TOOLS_TRAINING_METRICS_SAMPLE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "tools/training/metrics_log.h"

namespace loom {

class MetricsSample {
 public:
  // `capacity` is at least 2 (a smaller value is taken as 2).
  explicit MetricsSample(size_t capacity) : capacity_(capacity < 2 ? 2 : capacity) {}

  void Add(const MetricsLine& line);

  // The kept lines in the order they were added, the newest last.
  std::vector<MetricsLine> Lines() const;

  int64_t stride() const { return stride_; }

 private:
  size_t capacity_;
  int64_t stride_ = 1;  // the kept lines are those whose index is a multiple of it
  int64_t added_ = 0;
  std::vector<MetricsLine> kept_;
  std::optional<MetricsLine> newest_;  // when its index is not a multiple of stride_
};

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_METRICS_SAMPLE_H_
