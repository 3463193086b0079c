// ActionIndex: where each (kind, stage, microbatch) sits in a schedule, as a dense
// table, plus the message rules shared by lowering, verifier and simulator. Private
// to //pipeline.
#ifndef LOOM_PIPELINE_INTERNAL_ACTION_INDEX_H_
#define LOOM_PIPELINE_INTERNAL_ACTION_INDEX_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "pipeline/action.h"
#include "pipeline/schedule.h"
#include "pipeline/stage_layout.h"

namespace loom {
namespace pipeline_internal {

class ActionIndex {
 public:
  ActionIndex(int64_t num_stages, int64_t num_microbatches);

  // InRange is true when the action's stage and microbatch fit the table.
  bool InRange(const Action& action) const {
    return action.stage >= 0 && action.stage < num_stages_ && action.microbatch >= 0 &&
           action.microbatch < num_microbatches_;
  }

  // Find returns where `action` is, or nullopt when it is absent or out of range.
  std::optional<ActionPosition> Find(const Action& action) const;

  // Add records `action` at `position` and returns nullopt, or, when the action is
  // already recorded, keeps the first position and returns it. `action` must be in
  // range.
  std::optional<ActionPosition> Add(const Action& action, ActionPosition position);

 private:
  size_t Slot(const Action& action) const {
    return (static_cast<size_t>(action.kind) * static_cast<size_t>(num_stages_) +
            static_cast<size_t>(action.stage)) *
               static_cast<size_t>(num_microbatches_) +
           static_cast<size_t>(action.microbatch);
  }

  int64_t num_stages_;
  int64_t num_microbatches_;
  // rank and step per slot; rank -1 when absent. Kept as two int32 arrays: the
  // verifier's sweep test builds thousands of these.
  std::vector<int32_t> rank_;
  std::vector<int32_t> step_;
};

// OutgoingMessage returns the send a compute action needs in a lowered schedule:
// SEND_F(s, mb) after F(s, mb) when stage s+1 lives on another rank, SEND_B(s, mb)
// after B(s, mb) or I(s, mb) when stage s-1 lives on another rank; nullopt
// otherwise (W, the last / first stage, same-rank neighbours).
std::optional<Action> OutgoingMessage(const StageLayout& layout, const Action& compute);

// IsNeededMessage is true when `message` (a SEND or RECV) connects two stages on
// different ranks, i.e. when a lowered schedule must contain it.
bool IsNeededMessage(const StageLayout& layout, const Action& message);

// BackwardInput returns the action that produces (stage, microbatch)'s input
// gradient in `index`: B when present, else I (nullopt when neither is).
std::optional<Action> BackwardInput(const ActionIndex& index, int64_t stage, int64_t microbatch);

}  // namespace pipeline_internal
}  // namespace loom

#endif  // LOOM_PIPELINE_INTERNAL_ACTION_INDEX_H_
