#include "pipeline/stage_layout.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace loom {

absl::StatusOr<StageLayout> StageLayout::Loop(int64_t num_ranks, int64_t stages_per_rank) {
  if (num_ranks < 1 || stages_per_rank < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a loop layout needs num_ranks >= 1 and "
                     "stages_per_rank >= 1, got num_ranks=",
                     num_ranks, ", stages_per_rank=", stages_per_rank));
  }
  if (num_ranks > kMaxStages / stages_per_rank) {
    return absl::InvalidArgumentError(absl::StrCat("num_ranks=", num_ranks,
                                                   " x stages_per_rank=", stages_per_rank,
                                                   " is more than ", kMaxStages, " stages"));
  }
  return StageLayout(StagePlacement::kLoop, num_ranks, stages_per_rank);
}

absl::StatusOr<StageLayout> StageLayout::VShape(int64_t num_ranks) {
  if (num_ranks < 1 || num_ranks > kMaxStages / 2) {
    return absl::InvalidArgumentError(absl::StrCat("a v-shape layout needs 1 <= num_ranks <= ",
                                                   kMaxStages / 2, ", got num_ranks=", num_ranks));
  }
  return StageLayout(StagePlacement::kVShape, num_ranks, 2);
}

absl::StatusOr<StageLayout> StageLayout::WithLayers(int64_t num_layers,
                                                    std::vector<int64_t> layers_per_stage) const {
  if (num_layers < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_layers=", num_layers, " is negative"));
  }
  if (static_cast<int64_t>(layers_per_stage.size()) != num_stages()) {
    return absl::InvalidArgumentError(
        absl::StrCat("layers_per_stage has ", layers_per_stage.size(), " entries (",
                     absl::StrJoin(layers_per_stage, ","), "), the layout ", ToString(), " has ",
                     num_stages(), " stages"));
  }
  int64_t sum = 0;
  bool overflow = false;
  for (size_t s = 0; s < layers_per_stage.size(); ++s) {
    if (layers_per_stage[s] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("layers_per_stage[", s, "]=", layers_per_stage[s], " is negative"));
    }
    overflow = overflow || __builtin_add_overflow(sum, layers_per_stage[s], &sum);
  }
  if (overflow || sum != num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("layers_per_stage (", absl::StrJoin(layers_per_stage, ","), ") covers ",
                     overflow ? std::string("more than 2^63") : std::to_string(sum),
                     " layers, the model has ", num_layers));
  }
  StageLayout layout = *this;
  layout.num_layers_ = num_layers;
  layout.layers_per_stage_ = std::move(layers_per_stage);
  return layout;
}

absl::StatusOr<StageLayout> StageLayout::WithEvenLayers(int64_t num_layers) const {
  if (num_layers < 0 || num_layers % num_stages() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_layers=", num_layers, " does not split evenly over the ", num_stages(),
                     " stages of ", ToString(), "; give an explicit layers_per_stage layout"));
  }
  return WithLayers(num_layers, std::vector<int64_t>(num_stages(), num_layers / num_stages()));
}

std::vector<int64_t> BalancedLayerCounts(int64_t layers, int64_t stages) {
  std::vector<int64_t> counts(static_cast<size_t>(stages), layers / stages);
  int64_t extra = layers % stages;
  for (int64_t i = 1; i + 1 < stages && extra > 0; ++i, --extra) ++counts[static_cast<size_t>(i)];
  if (extra > 0) ++counts.front(), --extra;
  if (extra > 0) ++counts.back();
  return counts;
}

absl::StatusOr<StageLayout> StageLayout::WithBalancedLayers(int64_t num_layers) const {
  if (num_layers < num_stages()) {
    return absl::InvalidArgumentError(absl::StrCat("num_layers=", num_layers,
                                                   " is fewer than the ", num_stages(),
                                                   " stages of ", ToString(),
                                                   ": a stage would hold no layer"));
  }
  return WithLayers(num_layers, BalancedLayerCounts(num_layers, num_stages()));
}

int64_t StageLayout::RankOf(int64_t stage) const {
  if (stage < 0 || stage >= num_stages()) return -1;
  switch (placement_) {
    case StagePlacement::kLoop:
      return stage % num_ranks_;
    case StagePlacement::kVShape:
      return stage < num_ranks_ ? stage : 2 * num_ranks_ - 1 - stage;
  }
  return -1;
}

std::vector<int64_t> StageLayout::StagesOf(int64_t rank) const {
  std::vector<int64_t> stages;
  if (rank < 0 || rank >= num_ranks_) return stages;
  switch (placement_) {
    case StagePlacement::kLoop:
      for (int64_t chunk = 0; chunk < stages_per_rank_; ++chunk) {
        stages.push_back(chunk * num_ranks_ + rank);
      }
      break;
    case StagePlacement::kVShape:
      stages = {rank, 2 * num_ranks_ - 1 - rank};
      break;
  }
  return stages;
}

int64_t StageLayout::FirstLayer(int64_t stage) const {
  if (!has_layers() || stage <= 0) return 0;
  const int64_t end = std::min<int64_t>(stage, num_stages());
  return std::accumulate(layers_per_stage_.begin(), layers_per_stage_.begin() + end, int64_t{0});
}

std::string StageLayout::ToString() const {
  std::string text = placement_ == StagePlacement::kLoop
                         ? absl::StrCat("loop p=", num_ranks_, " v=", stages_per_rank_)
                         : absl::StrCat("v-shape p=", num_ranks_);
  if (has_layers()) absl::StrAppend(&text, " layers=", absl::StrJoin(layers_per_stage_, ","));
  return text;
}

}  // namespace loom
