// Action: one step of a pipeline schedule on one rank: a computation (forward,
// backward, or the zero-bubble halves of a backward) or a point-to-point message
// (send / receive of activations or gradients), each for one (stage, microbatch).
//
// The text form is PyTorch pipelining's (torch.distributed.pipelining `_Action`):
// "<stage><kind><microbatch>", so schedules can be read from and written to its CSV
// files, one row per rank.
//
//   kind     text    what it does on stage s for microbatch mb
//   F        F       forward
//   B        B       full backward (input and weight gradients together)
//   I        I       backward for inputs only (zero-bubble "B" pass)
//   W        W       backward for weights only (zero-bubble "W" pass), after I
//   SEND_F   SEND_F  send s's forward output to stage s+1
//   RECV_F   RECV_F  receive s's forward input from stage s-1
//   SEND_B   SEND_B  send s's input gradient to stage s-1
//   RECV_B   RECV_B  receive s's output gradient from stage s+1
//
// So SEND_F(s, mb) pairs with RECV_F(s+1, mb), and SEND_B(s, mb) with RECV_B(s-1, mb)
// (MatchingAction).
//
// Example:
//   Action a = {ActionKind::kRecvBackward, /*stage=*/1, /*microbatch=*/2};
//   a.ToString();                           // "1RECV_B2"
//   ParseAction("2I3");                     // {kBackwardInput, 2, 3}
//   ParseAction("0SEND_F1");                // {kSendForward, 0, 1}
//   MatchingAction(*ParseAction("0SEND_F1"));   // 1RECV_F1
//   ParseActionList("0F0, 0SEND_F0 0F1");   // three actions (commas and/or spaces)
//   ParseAction("1X3");                     // InvalidArgument: cannot parse action "1X3" ...
#ifndef LOOM_PIPELINE_ACTION_H_
#define LOOM_PIPELINE_ACTION_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom {

enum class ActionKind {
  kForward,
  kBackward,
  kBackwardInput,
  kBackwardWeight,
  kSendForward,
  kRecvForward,
  kSendBackward,
  kRecvBackward,
};

inline constexpr int kNumActionKinds = 8;

// ActionKindName returns the text of a kind in PyTorch's notation: "F", "B", "I",
// "W", "SEND_F", "RECV_F", "SEND_B" or "RECV_B".
absl::string_view ActionKindName(ActionKind kind);

// IsCompute is true for F, B, I and W; IsCommunication for the four messages.
bool IsCompute(ActionKind kind);
bool IsCommunication(ActionKind kind);
// IsSend / IsRecv split the messages by direction.
bool IsSend(ActionKind kind);
bool IsRecv(ActionKind kind);

struct Action {
  ActionKind kind = ActionKind::kForward;
  int64_t stage = 0;
  int64_t microbatch = 0;

  // ToString returns "<stage><kind><microbatch>", e.g. "0F0", "1RECV_B2".
  std::string ToString() const;

  friend bool operator==(const Action& a, const Action& b) {
    return a.kind == b.kind && a.stage == b.stage && a.microbatch == b.microbatch;
  }
  friend bool operator!=(const Action& a, const Action& b) { return !(a == b); }
  template <typename H>
  friend H AbslHashValue(H h, const Action& a) {
    return H::combine(std::move(h), a.kind, a.stage, a.microbatch);
  }
};

std::ostream& operator<<(std::ostream& os, const Action& action);

// ParseAction reads "<stage><kind><microbatch>" (no spaces inside). InvalidArgument
// naming the text when it is not of that form or a number does not fit.
absl::StatusOr<Action> ParseAction(absl::string_view text);

// ParseActionList reads actions separated by commas and/or whitespace (one row of
// PyTorch's schedule CSV). Empty cells are skipped. InvalidArgument naming the first
// cell that does not parse, and its index.
absl::StatusOr<std::vector<Action>> ParseActionList(absl::string_view text);

// MatchingAction returns the other half of a message: SEND_F(s) <-> RECV_F(s+1),
// SEND_B(s) <-> RECV_B(s-1). nullopt for a compute action.
std::optional<Action> MatchingAction(const Action& message);

}  // namespace loom

#endif  // LOOM_PIPELINE_ACTION_H_
