#include "pipeline/action.h"

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace loom {
namespace {

constexpr ActionKind kAllKinds[kNumActionKinds] = {
    ActionKind::kForward,        ActionKind::kBackward,     ActionKind::kBackwardInput,
    ActionKind::kBackwardWeight, ActionKind::kSendForward,  ActionKind::kRecvForward,
    ActionKind::kSendBackward,   ActionKind::kRecvBackward,
};

// ConsumeNumber takes the leading decimal digits of `*text` as a non-negative number.
bool ConsumeNumber(absl::string_view* text, int64_t* value) {
  size_t digits = 0;
  while (digits < text->size() &&
         absl::ascii_isdigit(static_cast<unsigned char>((*text)[digits]))) {
    ++digits;
  }
  if (digits == 0 || !absl::SimpleAtoi(text->substr(0, digits), value)) return false;
  text->remove_prefix(digits);
  return true;
}

absl::Status ParseError(absl::string_view text) {
  return absl::InvalidArgumentError(absl::StrCat(
      "cannot parse action \"", text,
      "\": expected <stage><F|B|I|W|SEND_F|RECV_F|SEND_B|RECV_B><microbatch>, e.g. \"0F0\" "
      "or \"1RECV_B2\""));
}

}  // namespace

absl::string_view ActionKindName(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return "F";
    case ActionKind::kBackward:
      return "B";
    case ActionKind::kBackwardInput:
      return "I";
    case ActionKind::kBackwardWeight:
      return "W";
    case ActionKind::kSendForward:
      return "SEND_F";
    case ActionKind::kRecvForward:
      return "RECV_F";
    case ActionKind::kSendBackward:
      return "SEND_B";
    case ActionKind::kRecvBackward:
      return "RECV_B";
  }
  return "?";
}

bool IsCompute(ActionKind kind) {
  return kind == ActionKind::kForward || kind == ActionKind::kBackward ||
         kind == ActionKind::kBackwardInput || kind == ActionKind::kBackwardWeight;
}

bool IsCommunication(ActionKind kind) { return !IsCompute(kind); }

bool IsSend(ActionKind kind) {
  return kind == ActionKind::kSendForward || kind == ActionKind::kSendBackward;
}

bool IsRecv(ActionKind kind) {
  return kind == ActionKind::kRecvForward || kind == ActionKind::kRecvBackward;
}

std::string Action::ToString() const {
  return absl::StrCat(stage, ActionKindName(kind), microbatch);
}

std::ostream& operator<<(std::ostream& os, const Action& action) { return os << action.ToString(); }

absl::StatusOr<Action> ParseAction(absl::string_view text) {
  absl::string_view rest = text;
  Action action;
  if (!ConsumeNumber(&rest, &action.stage)) return ParseError(text);
  // The longest kind name that prefixes the rest wins, although no name here is a
  // prefix of another; the loop stays correct if PyTorch's longer kinds are added.
  size_t best_length = 0;
  for (ActionKind kind : kAllKinds) {
    const absl::string_view name = ActionKindName(kind);
    if (name.size() > best_length && absl::StartsWith(rest, name)) {
      best_length = name.size();
      action.kind = kind;
    }
  }
  if (best_length == 0) return ParseError(text);
  rest.remove_prefix(best_length);
  if (!ConsumeNumber(&rest, &action.microbatch) || !rest.empty()) return ParseError(text);
  return action;
}

absl::StatusOr<std::vector<Action>> ParseActionList(absl::string_view text) {
  std::vector<Action> actions;
  int index = 0;
  for (absl::string_view cell :
       absl::StrSplit(text, absl::ByAnyChar(", \t\n"), absl::SkipEmpty())) {
    absl::StatusOr<Action> action = ParseAction(cell);
    if (!action.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("cell ", index, " of \"", text, "\": ", action.status().message()));
    }
    actions.push_back(*action);
    ++index;
  }
  return actions;
}

std::optional<Action> MatchingAction(const Action& message) {
  switch (message.kind) {
    case ActionKind::kSendForward:
      return Action{ActionKind::kRecvForward, message.stage + 1, message.microbatch};
    case ActionKind::kRecvForward:
      return Action{ActionKind::kSendForward, message.stage - 1, message.microbatch};
    case ActionKind::kSendBackward:
      return Action{ActionKind::kRecvBackward, message.stage - 1, message.microbatch};
    case ActionKind::kRecvBackward:
      return Action{ActionKind::kSendBackward, message.stage + 1, message.microbatch};
    default:
      return std::nullopt;
  }
}

}  // namespace loom
