// bubble_table: simulates each generated schedule on a few pipelines and prints, as
// a Markdown table, the simulated bubble ratio next to the textbook formula and the
// peak activations of the first and last rank. The README's table is its output:
//
//   ./bazelw run //pipeline:bubble_table

#include <cstdint>
#include <cstdio>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "pipeline/generators.h"
#include "pipeline/simulator.h"

namespace loom {
namespace {

struct Row {
  std::string schedule;
  int64_t p = 1;
  int64_t m = 1;
  int64_t v = 1;
  std::string costs;  // As printed.
  StageCosts stage_costs;
  std::string formula;  // As printed.
  double formula_value = 0;
};

double Ratio(int64_t numerator, int64_t denominator) {
  return static_cast<double>(numerator) / static_cast<double>(denominator);
}

std::vector<Row> Rows() {
  const StageCosts equal = {1, 1, 1, 1};  // t_F = t_B
  const StageCosts split = {1, 2, 1, 1};  // t_F = t_I = t_W, t_B = 2 t_F
  std::vector<Row> rows;
  for (const auto& [p, m] : std::vector<std::pair<int64_t, int64_t>>{{4, 8}, {8, 32}}) {
    rows.push_back({"gpipe", p, m, 1, "F=B=1", equal, "(p-1)/(m+p-1)", Ratio(p - 1, m + p - 1)});
  }
  for (const auto& [p, m] : std::vector<std::pair<int64_t, int64_t>>{{4, 8}, {8, 32}}) {
    rows.push_back({"1f1b", p, m, 1, "F=B=1", equal, "(p-1)/(m+p-1)", Ratio(p - 1, m + p - 1)});
    rows.push_back({"1f1b", p, m, 1, "F=1 B=2", split, "(p-1)/(m+p-1)", Ratio(p - 1, m + p - 1)});
  }
  for (const auto& [p, m, v] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {4, 8, 2}, {4, 8, 4}, {8, 32, 2}, {8, 32, 4}}) {
    rows.push_back({"interleaved-1f1b", p, m, v, "F=B=1 per chunk", equal, "(p-1)/(v*m+p-1)",
                    Ratio(p - 1, v * m + p - 1)});
  }
  for (const auto& [p, m] : std::vector<std::pair<int64_t, int64_t>>{{4, 8}, {8, 32}}) {
    rows.push_back(
        {"zb-h1", p, m, 1, "F=I=W=1", split, "(p-1)/(3m+p-1)", Ratio(p - 1, 3 * m + p - 1)});
  }
  for (const auto& [p, m] : std::vector<std::pair<int64_t, int64_t>>{{4, 8}, {8, 32}}) {
    rows.push_back({"zb-v", p, m, 2, "F=I=W=1 per chunk", split, "(p-1)/(6m+p-1)",
                    Ratio(p - 1, 6 * m + p - 1)});
  }
  return rows;
}

int Main() {
  std::printf(
      "| schedule | p | m | v | costs | simulated bubble | formula | formula value | "
      "peak activations (rank 0 / rank p-1) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& row : Rows()) {
    PipelineScheduleKind kind = PipelineScheduleKind::kGPipe;
    if (row.schedule == "1f1b") kind = PipelineScheduleKind::k1F1B;
    if (row.schedule == "interleaved-1f1b") kind = PipelineScheduleKind::kInterleaved1F1B;
    if (row.schedule == "zb-h1") kind = PipelineScheduleKind::kZeroBubbleH1;
    if (row.schedule == "zb-v") kind = PipelineScheduleKind::kZeroBubbleV;
    const absl::StatusOr<Schedule> schedule = MakeSchedule(kind, row.p, row.m, row.v);
    SimulationCosts costs;
    costs.uniform = row.stage_costs;
    const absl::StatusOr<SimulationResult> run =
        schedule.ok() ? Simulate(*schedule, costs)
                      : absl::StatusOr<SimulationResult>(schedule.status());
    if (!run.ok()) {
      std::fprintf(stderr, "%s p=%d m=%d v=%d: %s\n", row.schedule.c_str(), static_cast<int>(row.p),
                   static_cast<int>(row.m), static_cast<int>(row.v),
                   run.status().ToString().c_str());
      return 1;
    }
    const RankTimeline& first = run->ranks.front();
    const RankTimeline& last = run->ranks.back();
    std::string peaks = absl::StrCat(first.peak_activations, " / ", last.peak_activations);
    if (first.peak_activations_before_input_grad != first.peak_activations ||
        last.peak_activations_before_input_grad != last.peak_activations) {
      absl::StrAppend(&peaks, " (F..I: ", first.peak_activations_before_input_grad, " / ",
                      last.peak_activations_before_input_grad, ")");
    }
    std::printf("%s\n", absl::StrFormat("| %s | %d | %d | %d | %s | %.4f | %s | %.4f | %s |",
                                        row.schedule, row.p, row.m, row.v, row.costs,
                                        run->bubble_ratio, row.formula, row.formula_value, peaks)
                            .c_str());
  }
  return 0;
}

}  // namespace
}  // namespace loom

int main() { return loom::Main(); }
