// CheckTrainPaths: before any rank starts, what a //tools:train job will read and
// write on disk: --trace, --summary_json, --metrics and --plot can be opened for
// writing; --checkpoint_dir is a directory this process may write in (or can be
// made); the checkpoint to resume from exists (--resume_from), is readable and holds
// this model; each --nvme_dir is a writable directory. InvalidArgument naming the
// flag, the path and strerror (a damaged checkpoint keeps its own code).
//
//   LOOM_RETURN_IF_ERROR(CheckTrainPaths(command));
//   // --checkpoint_dir=/proc/x: "--checkpoint_dir /proc/x: cannot write in /proc: ..."
#ifndef LOOM_TOOLS_TRAINING_TRAIN_PATHS_H_
#define LOOM_TOOLS_TRAINING_TRAIN_PATHS_H_

#include "absl/status/status.h"
#include "tools/training/train_command.h"

namespace loom {

absl::Status CheckTrainPaths(const TrainCommand& command);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_TRAIN_PATHS_H_
