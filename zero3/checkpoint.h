// Checkpoint: world-size-independent, atomic, checksummed ZeRO-3 checkpoints.
//
// Every rank of the data-parallel group writes the parameter pieces it owns (its
// Partition::OwnedRange of each parameter, for every state field) to a file of its
// own, and rank 0 commits the set with a manifest. The manifest records pieces in
// the model's own coordinates (parameter index, element range), so a checkpoint
// saved by N ranks with one bucket size loads on M ranks with another: the
// parameter list (names and shapes, in order) is all that must match.
//
// On disk (`dir` holds one committed checkpoint; see README.md, "Checkpoints"):
//   dir/LATEST                          names the committed subdirectory (+ CRC32C)
//   dir/step-00000100/MANIFEST          text: step, fields, params, files, pieces, CRC32C
//   dir/step-00000100/rank-00000-of-00004.bin   header | payload | block CRC32C table
//
// A save is atomic: files are written under temporary names, fsynced and renamed;
// only after every rank reported success (an all-gather of statuses, so a failure
// on one rank is an error on every rank, never a hang) does rank 0 write the
// manifest and then swing LATEST to the new subdirectory (temp, fsync, rename,
// fsync the directory). A crash at any point before that rename leaves the previous
// checkpoint loadable; the older subdirectory is removed only after it.
//
// Example (each rank of a dp group runs this with its own communicator):
//   std::vector<float> param(p.ShardNumel()), exp_avg(...), ...;    // engine state
//   std::vector<float> persistent_param(p.PersistentNumel()), ...;
//   const CheckpointField fields[] = {
//       {"param", param, persistent_param},
//       {"exp_avg", exp_avg, persistent_exp_avg},
//       {"exp_avg_sq", exp_avg_sq, persistent_exp_avg_sq}};
//   LOOM_RETURN_IF_ERROR(SaveCheckpoint("/ckpt/run1", 100, p, fields, dp_comm));
//   // later, on a different dp size or bucket size (same parameter list):
//   const MutableCheckpointField load[] = {{"param", absl::MakeSpan(param2), ...}, ...};
//   LOOM_ASSIGN_OR_RETURN(int64_t step, LoadCheckpoint("/ckpt/run1", p2, load, dp_comm2));
//   // step == 100; every rank holds its new shards, bitwise equal to what was saved
//   LOOM_ASSIGN_OR_RETURN(FullCheckpoint full, ReadFullCheckpoint("/ckpt/run1"));
//   full.fields.at("param");            // the flat, unpadded parameter vector
//   LoadCheckpoint("/ckpt/run1", p_with_other_model, load, dp_comm2);
//   // FailedPrecondition: "LoadCheckpoint(/ckpt/run1): the model does not match the
//   //   checkpoint (3 parameters; the model has 3) at parameter 2: checkpoint has
//   //   "fc.w" [8,8], model has "fc.w" [8,16]"
//
// Ranks must see one shared file system at `dir` (a local disk for one host, NFS or
// Lustre across hosts). Only one save or load of a `dir` may run at a time.
#ifndef LOOM_ZERO3_CHECKPOINT_H_
#define LOOM_ZERO3_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "collectives/communicator.h"
#include "zero3/partition.h"

namespace loom {

// CheckpointField: one state field of this rank (the fp32 master weights, a moment
// of the optimizer), in the layout Partition defines: `sharded` has ShardNumel()
// elements (bucket b's shard at ShardOffset(b); padding is not saved) and
// `persistent` PersistentNumel() elements (the same on every rank; rank 0's copy is
// saved).
struct CheckpointField {
  std::string name;
  absl::Span<const float> sharded;
  absl::Span<const float> persistent;
};

// MutableCheckpointField: a field for LoadCheckpoint to fill, in the same layout.
struct MutableCheckpointField {
  std::string name;
  absl::Span<float> sharded;
  absl::Span<float> persistent;
};

struct CheckpointOptions {
  // Payload bytes covered by one CRC32C: a corrupt byte is reported within a block
  // of this size, and a load reads (and checks) whole blocks. >= 4, a multiple of 4.
  int64_t block_bytes = int64_t{1} << 20;
};

// SaveCheckpoint writes this rank's `fields` (laid out by `partition`) and commits
// the checkpoint of `step` in `dir` (created if missing; its parent must exist),
// replacing the one there. Collective: every rank of `dp` calls it with the same
// dir, step, partition and field names; dp.size() must be the partition's dp_size
// and dp.rank() is this rank. Returns the same code on every rank when any rank
// fails: InvalidArgument for bad input (span sizes, empty or repeated field names,
// block_bytes), naming the values; FailedPrecondition when ranks pass different
// steps, partitions or fields, or dp does not match the partition; the file
// system's error (NotFound, PermissionDenied, ResourceExhausted, ...) naming the call
// and path; ranks other than the failing one name it. On any error the previous
// checkpoint stays committed, unless rank 0 failed after renaming LATEST (fsync of
// `dir` itself failed), when the new one is.
absl::Status SaveCheckpoint(const std::string& dir, int64_t step, const Partition& partition,
                            absl::Span<const CheckpointField> fields, Communicator& dp,
                            const CheckpointOptions& options = {});

// LoadCheckpoint fills this rank's `fields` from the checkpoint committed in `dir`
// and returns its step. `partition` is the new layout: any dp_size (== dp.size()),
// bucket size, alignment or persistence threshold, over the same parameter list.
// Padding elements of `sharded` are set to 0. Checkpoint fields that are not asked
// for are skipped. Collective; the same code on every rank when any rank fails:
// NotFound when `dir` or its LATEST is missing or a field is not in the checkpoint
// (naming the fields it has); InvalidArgument for span sizes or field names;
// FailedPrecondition naming the first parameter whose name or shape differs (or the
// counts); DataLoss naming the file and what failed its check (a CRC32C with its
// block and byte range, a size, a header field) for a corrupt or truncated file.
absl::StatusOr<int64_t> LoadCheckpoint(const std::string& dir, const Partition& partition,
                                       absl::Span<const MutableCheckpointField> fields,
                                       Communicator& dp);

// FullCheckpoint: a whole checkpoint in the model's flat coordinates.
struct FullCheckpoint {
  int64_t step = 0;
  std::vector<ParamSpec> params;    // in order; param i starts at flat offset
                                    // sum of numels of params 0..i-1
  std::vector<std::string> field_names;               // in saved order
  std::map<std::string, std::vector<float>> fields;   // each the flat, unpadded vector
  int saved_dp_size = 0;            // ranks that wrote it
};

// ReadFullCheckpoint reads the checkpoint committed in `dir` in one process, no
// communicator needed (for tests, tools and conversion), checking every CRC32C.
// Errors as LoadCheckpoint's: NotFound, DataLoss. A file of the checkpoint that
// is not a regular file (a FIFO, a device, a directory) is never read from, so
// never waited on: DataLoss naming its path and what it is.
absl::StatusOr<FullCheckpoint> ReadFullCheckpoint(const std::string& dir);

}  // namespace loom

#endif  // LOOM_ZERO3_CHECKPOINT_H_
