#include "pipeline/verifier.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "pipeline/action.h"
#include "pipeline/internal/action_index.h"
#include "pipeline/internal/structure.h"
#include "pipeline/lowering.h"

namespace loom {
namespace {

using pipeline_internal::ActionIndex;
using pipeline_internal::Describe;

absl::Status OrderError(const Schedule& schedule, std::vector<ActionPosition> marks,
                        absl::string_view message) {
  return pipeline_internal::ScheduleError(absl::StatusCode::kInvalidArgument, schedule,
                                          std::move(marks), message);
}

// RequireBefore checks that `needed` (`why` it is needed) is on `here`'s rank at an
// earlier step.
absl::Status RequireBefore(const Schedule& schedule, const ActionIndex& index, ActionPosition here,
                           const Action& needed, absl::string_view why) {
  const std::optional<ActionPosition> at = index.Find(needed);
  if (at.has_value() && at->rank == here.rank && at->step < here.step) return absl::OkStatus();
  const std::string head = absl::StrCat(Describe(schedule, here), " needs ", needed.ToString(),
                                        " before it (", why, ")");
  if (!at.has_value()) {
    return OrderError(schedule, {here}, absl::StrCat(head, "; the schedule has none"));
  }
  return OrderError(schedule, {here, *at},
                    absl::StrCat(head, ", but it comes at ", Describe(schedule, *at)));
}

// CheckLocalOrder checks item 3 of the header for every action of a (lowered)
// schedule, rank by rank.
absl::Status CheckLocalOrder(const Schedule& schedule, const ActionIndex& index) {
  const StageLayout& layout = schedule.layout;
  const int64_t last_stage = layout.num_stages() - 1;
  for (int64_t rank = 0; rank < schedule.num_ranks(); ++rank) {
    const std::vector<Action>& actions = schedule.ranks[rank];
    for (int64_t step = 0; step < static_cast<int64_t>(actions.size()); ++step) {
      const Action& a = actions[step];
      const ActionPosition here{rank, step};
      const int64_t s = a.stage;
      const int64_t mb = a.microbatch;
      switch (a.kind) {
        case ActionKind::kForward:
          if (s > 0) {
            if (layout.RankOf(s - 1) == rank) {
              LOOM_RETURN_IF_ERROR(
                  RequireBefore(schedule, index, here, {ActionKind::kForward, s - 1, mb},
                                absl::StrCat("its input, from stage ", s - 1, " on this rank")));
            } else {
              LOOM_RETURN_IF_ERROR(RequireBefore(schedule, index, here,
                                                 {ActionKind::kRecvForward, s, mb},
                                                 absl::StrCat("its input, from stage ", s - 1,
                                                              " on rank ", layout.RankOf(s - 1))));
            }
          }
          break;
        case ActionKind::kBackward:
        case ActionKind::kBackwardInput:
          LOOM_RETURN_IF_ERROR(
              RequireBefore(schedule, index, here, {ActionKind::kForward, s, mb}, "its forward"));
          if (s < last_stage) {
            if (layout.RankOf(s + 1) == rank) {
              const std::optional<Action> source =
                  pipeline_internal::BackwardInput(index, s + 1, mb);
              LOOM_RETURN_IF_ERROR(RequireBefore(
                  schedule, index, here, *source,
                  absl::StrCat("its output gradient, from stage ", s + 1, " on this rank")));
            } else {
              LOOM_RETURN_IF_ERROR(
                  RequireBefore(schedule, index, here, {ActionKind::kRecvBackward, s, mb},
                                absl::StrCat("its output gradient, from stage ", s + 1, " on rank ",
                                             layout.RankOf(s + 1))));
            }
          }
          break;
        case ActionKind::kBackwardWeight:
          LOOM_RETURN_IF_ERROR(RequireBefore(schedule, index, here,
                                             {ActionKind::kBackwardInput, s, mb},
                                             "the input-gradient half of its backward"));
          break;
        case ActionKind::kSendForward:
          LOOM_RETURN_IF_ERROR(RequireBefore(schedule, index, here, {ActionKind::kForward, s, mb},
                                             "the output it sends"));
          break;
        case ActionKind::kSendBackward:
          LOOM_RETURN_IF_ERROR(RequireBefore(schedule, index, here,
                                             *pipeline_internal::BackwardInput(index, s, mb),
                                             "the input gradient it sends"));
          break;
        case ActionKind::kRecvForward:
        case ActionKind::kRecvBackward:
          break;
      }
    }
  }
  return absl::OkStatus();
}

// CheckDeadlockFree runs the ranks' programs under `semantics` (header, item 4).
absl::Status CheckDeadlockFree(const Schedule& schedule, const ActionIndex& index,
                               P2PSemantics semantics) {
  const int64_t num_ranks = schedule.num_ranks();
  std::vector<int64_t> next(num_ranks, 0);  // next[r]: the step rank r runs next.
  const auto done = [&](int64_t rank) {
    return next[rank] == static_cast<int64_t>(schedule.ranks[rank].size());
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int64_t rank = 0; rank < num_ranks; ++rank) {
      while (!done(rank)) {
        const Action& a = schedule.ranks[rank][next[rank]];
        if (IsCompute(a.kind)) {
          // Its inputs were checked to come earlier on this rank.
          ++next[rank];
          progress = true;
          continue;
        }
        const ActionPosition peer = *index.Find(*MatchingAction(a));
        if (semantics == P2PSemantics::kBuffered) {
          // A send runs at once; a receive once its send has run.
          if (IsRecv(a.kind) && next[peer.rank] <= peer.step) break;
          ++next[rank];
          progress = true;
          continue;
        }
        // Rendezvous: both ends must be the next action of their ranks.
        if (next[peer.rank] != peer.step) break;
        ++next[rank];
        ++next[peer.rank];
        progress = true;
      }
    }
  }
  std::vector<ActionPosition> stuck;
  std::vector<std::string> waits;
  for (int64_t rank = 0; rank < num_ranks; ++rank) {
    if (done(rank)) continue;
    const ActionPosition here{rank, next[rank]};
    const Action& a = schedule.ranks[rank][next[rank]];
    const ActionPosition peer = *index.Find(*MatchingAction(a));
    stuck.push_back(here);
    waits.push_back(absl::StrCat("rank ", rank, " waits at ", Describe(schedule, here), " for ",
                                 Describe(schedule, peer)));
  }
  if (stuck.empty()) return absl::OkStatus();
  const std::string rule = semantics == P2PSemantics::kBuffered
                               ? "a receive waits for its send"
                               : "a send and its receive complete together";
  return pipeline_internal::ScheduleError(
      absl::StatusCode::kFailedPrecondition, schedule, stuck,
      absl::StrCat("deadlock under ", P2PSemanticsName(semantics), " semantics (", rule,
                   "): no rank can progress; ", absl::StrJoin(waits, "; ")));
}

}  // namespace

