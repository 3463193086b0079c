#include "pipeline/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "pipeline/internal/action_index.h"
#include "pipeline/internal/structure.h"
#include "pipeline/lowering.h"
#include "pipeline/verifier.h"

namespace loom {
namespace {

absl::Status CheckCost(absl::string_view what, double value) {
  if (!std::isfinite(value) || value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "=", value, " must be a finite, non-negative time"));
  }
  return absl::OkStatus();
}

absl::Status CheckStageCosts(absl::string_view what, const StageCosts& costs) {
  LOOM_RETURN_IF_ERROR(CheckCost(absl::StrCat(what, ".forward"), costs.forward));
  LOOM_RETURN_IF_ERROR(CheckCost(absl::StrCat(what, ".backward"), costs.backward));
  LOOM_RETURN_IF_ERROR(CheckCost(absl::StrCat(what, ".backward_input"), costs.backward_input));
  LOOM_RETURN_IF_ERROR(CheckCost(absl::StrCat(what, ".backward_weight"), costs.backward_weight));
  return absl::OkStatus();
}

double ComputeCost(const StageCosts& costs, ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return costs.forward;
    case ActionKind::kBackward:
      return costs.backward;
    case ActionKind::kBackwardInput:
      return costs.backward_input;
    case ActionKind::kBackwardWeight:
      return costs.backward_weight;
    default:
      return 0;
  }
}

// InputMessage returns the receive that brings `compute` its input from another
// rank (RECV_F for F, RECV_B for B and I), or nullopt when the input is local.
std::optional<Action> InputMessage(const StageLayout& layout, const Action& compute) {
  Action recv{ActionKind::kRecvForward, compute.stage, compute.microbatch};
  if (compute.kind == ActionKind::kBackward || compute.kind == ActionKind::kBackwardInput) {
    recv.kind = ActionKind::kRecvBackward;
  } else if (compute.kind != ActionKind::kForward) {
    return std::nullopt;
  }
  if (!pipeline_internal::IsNeededMessage(layout, recv)) return std::nullopt;
  return recv;
}

// CountActivations fills the two peaks of `timeline` from its program order.
void CountActivations(RankTimeline& timeline) {
  int64_t held = 0;
  int64_t before_input_grad = 0;
  for (const TimedAction& timed : timeline.actions) {
    switch (timed.action.kind) {
      case ActionKind::kForward:
        ++held;
        ++before_input_grad;
        break;
      case ActionKind::kBackward:
        --held;
        --before_input_grad;
        break;
      case ActionKind::kBackwardInput:
        --before_input_grad;
        break;
      case ActionKind::kBackwardWeight:
        --held;
        break;
      default:
        break;
    }
    timeline.peak_activations = std::max(timeline.peak_activations, held);
    timeline.peak_activations_before_input_grad =
        std::max(timeline.peak_activations_before_input_grad, before_input_grad);
  }
}

}  // namespace

absl::StatusOr<SimulationCosts> SimulationCosts::ScaledByLayers(const StageLayout& layout,
                                                                const StageCosts& per_layer,
                                                                double p2p_latency) {
  if (!layout.has_layers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ScaledByLayers needs a layout with layers (WithLayers / WithEvenLayers); ",
                     layout.ToString(), " has none"));
  }
  SimulationCosts costs;
  costs.p2p_latency = p2p_latency;
  for (const int64_t layers : layout.layers_per_stage()) {
    const double n = static_cast<double>(layers);
    costs.per_stage.push_back({per_layer.forward * n, per_layer.backward * n,
                               per_layer.backward_input * n, per_layer.backward_weight * n});
  }
  return costs;
}

std::string SimulationResult::Summary() const {
  std::string text;
  for (size_t rank = 0; rank < ranks.size(); ++rank) {
    const RankTimeline& r = ranks[rank];
    absl::StrAppendFormat(&text, "rank %d: busy %g idle %g bubble %.1f%% peak activations %d", rank,
                          r.busy, r.idle, 100 * r.bubble_ratio, r.peak_activations);
    if (r.peak_activations_before_input_grad != r.peak_activations) {
      absl::StrAppendFormat(&text, " (%d before input grad)", r.peak_activations_before_input_grad);
    }
    text += "\n";
  }
  absl::StrAppendFormat(&text, "makespan %g, bubble %.1f%%\n", makespan, 100 * bubble_ratio);
  return text;
}

