// What //tools:train prints around its step lines: the header (mesh, schedule,
// ZeRO, offload, model, the cp layout and --print_mesh's table) and the summary
// after the last step (losses, memory and traffic against topology/memory_estimate,
// the step breakdown, MFU, where the products ran); and the files written after a
// run (--trace, --summary_json).
//
//   LOOM_RETURN_IF_ERROR(PrintTrainHeader(command, world, std::cout));
//   ... the run ...
//   PrintTrainSummary(command, summary, mfu, std::cout);
#ifndef LOOM_TOOLS_TRAINING_TRAIN_REPORT_H_
#define LOOM_TOOLS_TRAINING_TRAIN_REPORT_H_

#include <optional>
#include <ostream>

#include "absl/status/status.h"
#include "tools/training/compute_report.h"
#include "tools/training/reference.h"
#include "tools/training/train_command.h"
#include "tools/training/train_options.h"

namespace loom {

// PrintTrainHeader: the lines before the first step, for a job of `world` ranks.
absl::Status PrintTrainHeader(const TrainCommand& command, int world, std::ostream& out);

// PrintTrainSummary: the lines after the last step (`mfu` from ComputeMfu).
void PrintTrainSummary(const TrainCommand& command, const TrainSummary& summary,
                       const MfuReport& mfu, std::ostream& out);

// PrintReference: the one-rank comparison's line.
void PrintReference(const ReferenceComparison& reference, std::ostream& out);

// WriteTrainFiles writes --trace and --summary_json where given (each atomically,
// named on `out`); the flag and the path name a failure.
absl::Status WriteTrainFiles(const TrainCommand& command, const TrainSummary& summary,
                             const MfuReport& mfu,
                             const std::optional<ReferenceComparison>& reference,
                             std::ostream& out);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_TRAIN_REPORT_H_
