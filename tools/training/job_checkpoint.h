// JobCheckpoint: the training job's checkpoints, in the model's own coordinates, so
// that any valid mesh can load what any other saved ("online resharding", as
// PyTorch's distributed checkpoint does; DeepSpeed's needs an offline conversion).
//
// What a rank saves is its optimizer state (RankOptimizer::ReadState: the f32
// master weights and AdamW's two moments) for the elements it alone owns, cut into
// pieces named by parameter and by element ranges of the whole tensor: a tp shard
// is a set of runs of the whole tensor (ShardRuns), a ZeRO rank's dp range a part of
// those, a pp stage a set of whole parameters. Elements every dp rank holds (zero 0,
// ZeRO's persistent parameters) are saved by dp rank 0, and tp-replicated
// parameters by tp rank 0, so every element of the model is saved exactly once.
// The AdamW step is the saved step; the data position and the learning rate are
// functions of the step and of the seeds (batches depend on (seed, step,
// microbatch, dp rank) alone), and the model has no other random state.
//
// On disk:
//   DIR/LATEST                    "step-00000100" and its CRC32C: the commit point
//   DIR/step-00000100/MANIFEST    text: step, model, the mesh that saved it, every
//                                 parameter's full shape, every rank file's size,
//                                 and a CRC32C of the lines above it
//   DIR/step-00000100/rank-00003.bin   magic | index of pieces (name, whole-tensor
//                                 range, CRC32C) | payload (master, m, v per piece)
// A save is atomic: every file is written under a temporary name, fsynced and
// renamed; only after every rank's file is durable (an agreement over the world
// communicator, so one rank's failure is every rank's error, never a hang) does
// rank 0 write the manifest and swing LATEST (temp, fsync, rename, fsync DIR). A
// crash at any moment leaves the previous checkpoint loadable. Older step
// directories beyond `keep` are removed after the commit.
//
// Example (every rank of the job, its optimizer over its stage's parameters):
//   CheckpointMeta meta = MetaOf(options, /*step=*/100);
//   LOOM_ASSIGN_OR_RETURN(std::vector<StateSlice> slices, optimizer->ReadState());
//   LOOM_RETURN_IF_ERROR(SaveJobCheckpoint("/ckpt/run1", meta,
//       {&params, tp, t, /*saves_dp_replicated=*/d == 0, std::move(slices)}, world, {}));
//   // later, on any other valid mesh:
//   LOOM_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open("/ckpt/run1"));
//   LOOM_RETURN_IF_ERROR(reader.CheckModel(options.model));
//   //   FailedPrecondition: "--resume /ckpt/run1: the checkpoint's model has hidden 64,
//   //   this job's 128"
//   LOOM_RETURN_IF_ERROR(optimizer->WriteState(reader.SourceFor(params, tp, t)));
//   reader.meta().step;                 // 100: the next step is 101
//
// Ranks must see one file system at DIR (a local disk for one host). One job at a
// time may save to a DIR.
#ifndef LOOM_TOOLS_TRAINING_JOB_CHECKPOINT_H_
#define LOOM_TOOLS_TRAINING_JOB_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectives/communicator.h"
#include "models/gpt/gpt_config.h"
#include "models/gpt/gpt_parameter.h"
#include "tools/training/rank_optimizer.h"
#include "tools/training/train_options.h"

namespace loom {

// CheckpointMeta: what the manifest says besides the parameters.
struct CheckpointMeta {
  int64_t step = 0;  // optimizer steps done; a resumed job continues at step + 1
  GptConfig model;   // must match the loading job's (CheckModel)
  // The mesh and settings that saved it: informational, any valid mesh may load it.
  std::string saved_by;  // "dp=2 tp=2 pp=2 cp=1 schedule=1f1b zero=3 dtype=f32 offload=cpu"
  uint64_t data_seed = 0;
};

// MetaOf: the meta of `options`' job at `step`.
CheckpointMeta MetaOf(const TrainJobOptions& options, int64_t step);

// RankCheckpointPart: what one rank contributes to a save.
struct RankCheckpointPart {
  const std::vector<GptParameter>* params = nullptr;  // the optimizer's list (its stage)
  int tp_size = 1;
  int tp_rank = 0;
  bool saves_dp_replicated = false;  // dp rank 0
  std::vector<StateSlice> slices;    // RankOptimizer::ReadState
};

struct JobCheckpointOptions {
  int keep = 2;  // committed checkpoints to keep, >= 1
  // Test hook, never set in production: called after each checkpoint file is
  // written (under its temporary name, before the rename) with that name. A non-OK
  // return fails the save as the write's error would; a test may also kill the
  // process from it to simulate a crash during a save.
  std::function<absl::Status(absl::string_view temp_path)> testing_after_write;
};

// SaveJobCheckpoint saves `part` of every rank of `world` as the checkpoint of
// meta.step in `dir` (created if missing; its parent must exist) and commits it.
// Collective over `world`; the same status on every rank. InvalidArgument for bad
// input (keep, slices outside their parameters); FailedPrecondition if meta.step is
// already committed there; the file system's error naming the call and the path.
absl::Status SaveJobCheckpoint(const std::string& dir, const CheckpointMeta& meta,
                               const RankCheckpointPart& part, Communicator& world,
                               const JobCheckpointOptions& options = {});

// LatestCheckpointStep: the step of the checkpoint committed in `dir`; NotFound
// when there is none (no directory, no LATEST); DataLoss for a corrupt LATEST.
absl::StatusOr<int64_t> LatestCheckpointStep(const std::string& dir);

// CheckpointReader: the committed checkpoint of a directory, as one rank reads it.
class CheckpointReader {
 public:
  // Open reads LATEST, the manifest and every rank file's index, checking their
  // CRC32Cs. NotFound when there is no checkpoint; DataLoss naming the file and the
  // check for a corrupt or truncated one.
  static absl::StatusOr<CheckpointReader> Open(const std::string& dir);

  CheckpointReader(CheckpointReader&&) noexcept;
  CheckpointReader& operator=(CheckpointReader&&) noexcept;
  ~CheckpointReader();

  const CheckpointMeta& meta() const;
  // CheckModel: FailedPrecondition naming the first field of GptConfig that differs
  // between the checkpoint's model and `model`, with both values.
  absl::Status CheckModel(const GptConfig& model) const;
  // SourceFor fills RankOptimizer::WriteState from the checkpoint, for `params` (the
  // loading rank's optimizer list) as tp rank `tp_rank` of `tp_size` shards them.
  // Its errors: FailedPrecondition for a parameter the checkpoint lacks or has in
  // another full shape; DataLoss for a piece whose CRC32C fails or elements no file
  // holds.
  StateSource SourceFor(const std::vector<GptParameter>& params, int tp_size, int tp_rank) const;

 private:
  struct Index;
  explicit CheckpointReader(std::unique_ptr<Index> index);
  std::unique_ptr<Index> index_;
};

// AgreeOnStatus: every rank of `world` learns the first failing rank's status (its
// code, and its message prefixed with "rank R: "), or OK when every rank is OK.
// Collective; used wherever ranks must fail together rather than hang.
absl::Status AgreeOnStatus(Communicator& world, const absl::Status& mine);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_JOB_CHECKPOINT_H_
