// //tools:train's command line: the flags (defined here, so that the binary and the
// tests of the command line share them), read into a checked TrainCommand, and the
// usage text, generated from the flags themselves.
//
//   absl::SetProgramUsageMessage(TrainUsage());
//   ... parse the flags ...
//   LOOM_ASSIGN_OR_RETURN(TrainCommand command, TrainCommandFromFlags(argc, argv));
//   // --pp=0: InvalidArgument "--dp 2 --pp 0 --cp 1 --tp 2: each must be >= 1"
#ifndef LOOM_TOOLS_TRAINING_TRAIN_FLAGS_H_
#define LOOM_TOOLS_TRAINING_TRAIN_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "tools/training/train_command.h"

namespace loom {

// TrainCommandFromFlags reads every flag, applies --plan (the planner's choice
// replaces the mesh, stage, schedule and batching; `argc`/`argv` tell which flags
// the user gave, which --plan refuses), chooses --cp_comm auto, and runs
// ValidateTrainJob: each bad value is one InvalidArgument line naming the flag. It
// reads files the flags name (--cost_model, --plan_calibration, --offload_config's
// directories) but starts nothing.
absl::StatusOr<TrainCommand> TrainCommandFromFlags(int argc, char** argv);

// TrainUsage: the one-paragraph synopsis followed by every flag of this file as
// "--name=default", grouped as the flags are declared.
std::string TrainUsage();

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_TRAIN_FLAGS_H_
