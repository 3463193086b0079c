#include "tools/training/job_checkpoint.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/dtype.h"
#include "core/status_macros.h"
#include "topology/parallel_config.h"

namespace loom {

ModelFields GptModelFields(const GptConfig& m) {
  return {{"vocab", absl::StrCat(m.vocab)},
          {"seq_len", absl::StrCat(m.seq_len)},
          {"hidden", absl::StrCat(m.hidden)},
          {"heads", absl::StrCat(m.heads)},
          {"layers", absl::StrCat(m.layers)},
          {"ffn", absl::StrCat(m.ffn_size())},
          {"layer_norm_eps", absl::StrFormat("%.9g", m.layer_norm_eps)}};
}

absl::StatusOr<std::vector<CheckpointTensor>> CheckpointTensorsOf(
    const std::vector<GptParameter>& params, int tp_size, int tp_rank) {
  std::vector<CheckpointTensor> tensors;
  tensors.reserve(params.size());
  for (const GptParameter& p : params) {
    CheckpointTensor t;
    t.name = p.name;
    t.full_shape = p.full_shape;
    LOOM_ASSIGN_OR_RETURN(const std::vector<ShardRun> runs, ShardRuns(p, tp_size, tp_rank));
    for (const ShardRun& run : runs) t.runs.push_back({run.full_offset, run.length});
    // Every tp rank holds a replicated parameter whole: tp rank 0 saves it.
    t.saved_here = p.split != TpSplit::kReplicated || tp_rank == 0;
    tensors.push_back(std::move(t));
  }
  return tensors;
}

CheckpointMeta MetaOf(const TrainJobOptions& o, int64_t step) {
  CheckpointMeta meta;
  meta.step = step;
  meta.model = GptModelFields(o.model);
  meta.saved_by = absl::StrFormat(
      "dp=%d tp=%d pp=%d cp=%d schedule=%s zero=%d dtype=%s offload=%s", o.dp, o.tp, o.pp, o.cp,
      PipelineScheduleName(o.schedule), o.zero, DTypeName(o.dtype), OffloadName(o.offload));
  meta.data_seed = o.data_seed;
  return meta;
}

}  // namespace loom
