// Sharded checkpoints in the model's own coordinates, so that any mesh can load
// what any other saved ("online resharding", as PyTorch's distributed checkpoint
// does; DeepSpeed's needs an offline conversion). Loom's one checkpoint system: the
// training job (tools/training) saves and resumes through it, and any program whose
// ranks hold optimizer state (StateSlice) for shards of named tensors can.
//
// What a rank saves is its optimizer state for the elements it alone owns, cut into
// pieces named by tensor and by element ranges of the whole tensor: a tensor-parallel
// shard is a set of runs of the whole tensor (CheckpointTensor::runs), a ZeRO rank's
// data-parallel range a part of those, a pipeline stage a set of whole tensors.
// Elements several ranks hold are saved once: a slice marked dp_replicated by the
// rank whose part says saves_dp_replicated, a tensor with saved_here false by none
// of the others.
//
// On disk:
//   DIR/LATEST                    "step-00000100" and its CRC32C: the commit point
//   DIR/step-00000100/MANIFEST    text: step, model, what saved it, every tensor's
//                                 full shape, every rank file's size, and a CRC32C
//                                 of the lines above it
//   DIR/step-00000100/rank-00003.bin   magic | index of pieces (name, whole-tensor
//                                 range, CRC32C) | payload (master, m, v per piece)
// A save is atomic: every file is written under a temporary name, fsynced and
// renamed (core/atomic_file.h); only after every rank's file is durable (an agreement
// over the world communicator, so one rank's failure is every rank's error, never a
// hang) does rank 0 write the manifest and swing LATEST. A crash at any moment leaves
// the previous checkpoint loadable. Older step directories beyond `keep` are removed
// after the commit.
//
// Example (every rank):
//   CheckpointMeta meta{.step = 100, .model = {{"hidden", "64"}, {"layers", "4"}}};
//   LOOM_RETURN_IF_ERROR(SaveCheckpoint("/ckpt/run1", meta,
//       {tensors, /*saves_dp_replicated=*/dp_rank == 0, std::move(slices)}, world));
//   // later, on any other mesh, with that mesh's runs:
//   LOOM_ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open("/ckpt/run1"));
//   LOOM_RETURN_IF_ERROR(reader.CheckModel({{"hidden", "128"}, {"layers", "4"}}));
//   //   FailedPrecondition: "the checkpoint's model has hidden 64, this job's 128"
//   StateSource source = reader.SourceFor(tensors);   // fills any range of a shard
//   reader.meta().step;                               // 100: the next step is 101
//
// Ranks must see one file system at DIR (a local disk for one host). One job at a
// time may save to a DIR.
#ifndef LOOM_CHECKPOINT_SHARDED_CHECKPOINT_H_
#define LOOM_CHECKPOINT_SHARDED_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "checkpoint/optimizer_state.h"
#include "collectives/communicator.h"

namespace loom {

// TensorRun: `length` consecutive elements of a rank's shard, starting at element
// `full_offset` of the whole (row-major) tensor.
struct TensorRun {
  int64_t full_offset = 0;
  int64_t length = 0;
};

// CheckpointTensor: one tensor (a parameter) of a rank's state as the checkpoint
// sees it: its name, its whole shape, and where the rank's shard lies in it (runs
// in shard order, covering the shard). saved_here false: another rank holding the
// same elements saves them (a tensor-parallel replica on tp rank > 0).
struct CheckpointTensor {
  std::string name;
  std::vector<int64_t> full_shape;
  std::vector<TensorRun> runs;
  bool saved_here = true;
};

// The model, as "name=value" fields the manifest records and a loader compares
// (CheckModel), e.g. {{"vocab", "64"}, {"hidden", "64"}, ...}. Names and values
// are words: no spaces, no '='.
using ModelFields = std::vector<std::pair<std::string, std::string>>;

// CheckpointMeta: what the manifest says besides the tensors.
struct CheckpointMeta {
  int64_t step = 0;  // optimizer steps done; a resumed job continues at step + 1
  ModelFields model;
  // What saved it, e.g. "dp=2 tp=2 pp=2 zero=3": informational, any mesh may load it.
  std::string saved_by;
  uint64_t data_seed = 0;
};

// RankCheckpointPart: what one rank contributes to a save.
struct RankCheckpointPart {
  std::vector<CheckpointTensor> tensors;  // StateSlice::param indexes these
  bool saves_dp_replicated = false;       // e.g. dp rank 0
  std::vector<StateSlice> slices;
};

struct CheckpointOptions {
  int keep = 2;  // committed checkpoints to keep, >= 1
  // Test hook, never set in production: called after each checkpoint file is
  // written (under its temporary name, before the rename) with that name. A non-OK
  // return fails the save as the write's error would; a test may also kill the
  // process from it to simulate a crash during a save.
  std::function<absl::Status(absl::string_view temp_path)> testing_after_write;
};

// SaveCheckpoint saves `part` of every rank of `world` as the checkpoint of
// meta.step in `dir` (created if missing; its parent must exist) and commits it.
// Collective over `world`; the same status on every rank. InvalidArgument for bad
// input (keep, slices outside their tensors); FailedPrecondition if meta.step is
// already committed there; the file system's error naming the call and the path.
absl::Status SaveCheckpoint(const std::string& dir, const CheckpointMeta& meta,
                            const RankCheckpointPart& part, Communicator& world,
                            const CheckpointOptions& options = {});

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
  // CheckModel: FailedPrecondition naming the first field of `model` whose value
  // differs from the checkpoint's (or that the checkpoint lacks), with both values.
  absl::Status CheckModel(const ModelFields& model) const;
  // SourceFor fills a loading rank's state from the checkpoint: StateSource's
  // `param` indexes `tensors` (the loading rank's, with its own runs). Its errors:
  // FailedPrecondition for a tensor the checkpoint lacks or has in another full
  // shape; DataLoss for a piece whose CRC32C fails or elements no file holds. The
  // source must not outlive the reader.
  StateSource SourceFor(std::vector<CheckpointTensor> tensors) const;

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

#endif  // LOOM_CHECKPOINT_SHARDED_CHECKPOINT_H_
