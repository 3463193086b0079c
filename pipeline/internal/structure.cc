#include "pipeline/internal/structure.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "pipeline/action.h"
#include "pipeline/internal/action_index.h"

namespace loom {
namespace pipeline_internal {
namespace {

absl::Status Invalid(const Schedule& schedule, std::vector<ActionPosition> marks,
                     absl::string_view message) {
  return ScheduleError(absl::StatusCode::kInvalidArgument, schedule, std::move(marks), message);
}

// UnneededMessageReason says why `message`, which IsNeededMessage rejected, has no
// place in the schedule.
std::string UnneededMessageReason(const StageLayout& layout, const Action& message) {
  const Action peer = *MatchingAction(message);
  if (peer.stage < 0 || peer.stage >= layout.num_stages()) {
    switch (message.kind) {
      case ActionKind::kSendForward:
        return "the last stage sends no forward output";
      case ActionKind::kRecvForward:
        return "the first stage receives no forward input";
      case ActionKind::kSendBackward:
        return "the first stage sends no input gradient";
      default:
        return "the last stage receives no output gradient";
    }
  }
  return absl::StrCat("its peer stage ", peer.stage, " is on the same rank ",
                      layout.RankOf(message.stage), ", no message is needed");
}

}  // namespace

absl::Status ScheduleError(absl::StatusCode code, const Schedule& schedule,
                           std::vector<ActionPosition> marks, absl::string_view message) {
  GridOptions options;
  options.marks = std::move(marks);
  options.max_columns = kErrorGridColumns;
  return absl::Status(code, absl::StrCat(message, "\n", FormatGrid(schedule, options)));
}

std::string Describe(const Schedule& schedule, ActionPosition position) {
  return absl::StrCat("rank ", position.rank, " step ", position.step, " (",
                      schedule.ranks[position.rank][position.step].ToString(), ")");
}

absl::StatusOr<ActionIndex> IndexSchedule(const Schedule& schedule) {
  const StageLayout& layout = schedule.layout;
  if (schedule.num_ranks() != layout.num_ranks()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "schedule \"", schedule.name, "\" has ", schedule.num_ranks(), " rank rows, its layout ",
        layout.ToString(), " has ", layout.num_ranks(), " ranks"));
  }
  const int64_t m = schedule.num_microbatches;
  if (m < 1 || m > kMaxStageMicrobatches / layout.num_stages()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "schedule \"", schedule.name, "\" has num_microbatches=", m, " with ", layout.num_stages(),
        " stages; it needs 1 to ", kMaxStageMicrobatches / layout.num_stages(), " microbatches"));
  }
  ActionIndex index(layout.num_stages(), m);
  for (int64_t rank = 0; rank < schedule.num_ranks(); ++rank) {
    const std::vector<Action>& actions = schedule.ranks[rank];
    for (int64_t step = 0; step < static_cast<int64_t>(actions.size()); ++step) {
      const Action& action = actions[step];
      const ActionPosition here{rank, step};
      const std::string where =
          absl::StrCat("rank ", rank, " step ", step, ": ", action.ToString());
      if (action.stage < 0 || action.stage >= layout.num_stages()) {
        return Invalid(schedule, {here},
                       absl::StrCat(where, " names stage ", action.stage, "; ", layout.ToString(),
                                    " has stages 0-", layout.num_stages() - 1));
      }
      if (action.microbatch < 0 || action.microbatch >= m) {
        return Invalid(schedule, {here},
                       absl::StrCat(where, " names microbatch ", action.microbatch,
                                    "; the schedule has ", m, " (0-", m - 1, ")"));
      }
      const int64_t owner = layout.RankOf(action.stage);
      if (owner != rank) {
        return Invalid(schedule, {here},
                       absl::StrCat(where, " is on rank ", rank, ", but stage ", action.stage,
                                    " lives on rank ", owner, " (", layout.ToString(), ")"));
      }
      if (IsCommunication(action.kind) && !IsNeededMessage(layout, action)) {
        return Invalid(schedule, {here},
                       absl::StrCat(where, " is not a valid message: ",
                                    UnneededMessageReason(layout, action)));
      }
      if (const std::optional<ActionPosition> first = index.Add(action, here)) {
        return Invalid(schedule, {*first, here},
                       absl::StrCat(where, " appears a second time (first at ",
                                    Describe(schedule, *first), ")"));
      }
    }
  }
  return index;
}