absl::StatusOr<SimulationResult> Simulate(const Schedule& schedule, const SimulationCosts& costs) {
  LOOM_RETURN_IF_ERROR(CheckStageCosts("uniform", costs.uniform));
  if (!costs.per_stage.empty()) {
    if (static_cast<int64_t>(costs.per_stage.size()) != schedule.layout.num_stages()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "per_stage has ", costs.per_stage.size(), " entries, the layout ",
          schedule.layout.ToString(), " has ", schedule.layout.num_stages(), " stages"));
    }
    for (size_t s = 0; s < costs.per_stage.size(); ++s) {
      LOOM_RETURN_IF_ERROR(CheckStageCosts(absl::StrCat("per_stage[", s, "]"), costs.per_stage[s]));
    }
  }
  LOOM_RETURN_IF_ERROR(CheckCost("p2p_latency", costs.p2p_latency));
  VerifyOptions buffered_only;
  buffered_only.check_rendezvous = false;
  LOOM_RETURN_IF_ERROR(Verify(schedule, buffered_only));

  Schedule lowered;
  const Schedule* program = &schedule;
  if (!schedule.HasCommunication()) {
    LOOM_ASSIGN_OR_RETURN(lowered, Lower(schedule));
    program = &lowered;
  }
  LOOM_ASSIGN_OR_RETURN(const pipeline_internal::ActionIndex index,
                        pipeline_internal::IndexSchedule(*program));

  const int64_t num_ranks = program->num_ranks();
  SimulationResult result;
  result.ranks.resize(num_ranks);
  std::vector<int64_t> next(num_ranks, 0);
  std::vector<double> clock(num_ranks, 0);
  bool progress = true;
  while (progress) {
    progress = false;
    for (int64_t rank = 0; rank < num_ranks; ++rank) {
      const std::vector<Action>& actions = program->ranks[rank];
      RankTimeline& timeline = result.ranks[rank];
      while (next[rank] < static_cast<int64_t>(actions.size())) {
        const Action& a = actions[next[rank]];
        double start = clock[rank];
        double end = start;
        if (IsCompute(a.kind)) {
          // A compute whose input comes from another rank waits for the message:
          // its send's time plus the latency.
          const std::optional<Action> input = InputMessage(program->layout, a);
          if (input.has_value()) {
            const ActionPosition send = *index.Find(*MatchingAction(*input));
            if (next[send.rank] <= send.step) break;  // Not sent yet: come back later.
            start =
                std::max(start, result.ranks[send.rank].actions[send.step].end + costs.p2p_latency);
          }
          const double cost = ComputeCost(costs.ForStage(a.stage), a.kind);
          end = start + cost;
          timeline.busy += cost;
        }
        timeline.actions.push_back({a, start, end});
        clock[rank] = end;
        ++next[rank];
        progress = true;
      }
    }
  }
  for (int64_t rank = 0; rank < num_ranks; ++rank) {
    if (next[rank] != static_cast<int64_t>(program->ranks[rank].size())) {
      // Verify passed, so this is a bug here, not in the schedule.
      return absl::InternalError(absl::StrCat(
          "simulation of \"", schedule.name, "\" stalled on rank ", rank, " at step ", next[rank]));
    }
    result.makespan = std::max(result.makespan, clock[rank]);
  }
  double total_idle = 0;
  for (RankTimeline& timeline : result.ranks) {
    timeline.idle = result.makespan - timeline.busy;
    timeline.bubble_ratio = result.makespan > 0 ? timeline.idle / result.makespan : 0;
    total_idle += timeline.idle;
    CountActivations(timeline);
  }
  result.bubble_ratio =
      result.makespan > 0 ? total_idle / (static_cast<double>(num_ranks) * result.makespan) : 0;
  return result;
}

absl::Status CheckSimulationOf(const Schedule& schedule, const SimulationResult& result) {
  if (static_cast<int64_t>(result.ranks.size()) != schedule.num_ranks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the simulation has ", result.ranks.size(), " ranks, the schedule \"",
                     schedule.name, "\" has ", schedule.num_ranks()));
  }
  return absl::OkStatus();
}

}  // namespace loom
