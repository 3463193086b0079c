// Test helpers of tools/training (testonly): a job's final parameters in a form
// that compares across meshes and schedules.
#ifndef LOOM_TOOLS_TRAINING_INTERNAL_SUMMARY_TESTING_H_
#define LOOM_TOOLS_TRAINING_INTERNAL_SUMMARY_TESTING_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tools/training/train_options.h"

namespace loom {
namespace training_testing {

// ByName returns every parameter's final values keyed by (tp rank, name); the
// data-parallel replicas must agree.
inline std::map<std::pair<int, std::string>, std::vector<float>> ByName(const TrainSummary& summary) {
  std::map<std::pair<int, std::string>, std::vector<float>> out;
  for (const RankParameters& rank : summary.final_params) {
    for (size_t i = 0; i < rank.params.size(); ++i) {
      const auto key = std::make_pair(rank.tp_rank, rank.params[i].name);
      const auto [it, inserted] = out.emplace(key, rank.values[i]);
      if (!inserted) {
        EXPECT_EQ(it->second, rank.values[i]) << rank.params[i].name << ": replicas differ";
      }
    }
  }
  return out;
}

// RankValues returns every rank's final values, rank after rank, parameter after
// parameter: equal on two jobs that stepped to the same bits on one mesh.
inline std::vector<std::vector<float>> RankValues(const TrainSummary& summary) {
  std::vector<std::vector<float>> out;
  for (const RankParameters& rank : summary.final_params) {
    out.insert(out.end(), rank.values.begin(), rank.values.end());
  }
  return out;
}

// SmallJob: the job's default mesh and model (dp 2, tp 2, pp 2, zero 3, cpu
// offload, hidden 64) for `steps` steps. SmallPlainJob: plain data parallelism
// (zero 0, the optimizer in memory) on dp 2 x pp 2, tp 1, the baseline the ZeRO
// stages are held to bitwise.
inline TrainJobOptions SmallJob(int64_t steps) {
  TrainJobOptions options;
  options.steps = steps;
  return options;
}
inline TrainJobOptions SmallPlainJob(int64_t steps) {
  TrainJobOptions options = SmallJob(steps);
  options.tp = 1;
  options.zero = 0;
  options.offload = OffloadKind::kNone;
  return options;
}

}  // namespace training_testing
}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_INTERNAL_SUMMARY_TESTING_H_