absl::Status CheckComplete(const Schedule& schedule, const ActionIndex& index) {
  const StageLayout& layout = schedule.layout;
  const bool lowered = schedule.HasCommunication();
  // Without any B, I or W the schedule is forward-only (an evaluation); with one,
  // every (stage, microbatch) needs its backward.
  const bool forward_only = !schedule.HasBackward();
  for (int64_t s = 0; s < layout.num_stages(); ++s) {
    const int64_t rank = layout.RankOf(s);
    for (int64_t mb = 0; mb < schedule.num_microbatches; ++mb) {
      const Action forward{ActionKind::kForward, s, mb};
      const Action full{ActionKind::kBackward, s, mb};
      const Action input{ActionKind::kBackwardInput, s, mb};
      const Action weight{ActionKind::kBackwardWeight, s, mb};
      const std::optional<ActionPosition> at_full = index.Find(full);
      const std::optional<ActionPosition> at_input = index.Find(input);
      const std::optional<ActionPosition> at_weight = index.Find(weight);
      const std::string what = absl::StrCat("stage ", s, " microbatch ", mb);
      if (!index.Find(forward).has_value()) {
        return Invalid(schedule, {},
                       absl::StrCat(what, " has no forward: ", forward.ToString(),
                                    " is missing on rank ", rank));
      }
      if (at_full.has_value() && (at_input.has_value() || at_weight.has_value())) {
        const ActionPosition split = at_input.has_value() ? *at_input : *at_weight;
        return Invalid(
            schedule, {*at_full, split},
            absl::StrCat(what, " has both a full backward ", Describe(schedule, *at_full),
                         " and a split one ", Describe(schedule, split)));
      }
      if (!forward_only && !at_full.has_value() && !at_input.has_value()) {
        return Invalid(schedule,
                       at_weight.has_value() ? std::vector<ActionPosition>{*at_weight}
                                             : std::vector<ActionPosition>{},
                       absl::StrCat(what, " has no backward: neither ", full.ToString(), " nor ",
                                    input.ToString(), " is on rank ", rank));
      }
      if (at_input.has_value() && !at_weight.has_value()) {
        return Invalid(schedule, {*at_input},
                       absl::StrCat(Describe(schedule, *at_input), " has no ", weight.ToString(),
                                    " to compute its weight gradient"));
      }
      if (!lowered) continue;
      // Each stage-to-stage edge across ranks needs its send and its receive.
      const Action sends[] = {{ActionKind::kSendForward, s, mb},
                              {ActionKind::kSendBackward, s, mb}};
      for (const Action& send : sends) {
        if (!IsNeededMessage(layout, send)) continue;
        const Action recv = *MatchingAction(send);
        const std::optional<ActionPosition> at_send = index.Find(send);
        const std::optional<ActionPosition> at_recv = index.Find(recv);
        if (forward_only && send.kind == ActionKind::kSendBackward) {
          // No backward produces or consumes a gradient here.
          if (!at_send.has_value() && !at_recv.has_value()) continue;
          const ActionPosition at = at_send.has_value() ? *at_send : *at_recv;
          return Invalid(schedule, {at},
                         absl::StrCat(Describe(schedule, at),
                                      " moves a gradient, but the schedule is forward-only (no B, "
                                      "I or W on any rank)"));
        }
        if (at_send.has_value() && !at_recv.has_value()) {
          return Invalid(schedule, {*at_send},
                         absl::StrCat(Describe(schedule, *at_send), " has no matching ",
                                      recv.ToString(), " on rank ", layout.RankOf(recv.stage)));
        }
        if (!at_send.has_value() && at_recv.has_value()) {
          return Invalid(schedule, {*at_recv},
                         absl::StrCat(Describe(schedule, *at_recv), " has no matching ",
                                      send.ToString(), " on rank ", rank));
        }
        if (!at_send.has_value()) {
          return Invalid(schedule, {},
                         absl::StrCat("the schedule has messages, but ", what, " lacks both ",
                                      send.ToString(), " on rank ", rank, " and ", recv.ToString(),
                                      " on rank ", layout.RankOf(recv.stage)));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace pipeline_internal
}  // namespace loom
