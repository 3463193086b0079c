// TrainSummaryJson: a run of //tools:train as one JSON object (--summary_json): the
// job's shape and options, its losses and the one-rank reference's, memory and
// traffic per rank with their estimates, throughput and MFU against the measured
// peak, the CPU, and the mean step breakdown. planner::ParseJobSummary reads it back
// (//tools:train --plan_calibration). Written with nlohmann/json: strings are
// escaped by the library, doubles keep every digit, absent figures are null.
//
//   {"final_loss": 2.83, "final_eval_loss": null, "reference_final_loss": 2.83, ...,
//    "dp": 2, "tp": 2, ..., "step_breakdown_s": {"compute": 0.012, ...}}
#ifndef LOOM_TOOLS_TRAINING_SUMMARY_JSON_H_
#define LOOM_TOOLS_TRAINING_SUMMARY_JSON_H_

#include <optional>
#include <string>

#include "tools/training/compute_report.h"
#include "tools/training/reference.h"
#include "tools/training/train_command.h"
#include "tools/training/train_options.h"

namespace loom {

// The document, one line ending in "\n". `reference` is the one-rank comparison
// (nullopt with --nocompare_reference: its keys are null).
std::string TrainSummaryJson(const TrainCommand& command, const TrainSummary& summary,
                             const MfuReport& mfu,
                             const std::optional<ReferenceComparison>& reference);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_SUMMARY_JSON_H_
