// TrainCommand: what one //tools:train command line asks for, parsed and checked
// (train_flags.h builds it from the flags): the job (TrainJobOptions), how its ranks
// start (TrainLaunchOptions), and what it writes besides its lines (TrainOutputs).
// The launcher (train_launch.h) and the report (train_report.h) read it; neither
// sees a flag.
#ifndef LOOM_TOOLS_TRAINING_TRAIN_COMMAND_H_
#define LOOM_TOOLS_TRAINING_TRAIN_COMMAND_H_

#include <string>

#include "tools/training/train_options.h"

namespace loom {

// The files a run writes and what it prints beyond its step lines.
struct TrainOutputs {
  std::string trace;         // --trace: a Chrome trace of the last step's pipeline
  std::string summary_json;  // --summary_json: the summary (summary_json.h)
  std::string metrics;       // --metrics: one JSON line per step (metrics_log.h)
  std::string plot;          // --plot: the loss curve as SVG (loss_plot.h)
  bool compare_reference = true;  // train on one rank too and report the difference
  bool print_mesh = false;        // every rank's coordinates and groups first
};

struct TrainCommand {
  TrainJobOptions options;
  TrainLaunchOptions launch;
  TrainOutputs outputs;
  // --plan: the planner's choice, printed as the job's first line; empty otherwise.
  std::string plan_line;
  // How options.cp_comm was chosen: "given by --cp_comm" or "auto, <why>".
  std::string cp_comm_why = "given by --cp_comm";
  // --offload_config as given ("" without), echoed in the header in the library's
  // terms with its budgets.
  std::string offload_config;
};

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_TRAIN_COMMAND_H_
