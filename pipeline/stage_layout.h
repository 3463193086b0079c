// StageLayout: which pipeline rank holds which stage, and optionally which model
// layers each stage holds.
//
// A model is cut into num_stages() consecutive stages; data flows forward from
// stage 0 to the last stage and gradients flow back. Two placements are supported:
//
//   loop     stage s on rank s mod p; p * v stages for v stages per rank. v = 1 is
//            the plain pipeline (GPipe, 1F1B, ZB-H1); v > 1 is Megatron-LM's
//            interleaved ("virtual pipeline") layout, where rank r holds model chunks
//            r, r + p, r + 2p, ...
//   v-shape  two stages per rank, rank r holds stages r and 2p-1-r (ZB-V,
//            DualPipeV): the forward pass runs down the ranks and back up, so the
//            turn between stage p-1 and stage p stays on rank p-1, and rank 0 holds
//            both the first and the last stage.
//
// Layers are optional: WithLayers assigns an explicit (possibly uneven) number of
// layers to each stage, WithEvenLayers splits them evenly; the simulator can scale
// per-layer costs by them.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(StageLayout loop, StageLayout::Loop(4, /*stages_per_rank=*/2));
//   loop.num_stages();   // 8
//   loop.RankOf(5);      // 1
//   loop.StagesOf(1);    // {1, 5}
//   LOOM_ASSIGN_OR_RETURN(StageLayout v, StageLayout::VShape(4));
//   v.StagesOf(1);       // {1, 6}
//   v.RankOf(7);         // 0
//   LOOM_ASSIGN_OR_RETURN(StageLayout uneven,
//                         StageLayout::Loop(4)->WithLayers(30, {7, 8, 8, 7}));
//   uneven.FirstLayer(2);   // 15
//   StageLayout::Loop(4)->WithLayers(30, {8, 8, 8, 8});
//   // InvalidArgument: layers_per_stage (8,8,8,8) covers 32 layers, the model has 30
#ifndef LOOM_PIPELINE_STAGE_LAYOUT_H_
#define LOOM_PIPELINE_STAGE_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace loom {

enum class StagePlacement { kLoop, kVShape };

// BalancedLayerCounts returns the layers of each of `stages` stages: layers /
// stages each, the remainder one each to the inner stages 1, 2, ... first, then to
// the first stage, then to the last. Example: (10, 4) -> {2, 3, 3, 2}; (7, 2) ->
// {4, 3}. `stages` must be at least 1 and `layers` at least 0.
std::vector<int64_t> BalancedLayerCounts(int64_t layers, int64_t stages);

class StageLayout {
 public:
  // The bound keeps stage * microbatch indices and the verifier's tables small
  // enough to never overflow; real pipelines have tens of stages.
  static constexpr int64_t kMaxStages = int64_t{1} << 20;

  // The default layout: one rank holding one stage.
  StageLayout() = default;

  // Loop places stage s on rank s mod num_ranks, with num_ranks * stages_per_rank
  // stages. InvalidArgument for a count below 1 or more than kMaxStages stages.
  static absl::StatusOr<StageLayout> Loop(int64_t num_ranks, int64_t stages_per_rank = 1);

  // VShape places stages r and 2*num_ranks-1-r on rank r. InvalidArgument for
  // num_ranks below 1 or more than kMaxStages / 2.
  static absl::StatusOr<StageLayout> VShape(int64_t num_ranks);

  // WithLayers returns a copy in which stage s holds layers_per_stage[s] consecutive
  // layers of a num_layers-layer model. InvalidArgument, with the numbers, when the
  // layout has a different number of entries than stages, an entry is negative, or
  // the entries do not add up to num_layers.
  absl::StatusOr<StageLayout> WithLayers(int64_t num_layers,
                                         std::vector<int64_t> layers_per_stage) const;

  // WithEvenLayers splits num_layers evenly over the stages. InvalidArgument when
  // num_layers is negative or not a multiple of num_stages().
  absl::StatusOr<StageLayout> WithEvenLayers(int64_t num_layers) const;

  // WithBalancedLayers splits num_layers as evenly as they go (BalancedLayerCounts):
  // WithEvenLayers' split when num_stages() divides them, otherwise the inner
  // stages take the extra layers first (the first stage also holds the embedding,
  // the last the head and loss), as Llama 3's pipeline does. InvalidArgument when
  // num_layers is below num_stages() (a stage without a layer).
  absl::StatusOr<StageLayout> WithBalancedLayers(int64_t num_layers) const;

  StagePlacement placement() const { return placement_; }
  int64_t num_ranks() const { return num_ranks_; }
  int64_t num_stages() const { return num_ranks_ * stages_per_rank_; }
  int64_t stages_per_rank() const { return stages_per_rank_; }

  // RankOf returns the rank that holds `stage`, or -1 for a stage outside
  // [0, num_stages()).
  int64_t RankOf(int64_t stage) const;

  // StagesOf returns the stages of `rank` in ascending order (empty for a rank
  // outside [0, num_ranks())).
  std::vector<int64_t> StagesOf(int64_t rank) const;

  // has_layers is true once WithLayers / WithEvenLayers assigned layers.
  bool has_layers() const { return !layers_per_stage_.empty(); }
  int64_t num_layers() const { return num_layers_; }
  // layers_per_stage is empty unless has_layers().
  const std::vector<int64_t>& layers_per_stage() const { return layers_per_stage_; }
  // FirstLayer returns the index of the first layer of `stage` (0 without layers).
  int64_t FirstLayer(int64_t stage) const;

  // ToString returns e.g. "loop p=4 v=2", "v-shape p=4", with " layers=7,8,8,7"
  // appended when layers are assigned.
  std::string ToString() const;

  friend bool operator==(const StageLayout& a, const StageLayout& b) {
    return a.placement_ == b.placement_ && a.num_ranks_ == b.num_ranks_ &&
           a.stages_per_rank_ == b.stages_per_rank_ && a.num_layers_ == b.num_layers_ &&
           a.layers_per_stage_ == b.layers_per_stage_;
  }
  friend bool operator!=(const StageLayout& a, const StageLayout& b) { return !(a == b); }

 private:
  StageLayout(StagePlacement placement, int64_t num_ranks, int64_t stages_per_rank)
      : placement_(placement), num_ranks_(num_ranks), stages_per_rank_(stages_per_rank) {}

  StagePlacement placement_ = StagePlacement::kLoop;
  int64_t num_ranks_ = 1;
  int64_t stages_per_rank_ = 1;
  int64_t num_layers_ = 0;
  std::vector<int64_t> layers_per_stage_;
};

}  // namespace loom

#endif  // LOOM_PIPELINE_STAGE_LAYOUT_H_
