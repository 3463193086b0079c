#include "tools/planner/search.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "topology/memory_estimate.h"

namespace loom {
namespace planner {
namespace {

std::vector<int64_t> Divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

template <typename T>
bool Allowed(const std::optional<T>& fixed, T value) {
  return !fixed.has_value() || *fixed == value;
}

// The (schedule, virtual stages) pairs worth trying on `pp` ranks: one schedule
// without a pipeline (they coincide there).
std::vector<std::pair<PipelineScheduleKind, int64_t>> Schedules(const PlanRequest& r,
                                                                int64_t pp) {
  std::vector<std::pair<PipelineScheduleKind, int64_t>> out;
  if (pp == 1) {
    const PipelineScheduleKind kind = r.fixed.schedule.value_or(PipelineScheduleKind::k1F1B);
    if (kind != PipelineScheduleKind::kInterleaved1F1B &&
        kind != PipelineScheduleKind::kZeroBubbleV) {
      out.push_back({kind, 1});
    }
    return out;
  }
  for (PipelineScheduleKind kind :
       {PipelineScheduleKind::kGPipe, PipelineScheduleKind::k1F1B,
        PipelineScheduleKind::kInterleaved1F1B, PipelineScheduleKind::kZeroBubbleH1,
        PipelineScheduleKind::kZeroBubbleV}) {
    if (!Allowed(r.fixed.schedule, kind)) continue;
    if (r.fixed.virtual_stages.has_value()) {
      // As given: a count the schedule cannot run is refused by name.
      if (r.fixed.schedule.has_value() || kind == PipelineScheduleKind::kInterleaved1F1B ||
          *r.fixed.virtual_stages == (kind == PipelineScheduleKind::kZeroBubbleV ? 2 : 1)) {
        out.push_back({kind, *r.fixed.virtual_stages});
      }
    } else if (kind == PipelineScheduleKind::kInterleaved1F1B) {
      for (int64_t v = 2; v <= r.max_virtual_stages; ++v) out.push_back({kind, v});
    } else {
      out.push_back({kind, kind == PipelineScheduleKind::kZeroBubbleV ? 2 : 1});
    }
  }
  return out;
}

std::vector<int64_t> MicrobatchSizes(const PlanRequest& r, int64_t dp) {
  if (r.fixed.microbatch_size.has_value()) return {*r.fixed.microbatch_size};
  std::vector<int64_t> out;
  for (int64_t b = 1; b <= r.max_microbatch_size && b <= r.global_batch / dp; b *= 2) {
    out.push_back(b);
  }
  return out;
}

std::vector<Recompute> Recomputes(const PlanRequest& r) {
  if (r.fixed.recompute.has_value()) return {*r.fixed.recompute};
  // Without stored scores selective recompute is no recompute.
  if (r.device.fused_attention || r.device.flash_attention) return {Recompute::kNone, Recompute::kFull};
  return {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
}

absl::Status CheckRequest(const PlanRequest& r) {
  LOOM_RETURN_IF_ERROR(ValidateShape(r.shape));
  if (r.world < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the cluster has ", r.world, " devices; it needs at least 1"));
  }
  if (r.global_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("global batch ", r.global_batch, " must be at least 1 sequence"));
  }
  if (r.gpus_per_node < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpus_per_node ", r.gpus_per_node, " must be at least 1"));
  }
  if (r.keep < 1) return absl::InvalidArgumentError(absl::StrCat("keep ", r.keep, " must be at least 1"));
  const std::pair<const char*, std::optional<int64_t>> degrees[] = {
      {"dp", r.fixed.dp}, {"tp", r.fixed.tp}, {"pp", r.fixed.pp}, {"cp", r.fixed.cp}};
  for (const auto& [name, value] : degrees) {
    if (value.has_value() && (*value < 1 || r.world % *value != 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "=", *value, " does not divide the ", r.world, " devices"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PlanResult> Plan(const PlanRequest& r) {
  LOOM_RETURN_IF_ERROR(CheckRequest(r));
  PlanResult result;
  std::optional<absl::Status> first_error;
  // Valid candidates that fit, with their lower bounds.
  std::vector<std::pair<double, Candidate>> fitting;
  for (int64_t tp : Divisors(r.world)) {
    if (!Allowed(r.fixed.tp, tp)) continue;
    for (int64_t cp : Divisors(r.world / tp)) {
      if (!Allowed(r.fixed.cp, cp)) continue;
      for (int64_t pp : Divisors(r.world / (tp * cp))) {
        const int64_t dp = r.world / (tp * cp * pp);
        if (!Allowed(r.fixed.pp, pp) || !Allowed(r.fixed.dp, dp)) continue;
        for (int zero = 0; zero <= 3; ++zero) {
          if (!Allowed(r.fixed.zero, zero)) continue;
          // Without data parallelism every stage is stage 0.
          if (dp == 1 && zero > 0 && !r.fixed.zero.has_value()) continue;
          for (const auto& [schedule, v] : Schedules(r, pp)) {
            for (int64_t mbs : MicrobatchSizes(r, dp)) {
              for (Recompute recompute : Recomputes(r)) {
                StepInput in;
                in.shape = r.shape;
                in.global_batch = r.global_batch;
                in.device = r.device;
                in.gpus_per_node = r.gpus_per_node;
                in.even_layers_only = r.even_layers_only;
                in.microbatches_at_least_pp = r.microbatches_at_least_pp;
                in.config = {dp, tp, pp, cp, zero, schedule, v, mbs, recompute, r.dtype};
                if (absl::Status s = ValidateStepInput(in); !s.ok()) {
                  if (!first_error.has_value()) first_error = s;
                  continue;
                }
                absl::StatusOr<MemoryEstimate> memory = MemoryPerDevice(in);
                if (!memory.ok()) {
                  if (!first_error.has_value()) first_error = memory.status();
                  continue;
                }
                ++result.enumerated;
                Candidate candidate{in.config, *memory, {}};
                if (!memory->Fits(r.device)) {
                  ++result.too_large;
                  if (!result.smallest.has_value() ||
                      memory->total() < result.smallest->memory.total()) {
                    result.smallest = candidate;
                  }
                  continue;
                }
                LOOM_ASSIGN_OR_RETURN(const double bound, StepLowerBound(in));
                fitting.push_back({bound, std::move(candidate)});
              }
            }
          }
        }
      }
    }
  }
  if (result.enumerated == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no configuration of ", r.world, " devices runs this model and batch",
        first_error.has_value() ? absl::StrCat(": ", first_error->message(), ", and so on")
                                : std::string(" with the fixed choices")));
  }
  if (fitting.empty()) {
    const Candidate& s = *result.smallest;
    return absl::InvalidArgumentError(absl::StrCat(
        "the model fits nowhere on ", r.world, " x ", r.device.name,
        ": the smallest configuration (", s.config.ToString(), ") needs ",
        FormatBytes(static_cast<int64_t>(s.memory.total())), " of ",
        FormatBytes(static_cast<int64_t>(r.device.memory_bytes))));
  }
  // Simulate in order of the bound until the bound passes the keep-th best.
  std::stable_sort(fitting.begin(), fitting.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [bound, candidate] : fitting) {
    if (static_cast<int64_t>(result.ranked.size()) >= r.keep &&
        bound >= result.ranked.back().prediction.step_seconds) {
      break;
    }
    StepInput in;
    in.shape = r.shape;
    in.global_batch = r.global_batch;
    in.device = r.device;
    in.gpus_per_node = r.gpus_per_node;
    in.even_layers_only = r.even_layers_only;
    in.microbatches_at_least_pp = r.microbatches_at_least_pp;
    in.config = candidate.config;
    LOOM_ASSIGN_OR_RETURN(candidate.prediction, PredictStep(in));
    ++result.simulated;
    // Equal steps (ZeRO 1 and 2 often tie): the one needing less memory first.
    auto at = std::upper_bound(result.ranked.begin(), result.ranked.end(), candidate,
                               [](const Candidate& a, const Candidate& b) {
                                 if (a.prediction.step_seconds != b.prediction.step_seconds) {
                                   return a.prediction.step_seconds < b.prediction.step_seconds;
                                 }
                                 return a.memory.total() < b.memory.total();
                               });
    result.ranked.insert(at, std::move(candidate));
    if (static_cast<int64_t>(result.ranked.size()) > r.keep) result.ranked.pop_back();
  }
  return result;
}

}  // namespace planner
}  // namespace loom
