#include "tools/training/metrics_sample.h"

#include <utility>

namespace loom {

void MetricsSample::Add(const MetricsLine& line) {
  const int64_t index = added_++;
  if (index % stride_ != 0) {
    newest_ = line;
    return;
  }
  newest_.reset();
  if (kept_.size() == capacity_) {
    // Full: keep every second line (indices that are multiples of the doubled
    // stride: kept_[0], kept_[2], ...), and this one if it is one of them.
    size_t out = 0;
    for (size_t i = 0; i < kept_.size(); i += 2) kept_[out++] = std::move(kept_[i]);
    kept_.resize(out);
    stride_ *= 2;
    if (index % stride_ != 0) {
      newest_ = line;
      return;
    }
  }
  kept_.push_back(line);
}

std::vector<MetricsLine> MetricsSample::Lines() const {
  std::vector<MetricsLine> lines = kept_;
  if (newest_.has_value()) lines.push_back(*newest_);
  return lines;
}

}  // namespace loom
