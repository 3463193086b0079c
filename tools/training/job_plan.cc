#include "tools/training/job_plan.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "tools/planner/search.h"
#include "tools/training/validate.h"

namespace loom {

absl::StatusOr<PlannedJob> PlanTrainJob(const TrainJobOptions& base, int64_t world,
                                        int64_t global_batch,
                                        const std::vector<planner::JobRun>& calibrations) {
  if (world < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--plan ", world, ": the job needs at least 1 rank"));
  }
  planner::PlanRequest req;
  req.shape.layers = base.model.layers;
  req.shape.hidden = base.model.hidden;
  req.shape.heads = base.model.heads;
  req.shape.seq_len = base.model.seq_len;
  req.shape.vocab = base.model.vocab;
  req.shape.ffn = base.model.ffn_size();
  req.shape.tied_embeddings = false;  // GptModel's head is a matrix of its own
  req.global_batch = global_batch;
  req.world = world;
  req.gpus_per_node = world;
  req.dtype = base.dtype == DType::kBF16 ? planner::ComputeDtype::kBf16 : planner::ComputeDtype::kF32;
  // The job's interleaved schedule runs two stages per rank.
  req.max_virtual_stages = 2;
  // The job balances uneven layers over its stages, but runs no schedule with
  // fewer microbatches than stages.
  req.microbatches_at_least_pp = true;
  req.keep = 20;
  LOOM_ASSIGN_OR_RETURN(const planner::FittedCpu fit,
                        planner::MeasureAndFit(world, base.threads_per_rank, calibrations));
  req.device = fit.cpu.device;
  const std::string fitted =
      fit.fitted ? absl::StrCat("constants fitted to ", fit.runs_fitted, " calibration run",
                                fit.runs_fitted == 1 ? "" : "s")
                 : std::string("the default constants");
  LOOM_ASSIGN_OR_RETURN(const planner::PlanResult plan, planner::Plan(req));
  absl::Status first_refusal = absl::OkStatus();
  for (const planner::Candidate& c : plan.ranked) {
    TrainJobOptions o = base;
    o.dp = static_cast<int>(c.config.dp);
    o.tp = static_cast<int>(c.config.tp);
    o.pp = static_cast<int>(c.config.pp);
    o.cp = static_cast<int>(c.config.cp);
    o.zero = c.config.zero;
    o.schedule = c.config.schedule;
    o.micro_batch = c.config.microbatch_size;
    o.microbatches = c.prediction.microbatches;
    o.recompute = c.config.recompute;
    if (absl::Status s = ValidateTrainJob(o); !s.ok()) {
      if (first_refusal.ok()) first_refusal = s;
      continue;
    }
    PlannedJob job;
    job.options = o;
    job.line = absl::StrFormat(
        "plan: dp=%d tp=%d pp=%d cp=%d zero=%d %s microbatches=%d micro_batch=%d recompute=%s, "
        "ranked %s of %d configurations for %d ranks of this CPU by tools/planner with %s "
        "(predicted %.3g s a step, %.0f tokens/s)",
        o.dp, o.tp, o.pp, o.cp, o.zero, PipelineScheduleName(o.schedule), o.microbatches,
        o.micro_batch, o.recompute == Recompute::kFull ? "full" : "none",
        &c == &plan.ranked.front() ? "first" : "highest of those the job can run",
        plan.enumerated - plan.too_large, world, fitted, c.prediction.step_seconds,
        c.prediction.tokens_per_second);
    return job;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--plan ", world, ": none of the planner's ", plan.ranked.size(),
      " best configurations is one the job runs; the first refused: ", first_refusal.message()));
}

}  // namespace loom