absl::string_view P2PSemanticsName(P2PSemantics semantics) {
  switch (semantics) {
    case P2PSemantics::kBuffered:
      return "buffered";
    case P2PSemantics::kRendezvous:
      return "rendezvous";
  }
  return "?";
}

absl::Status Verify(const Schedule& schedule, const VerifyOptions& options) {
  LOOM_ASSIGN_OR_RETURN(ActionIndex index, pipeline_internal::IndexSchedule(schedule));
  LOOM_RETURN_IF_ERROR(pipeline_internal::CheckComplete(schedule, index));
  const Schedule* program = &schedule;
  Schedule lowered;
  if (!schedule.HasCommunication()) {
    LOOM_ASSIGN_OR_RETURN(lowered, Lower(schedule));
    LOOM_ASSIGN_OR_RETURN(index, pipeline_internal::IndexSchedule(lowered));
    program = &lowered;
  }
  LOOM_RETURN_IF_ERROR(CheckLocalOrder(*program, index));
  if (options.check_buffered) {
    LOOM_RETURN_IF_ERROR(CheckDeadlockFree(*program, index, P2PSemantics::kBuffered));
  }
  if (options.check_rendezvous) {
    LOOM_RETURN_IF_ERROR(CheckDeadlockFree(*program, index, P2PSemantics::kRendezvous));
  }
  return absl::OkStatus();
}

}  // namespace loom
