#include "collectives/transport/inproc/inproc_transport.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/transport/inproc/inproc_harness.h"
#include "collectives/transport/transport_conformance.h"
#include "collectives/transport/transport_harness.h"
#include "core/cpu_features.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

INSTANTIATE_TEST_SUITE_P(Inproc, TransportConformanceTest,
                         ::testing::Combine(::testing::Values(TransportHarnessFactory(MakeInprocHarness)),
                                            ::testing::Values(1, 2, 3, 5, 8, 16)),
                         [](const auto& param_info) {
                           return absl::StrCat("world", std::get<1>(param_info.param));
                         });

TEST(InprocGroupTest, RejectsBadSizesAndRanks) {
  EXPECT_THAT(InprocGroup::Create(0), StatusIs(absl::StatusCode::kInvalidArgument,
                                               HasSubstr("inproc group size 0 is not in [1, 4096]")));
  InprocOptions options;
  options.spin_iterations = -1;
  EXPECT_THAT(InprocGroup::Create(2, options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("spin_iterations=-1")));
  options.spin_iterations = 10;
  options.host_threads = -2;
  EXPECT_THAT(InprocGroup::Create(2, options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("host_threads=-2")));
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> group, InprocGroup::Create(2));
  EXPECT_THAT(group->Endpoint(2), StatusIs(absl::StatusCode::kOutOfRange,
                                           HasSubstr("rank 2 is outside the inproc group of 2")));
  LOOM_EXPECT_OK(group->Endpoint(1));
  EXPECT_THAT(group->Endpoint(1), StatusIs(absl::StatusCode::kFailedPrecondition,
                                           HasSubstr("endpoint of rank 1 was already taken")));
}

// Waiters spin only while every busy thread has a CPU: a group (or the threads
// named by host_threads) larger than the CPUs blocks at once, and still works.
TEST(InprocGroupTest, OversubscribedGroupsBlockInsteadOfSpinning) {
  const int cpus = UsableCpus();
  ASSERT_GE(cpus, 1);
  InprocOptions options;
  options.spin_iterations = 100;
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> fits, InprocGroup::Create(1, options));
  EXPECT_EQ(fits->spin_iterations(), 100);
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> large,
                            InprocGroup::Create(cpus + 1, options));
  EXPECT_EQ(large->spin_iterations(), 0);
  options.host_threads = cpus + 1;
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> crowded,
                            InprocGroup::Create(1, options));
  EXPECT_EQ(crowded->spin_iterations(), 0);
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Transport> endpoint, crowded->Endpoint(0));
  std::vector<int> out = {7}, in = {0};
  LOOM_ASSERT_OK_AND_ASSIGN(Request s, endpoint->Send(0, 1, AsBytes(out)));
  LOOM_ASSERT_OK_AND_ASSIGN(Request r, endpoint->Recv(0, 1, AsWritableBytes(in)));
  LOOM_EXPECT_OK(endpoint->Wait({s, r}, absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(in[0], 7);
}

TEST(InprocGroupTest, EndpointsOutliveTheGroupHandle) {
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> group, InprocGroup::Create(1));
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Transport> endpoint, group->Endpoint(0));
  group.reset();
  std::vector<int> out = {42}, in = {0};
  LOOM_ASSERT_OK_AND_ASSIGN(Request s, endpoint->Send(0, 1, AsBytes(out)));
  LOOM_ASSERT_OK_AND_ASSIGN(Request r, endpoint->Recv(0, 1, AsWritableBytes(in)));
  LOOM_EXPECT_OK(endpoint->Wait({s, r}, absl::Now() + absl::Seconds(5)));
  EXPECT_EQ(in[0], 42);
  EXPECT_EQ(endpoint->name(), "inproc");
}

}  // namespace
}  // namespace loom
