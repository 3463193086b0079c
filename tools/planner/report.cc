#include "tools/planner/report.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "topology/memory_estimate.h"
#include "topology/recompute.h"

namespace loom {
namespace planner {
namespace {

std::string ScheduleText(const PlanConfig& c) {
  std::string name(PipelineScheduleName(c.schedule));
  if (c.schedule == PipelineScheduleKind::kInterleaved1F1B) {
    absl::StrAppend(&name, "(v=", c.virtual_stages, ")");
  }
  return name;
}

}  // namespace

std::string RankedTable(const PlanResult& plan, int64_t rows) {
  std::string out = absl::StrFormat(
      "%4s %5s %4s %4s %3s %4s %-22s %4s %5s %-9s %11s %10s %11s %11s %6s\n", "rank", "dp", "tp",
      "pp", "cp", "zero", "schedule", "mbs", "m", "recompute", "memory/dev", "step s", "tokens/s",
      "TFLOP/s/dev", "MFU");
  for (int64_t i = 0; i < rows && i < static_cast<int64_t>(plan.ranked.size()); ++i) {
    const Candidate& c = plan.ranked[static_cast<size_t>(i)];
    const PlanConfig& k = c.config;
    absl::StrAppendFormat(&out, "%4d %5d %4d %4d %3d %4d %-22s %4d %5d %-9s %11s %10.4g %11.4g %11.4g %6.3f\n",
                          i + 1, k.dp, k.tp, k.pp, k.cp, k.zero, ScheduleText(k),
                          k.microbatch_size, c.prediction.microbatches, RecomputeName(k.recompute),
                          FormatBytes(static_cast<int64_t>(c.memory.total())),
                          c.prediction.step_seconds, c.prediction.tokens_per_second,
                          c.prediction.tflops_per_device, c.prediction.mfu);
  }
  absl::StrAppend(&out, plan.enumerated, " configurations: ", plan.too_large,
                  " do not fit in memory");
  if (plan.smallest.has_value()) {
    absl::StrAppend(&out, " (the least of them needs ",
                    FormatBytes(static_cast<int64_t>(plan.smallest->memory.total())), ": ",
                    plan.smallest->config.ToString(), ")");
  }
  absl::StrAppend(&out, ", ", plan.simulated, " simulated\n");
  return out;
}

std::string Explain(const PlanResult& plan) {
  std::string out;
  for (size_t i = 0; i < 2 && i < plan.ranked.size(); ++i) {
    const Candidate& c = plan.ranked[i];
    absl::StrAppend(&out, i == 0 ? "best: " : "runner-up: ", c.config.ToString(), "\n",
                    "  memory per device ", c.memory.ToString(), "\n", c.prediction.Breakdown());
  }
  if (plan.ranked.size() >= 2) {
    const StepPrediction& a = plan.ranked[0].prediction;
    const StepPrediction& b = plan.ranked[1].prediction;
    absl::StrAppendFormat(&out,
                          "the best is %.1f%% faster: pipeline %+.4g s, exposed dp %+.4g s, "
                          "optimizer %+.4g s against the runner-up\n",
                          100 * (b.step_seconds / a.step_seconds - 1),
                          a.pipeline_seconds - b.pipeline_seconds,
                          a.dp_exposed_seconds - b.dp_exposed_seconds,
                          a.optimizer_seconds - b.optimizer_seconds);
  }
  return out;
}

std::string RankedJson(const PlanResult& plan) {
  std::string out = "[";
  for (size_t i = 0; i < plan.ranked.size(); ++i) {
    const Candidate& c = plan.ranked[i];
    const PlanConfig& k = c.config;
    absl::StrAppendFormat(
        &out,
        "%s\n  {\"dp\": %d, \"tp\": %d, \"pp\": %d, \"cp\": %d, \"zero\": %d, \"schedule\": \"%s\", "
        "\"virtual_stages\": %d, \"microbatch_size\": %d, \"microbatches\": %d, "
        "\"recompute\": \"%s\", \"dtype\": \"%s\", \"memory_bytes_per_device\": %.0f, "
        "\"step_seconds\": %.6g, \"tokens_per_second\": %.6g, \"tflops_per_device\": %.6g, "
        "\"mfu\": %.6g}",
        i == 0 ? "" : ",", k.dp, k.tp, k.pp, k.cp, k.zero, PipelineScheduleName(k.schedule),
        k.virtual_stages, k.microbatch_size, c.prediction.microbatches, RecomputeName(k.recompute),
        k.dtype == ComputeDtype::kBf16 ? "bf16" : "f32", c.memory.total(),
        c.prediction.step_seconds, c.prediction.tokens_per_second, c.prediction.tflops_per_device,
        c.prediction.mfu);
  }
  absl::StrAppend(&out, "\n]\n");
  return out;
}

}  // namespace planner
}  // namespace loom
