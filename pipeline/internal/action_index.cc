#include "pipeline/internal/action_index.h"

#include <cstdint>
#include <optional>

namespace loom {
namespace pipeline_internal {

ActionIndex::ActionIndex(int64_t num_stages, int64_t num_microbatches)
    : num_stages_(num_stages),
      num_microbatches_(num_microbatches),
      rank_(static_cast<size_t>(kNumActionKinds) * static_cast<size_t>(num_stages) *
                static_cast<size_t>(num_microbatches),
            -1),
      step_(rank_.size(), -1) {}

std::optional<ActionPosition> ActionIndex::Find(const Action& action) const {
  if (!InRange(action)) return std::nullopt;
  const size_t slot = Slot(action);
  if (rank_[slot] < 0) return std::nullopt;
  return ActionPosition{rank_[slot], step_[slot]};
}

std::optional<ActionPosition> ActionIndex::Add(const Action& action, ActionPosition position) {
  const size_t slot = Slot(action);
  if (rank_[slot] >= 0) return ActionPosition{rank_[slot], step_[slot]};
  rank_[slot] = static_cast<int32_t>(position.rank);
  step_[slot] = static_cast<int32_t>(position.step);
  return std::nullopt;
}

std::optional<Action> OutgoingMessage(const StageLayout& layout, const Action& compute) {
  const int64_t s = compute.stage;
  switch (compute.kind) {
    case ActionKind::kForward:
      if (s + 1 < layout.num_stages() && layout.RankOf(s + 1) != layout.RankOf(s)) {
        return Action{ActionKind::kSendForward, s, compute.microbatch};
      }
      return std::nullopt;
    case ActionKind::kBackward:
    case ActionKind::kBackwardInput:
      if (s > 0 && layout.RankOf(s - 1) != layout.RankOf(s)) {
        return Action{ActionKind::kSendBackward, s, compute.microbatch};
      }
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

bool IsNeededMessage(const StageLayout& layout, const Action& message) {
  const std::optional<Action> peer = MatchingAction(message);
  if (!peer.has_value()) return false;
  const int64_t here = layout.RankOf(message.stage);
  const int64_t there = layout.RankOf(peer->stage);
  return here >= 0 && there >= 0 && here != there;
}

std::optional<Action> BackwardInput(const ActionIndex& index, int64_t stage, int64_t microbatch) {
  const Action full{ActionKind::kBackward, stage, microbatch};
  if (index.Find(full).has_value()) return full;
  const Action input{ActionKind::kBackwardInput, stage, microbatch};
  if (index.Find(input).has_value()) return input;
  return std::nullopt;
}

}  // namespace pipeline_internal
}  // namespace loom
