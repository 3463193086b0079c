// The training job's checkpoints, through Loom's one checkpoint system
// (checkpoint/sharded_checkpoint.h): what this job puts into the library's terms.
//   - GptModelFields: the model as the manifest records it and a resume compares;
//   - CheckpointTensorsOf: a rank's parameters (its tp shards) as checkpoint tensors,
//     each shard's runs of the whole tensor from models/gpt's ShardRuns, and a
//     tp-replicated parameter saved by tp rank 0 alone;
//   - MetaOf: the manifest's step, model and "saved_by" line for a job.
// The AdamW step is the saved step; the data position and the learning rate are
// functions of the step and of the seeds (batches depend on (seed, step,
// microbatch, dp rank) alone), and the model has no other random state.
//
// Example (every rank of the job, its optimizer over its stage's parameters):
//   LOOM_ASSIGN_OR_RETURN(std::vector<CheckpointTensor> tensors,
//                         CheckpointTensorsOf(params, tp, t));
//   LOOM_RETURN_IF_ERROR(SaveCheckpoint(dir, MetaOf(options, 100),
//       {tensors, /*saves_dp_replicated=*/d == 0, std::move(slices)}, world));
//   // later, on any other valid mesh:
//   LOOM_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(dir));
//   LOOM_RETURN_IF_ERROR(reader.CheckModel(GptModelFields(options.model)));
//   //   FailedPrecondition: "the checkpoint's model has hidden 64, this job's 128"
#ifndef LOOM_TOOLS_TRAINING_JOB_CHECKPOINT_H_
#define LOOM_TOOLS_TRAINING_JOB_CHECKPOINT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/sharded_checkpoint.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/gpt_parameter.h"
#include "tools/training/train_options.h"

namespace loom {

// GptModelFields: vocab, seq_len, hidden, heads, layers, ffn (resolved) and
// layer_norm_eps (%.9g), the manifest's "model" line since the first checkpoints.
ModelFields GptModelFields(const GptConfig& model);

// CheckpointTensorsOf: `params` (a rank's tp shards, tp rank `tp_rank` of
// `tp_size`) as checkpoint tensors. Errors as ShardRuns'.
absl::StatusOr<std::vector<CheckpointTensor>> CheckpointTensorsOf(
    const std::vector<GptParameter>& params, int tp_size, int tp_rank);

// MetaOf: the meta of `options`' job at `step`.
CheckpointMeta MetaOf(const TrainJobOptions& options, int64_t step);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_JOB_CHECKPOINT_H_
