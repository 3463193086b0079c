// Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM's
// forward_backward_pipelining_with_interleaving): each rank holds v model chunks
// (stages r, r + p, ...), and runs its m*v chunk-forwards in microbatch groups of p:
// p microbatches through chunk 0, the same p through chunk 1, ..., then the next p.
// Backwards go through the chunks in reverse. The bubble shrinks by v, to
// (p-1)/(v*m + p-1) of the run.

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "pipeline/generators.h"
#include "pipeline/internal/generator_util.h"

namespace loom {
namespace {

// ChunkAction returns the k-th forward (or backward) of `rank`, Megatron-LM's
// get_model_chunk_id and microbatch numbering with groups of p microbatches.
Action ChunkAction(ActionKind kind, int64_t k, int64_t rank, int64_t p, int64_t v) {
  const int64_t group_size = p * v;
  int64_t chunk = (k % group_size) / p;
  if (kind != ActionKind::kForward) chunk = v - 1 - chunk;
  const int64_t microbatch = (k / group_size) * p + k % p;
  return Action{kind, chunk * p + rank, microbatch};
}

}  // namespace

absl::StatusOr<Schedule> MakeInterleaved1F1BSchedule(int64_t num_ranks, int64_t num_microbatches,
                                                     int64_t virtual_stages) {
  const int64_t p = num_ranks;
  const int64_t m = num_microbatches;
  const int64_t v = virtual_stages;
  if (v < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("interleaved-1f1b needs virtual_stages >= 1, got virtual_stages=", v));
  }
  LOOM_ASSIGN_OR_RETURN(Schedule schedule, pipeline_internal::StartSchedule(
                                               "interleaved-1f1b", StageLayout::Loop(p, v), p, m));
  if (m % p != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "interleaved-1f1b needs num_microbatches to be a multiple of num_ranks (microbatch "
        "groups of p): num_microbatches=",
        m, ", num_ranks=", p));
  }
  const int64_t total = m * v;
  for (int64_t rank = 0; rank < p; ++rank) {
    std::vector<Action>& actions = schedule.ranks[rank];
    const int64_t warmup = std::min((p - rank - 1) * 2 + (v - 1) * p, total);
    for (int64_t k = 0; k < warmup; ++k) {
      actions.push_back(ChunkAction(ActionKind::kForward, k, rank, p, v));
    }
    for (int64_t k = 0; k < total - warmup; ++k) {  // Steady state.
      actions.push_back(ChunkAction(ActionKind::kForward, warmup + k, rank, p, v));
      actions.push_back(ChunkAction(ActionKind::kBackward, k, rank, p, v));
    }
    for (int64_t k = total - warmup; k < total; ++k) {  // Cooldown.
      actions.push_back(ChunkAction(ActionKind::kBackward, k, rank, p, v));
    }
  }
  return schedule;
}

}  // namespace loom
