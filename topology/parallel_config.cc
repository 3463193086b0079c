#include "topology/parallel_config.h"

#include <numeric>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace loom {
namespace {

constexpr PipelineScheduleKind kAllSchedules[] = {
    PipelineScheduleKind::kGPipe, PipelineScheduleKind::k1F1B,
    PipelineScheduleKind::kInterleaved1F1B, PipelineScheduleKind::kZeroBubbleH1,
    PipelineScheduleKind::kZeroBubbleV};

absl::Status CheckAtLeastOne(absl::string_view name, int64_t value) {
  if (value < 1) {
    return absl::InvalidArgumentError(absl::StrCat(name, "=", value, " must be >= 1"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view PipelineScheduleName(PipelineScheduleKind kind) {
  switch (kind) {
    case PipelineScheduleKind::kGPipe: return "gpipe";
    case PipelineScheduleKind::k1F1B: return "1f1b";
    case PipelineScheduleKind::kInterleaved1F1B: return "interleaved-1f1b";
    case PipelineScheduleKind::kZeroBubbleH1: return "zb-h1";
    case PipelineScheduleKind::kZeroBubbleV: return "zb-v";
  }
  return "invalid";
}

absl::StatusOr<PipelineScheduleKind> ParsePipelineSchedule(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  for (PipelineScheduleKind kind : kAllSchedules) {
    if (PipelineScheduleName(kind) == lower) return kind;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown pipeline schedule \"", name, "\"; expected gpipe, 1f1b, interleaved-1f1b, zb-h1 or zb-v"));
}

std::string ParallelConfig::ToString() const {
  return absl::StrCat("dp=", dp, ",pp=", pp, ",cp=", cp, ",tp=", tp, ",ep=", ep);
}

absl::StatusOr<std::vector<int64_t>> ParallelConfig::LayersPerStage() const {
  const int64_t stages = pp * virtual_stages;
  if (!layers_per_stage.empty()) {
    if (static_cast<int64_t>(layers_per_stage.size()) != stages) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layers_per_stage has ", layers_per_stage.size(), " entries (",
          absl::StrJoin(layers_per_stage, ","), "), pp=", pp, " x virtual_stages=",
          virtual_stages, " needs ", stages));
    }
    for (size_t i = 0; i < layers_per_stage.size(); ++i) {
      if (layers_per_stage[i] < 0) {
        return absl::InvalidArgumentError(absl::StrCat("layers_per_stage[", i, "]=",
                                                       layers_per_stage[i], " is negative"));
      }
    }
    const int64_t sum = std::accumulate(layers_per_stage.begin(), layers_per_stage.end(), int64_t{0});
    if (sum != num_layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layers_per_stage (", absl::StrJoin(layers_per_stage, ","), ") covers ", sum,
          " layers, the model has num_layers=", num_layers));
    }
    return layers_per_stage;
  }
  if (num_layers % stages != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_layers=", num_layers, " is not divisible by pp=", pp, " x virtual_stages=",
        virtual_stages, " (", stages, " stages); give an explicit layers_per_stage layout"));
  }
  return std::vector<int64_t>(stages, num_layers / stages);
}

absl::Status ParallelConfig::Validate(int64_t world_size) const {
  LOOM_RETURN_IF_ERROR(CheckAtLeastOne("dp", dp));
  LOOM_RETURN_IF_ERROR(CheckAtLeastOne("pp", pp));
  LOOM_RETURN_IF_ERROR(CheckAtLeastOne("cp", cp));
  LOOM_RETURN_IF_ERROR(CheckAtLeastOne("tp", tp));
  LOOM_RETURN_IF_ERROR(CheckAtLeastOne("ep", ep));
  LOOM_RETURN_IF_ERROR(CheckAtLeastOne("num_microbatches", num_microbatches));
  LOOM_RETURN_IF_ERROR(CheckAtLeastOne("virtual_stages", virtual_stages));
  if (world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("world size ", world_size, " must be >= 1"));
  }
  // The product is formed with overflow checks: absurd sizes must give a message,
  // not undefined behaviour.
  int64_t product = 1;
  bool overflow = false;
  for (const int64_t factor : {dp, pp, cp, tp}) {
    overflow = overflow || __builtin_mul_overflow(product, factor, &product);
  }
  if (overflow || product != world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dp=", dp, " x pp=", pp, " x cp=", cp, " x tp=", tp, " = ",
        overflow ? std::string("more than 2^63") : std::to_string(product),
        " ranks, world size is ", world_size));
  }
  if ((dp * cp) % ep != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ep=", ep, " does not divide dp x cp = ", dp * cp,
                     " (experts are sharded over the data- and context-parallel ranks)"));
  }
  switch (schedule) {
    case PipelineScheduleKind::kInterleaved1F1B:
      if (virtual_stages < 2) {
        return absl::InvalidArgumentError(absl::StrCat(
            "interleaved-1f1b needs virtual_stages >= 2, got virtual_stages=", virtual_stages));
      }
      break;
    case PipelineScheduleKind::kZeroBubbleV:
      if (virtual_stages != 2) {
        return absl::InvalidArgumentError(absl::StrCat(
            "zb-v places exactly 2 stages per rank, got virtual_stages=", virtual_stages));
      }
      break;
    default:
      if (virtual_stages != 1) {
        return absl::InvalidArgumentError(absl::StrCat(PipelineScheduleName(schedule),
                                                       " uses one stage per rank, got virtual_stages=",
                                                       virtual_stages));
      }
  }
  if ((schedule == PipelineScheduleKind::kInterleaved1F1B ||
       schedule == PipelineScheduleKind::kZeroBubbleV) &&
      num_microbatches < pp) {
    return absl::InvalidArgumentError(absl::StrCat(
        PipelineScheduleName(schedule), " needs at least pp=", pp,
        " microbatches, got num_microbatches=", num_microbatches));
  }
  if (num_layers < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_layers=", num_layers, " is negative"));
  }
  if (num_layers > 0 || !layers_per_stage.empty()) {
    LOOM_RETURN_IF_ERROR(LayersPerStage().status());
  }
  return absl::OkStatus();
}

absl::StatusOr<Mesh> ParallelConfig::ToMesh(absl::string_view order) const {
  return Mesh::FromOrder(order, {{"dp", dp}, {"pp", pp}, {"cp", cp}, {"tp", tp}});
}

}  // namespace loom
