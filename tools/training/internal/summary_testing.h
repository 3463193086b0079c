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

}  // namespace training_testing
}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_INTERNAL_SUMMARY_TESTING_H_
