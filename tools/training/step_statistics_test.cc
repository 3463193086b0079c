#include "tools/training/step_statistics.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "tools/training/train_options.h"

namespace loom {
namespace {

// Seeded, distinct reports: every figure differs from step to step.
std::vector<StepReport> Reports(int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<StepReport> reports;
  for (int i = 0; i < count; ++i) {
    StepReport r;
    r.step = i + 1;
    r.loss = 5 * unit(rng);
    if (i % 3 == 2) r.eval_loss = 4 * unit(rng);
    r.model_state_bytes = static_cast<int64_t>(1e6 * unit(rng));
    r.comm_bytes = static_cast<int64_t>(1e7 * unit(rng));
    r.breakdown.compute = unit(rng);
    r.breakdown.dp_comm = unit(rng);
    r.breakdown.cp_exposed = unit(rng);
    r.host_cpu_busy = i % 4 == 1 ? -1.0 : unit(rng);
    r.page_faults = i % 5 == 3 ? -1 : static_cast<int64_t>(100 * unit(rng));
    reports.push_back(r);
  }
  return reports;
}

// The reference: the whole list, summarised at the end (what rank_loop did before
// it kept running totals).
TrainSummary Reference(const std::vector<StepReport>& reports) {
  TrainSummary s;
  s.final_loss = reports.back().loss;
  s.final_eval_loss = reports.back().eval_loss;
  int64_t comm = 0;
  for (const StepReport& r : reports) {
    s.peak_model_state_bytes_per_rank =
        std::max(s.peak_model_state_bytes_per_rank, r.model_state_bytes);
    comm += r.comm_bytes;
  }
  s.comm_bytes_per_rank_per_step = comm / static_cast<int64_t>(reports.size());
  const size_t skip = reports.size() > 1 ? 1 : 0;
  double busy = 0;
  int busy_steps = 0;
  for (size_t i = skip; i < reports.size(); ++i) {
    s.step_breakdown_s.Add(reports[i].breakdown,
                           1.0 / static_cast<double>(reports.size() - skip));
    if (reports[i].host_cpu_busy >= 0) {
      busy += reports[i].host_cpu_busy;
      ++busy_steps;
    }
  }
  s.host_cpu_busy = busy_steps > 0 ? busy / busy_steps : -1.0;
  // Page faults: the third step to the one before the last.
  int64_t faults = 0;
  int fault_steps = 0;
  for (size_t i = 2; i + 1 < reports.size(); ++i) {
    if (reports[i].page_faults < 0) continue;
    faults += reports[i].page_faults;
    ++fault_steps;
  }
  s.page_faults_per_step = fault_steps > 0 ? static_cast<double>(faults) / fault_steps : -1.0;
  return s;
}

TEST(StepStatisticsTest, TotalsMatchTheWholeListAndOnlyTheNewestReportsAreKept) {
  for (const int count : {1, 2, 3, 7, 100, 1000}) {
    for (const size_t history : {size_t{0}, size_t{1}, size_t{5}, size_t{2000}}) {
      const uint32_t seed = static_cast<uint32_t>(count * 31 + history);
      SCOPED_TRACE(testing::Message() << "steps " << count << " history " << history
                                      << " seed " << seed);
      const std::vector<StepReport> reports = Reports(count, seed);
      StepStatistics stats(history);
      for (const StepReport& r : reports) stats.Add(r);
      EXPECT_EQ(stats.steps(), count);
      TrainSummary got;
      stats.FillSummary(&got);
      const TrainSummary want = Reference(reports);
      EXPECT_EQ(got.final_loss, want.final_loss);
      EXPECT_EQ(got.final_eval_loss, want.final_eval_loss);
      EXPECT_EQ(got.peak_model_state_bytes_per_rank, want.peak_model_state_bytes_per_rank);
      EXPECT_EQ(got.comm_bytes_per_rank_per_step, want.comm_bytes_per_rank_per_step);
      // Sums in another order: within rounding.
      EXPECT_NEAR(got.step_breakdown_s.compute, want.step_breakdown_s.compute, 1e-12);
      EXPECT_NEAR(got.step_breakdown_s.dp_comm, want.step_breakdown_s.dp_comm, 1e-12);
      EXPECT_NEAR(got.step_breakdown_s.cp_exposed, want.step_breakdown_s.cp_exposed, 1e-12);
      EXPECT_NEAR(got.host_cpu_busy, want.host_cpu_busy, 1e-12);
      EXPECT_DOUBLE_EQ(got.page_faults_per_step, want.page_faults_per_step);
      const size_t kept = std::min(history, reports.size());
      ASSERT_EQ(got.steps.size(), kept);
      for (size_t k = 0; k < kept; ++k) {
        EXPECT_EQ(got.steps[k].step, reports[reports.size() - kept + k].step);
        EXPECT_EQ(got.steps[k].loss, reports[reports.size() - kept + k].loss);
      }
    }
  }
}

TEST(StepStatisticsTest, NoStepsLeavesTheSummaryAlone) {
  StepStatistics stats(4);
  TrainSummary summary;
  summary.final_loss = 1.5;
  stats.FillSummary(&summary);
  EXPECT_EQ(summary.final_loss, 1.5);
  EXPECT_TRUE(summary.steps.empty());
}

}  // namespace
}  // namespace loom
