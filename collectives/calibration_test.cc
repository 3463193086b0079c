#include "collectives/calibration.h"

#include <memory>
#include <thread>
#include <vector>

#include "collectives/transport/inproc/inproc_transport.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

// Four thread ranks calibrate; all end with rank 0's constants, positive and
// finite, and a model that round-trips through its text form.
TEST(CalibrationTest, EveryRankGetsTheSameMeasuredModel) {
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> group, InprocGroup::Create(4));
  std::vector<absl::StatusOr<CostModel>> models(4, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<Transport>> endpoint = group->Endpoint(r);
      if (!endpoint.ok()) { models[r] = endpoint.status(); return; }
      CommunicatorOptions options;
      options.ranks_per_node = 2;
      absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(std::move(*endpoint), options);
      if (!comm.ok()) { models[r] = comm.status(); return; }
      CalibrationOptions calibration;
      calibration.latency_round_trips = 20;
      calibration.bandwidth_bytes = 1 << 20;
      calibration.bandwidth_round_trips = 3;
      models[r] = Calibrate(**comm, calibration);
    });
  }
  for (auto& thread : threads) thread.join();
  for (int r = 0; r < 4; ++r) ASSERT_THAT(models[r], IsOk()) << r;
  for (int r = 1; r < 4; ++r) EXPECT_EQ(models[r]->Serialize(), models[0]->Serialize());
  const CostModel::Constants& c = models[0]->constants();
  // Measured, not the defaults: a default constant surviving would mean a
  // measurement did not happen.
  const CostModel::Constants defaults = CostModel::Default().constants();
  EXPECT_NE(c.alpha, defaults.alpha);
  EXPECT_NE(c.beta, defaults.beta);
  EXPECT_NE(c.gamma, defaults.gamma);
  EXPECT_NE(c.inter_node_alpha, defaults.inter_node_alpha);
  LOOM_ASSERT_OK_AND_ASSIGN(CostModel parsed, CostModel::Parse(models[0]->Serialize()));
  EXPECT_EQ(parsed.Serialize(), models[0]->Serialize());
}

}  // namespace
}  // namespace loom
