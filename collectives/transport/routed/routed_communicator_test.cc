// The Communicator over routed gloo+shm endpoints (processes; two ranks a host, or
// ranks alternating between two hosts): every algorithm of the main collectives at
// the suite's counts (collectives/internal/communicator_suite.h: 0, 1, 3, n-1, 1000,
// 65537, in and out of place, f32 and bf16, seeded inputs checked against the
// reference), so each algorithm's steps run over both transports at once.
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/collective_kind.h"
#include "collectives/communicator.h"
#include "collectives/internal/communicator_suite.h"
#include "collectives/transport/routed/routed_harness.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

// Wraps a harness endpoint (owned by the harness) for Communicator::Create.
std::shared_ptr<Transport> Borrow(Transport& transport) {
  return std::shared_ptr<Transport>(&transport, [](Transport*) {});
}

// (world, alternating hosts, collective)
using Case = std::tuple<int, bool, CollectiveKind>;

class RoutedCommunicatorTest : public ::testing::TestWithParam<Case> {};

TEST_P(RoutedCommunicatorTest, EveryAlgorithmAndCountMatchesTheReference) {
  const auto world = std::get<0>(GetParam());
  const auto alternating = std::get<1>(GetParam());
  const auto kind = std::get<2>(GetParam());
  const std::vector<absl::Status> results =
      MakeRoutedShmGlooHarness(alternating ? HostOf(Alternating) : HostOf(BlocksOfTwo),
                               ShmOptions::CopyMode::kStaged)()
          ->Run(world, [&](Transport& t) -> absl::Status {
            if (t.name() != "gloo+shm") return absl::InternalError(t.name());
            LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                                  Communicator::Create(Borrow(t)));
            return collectives_internal::CheckEveryAlgorithmAndCount(*comm, kind);
          });
  for (int r = 0; r < world; ++r) EXPECT_THAT(results[r], IsOk()) << "rank " << r;
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (CollectiveKind kind : collectives_internal::SuiteKinds()) {
    cases.emplace_back(3, false, kind);
    cases.emplace_back(4, false, kind);
    cases.emplace_back(4, true, kind);
  }
  return cases;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return absl::StrCat(CollectiveKindName(std::get<2>(info.param)), "_world",
                      std::get<0>(info.param), std::get<1>(info.param) ? "_alternating" : "_blocks");
}

INSTANTIATE_TEST_SUITE_P(Worlds, RoutedCommunicatorTest, ::testing::ValuesIn(Cases()), CaseName);

}  // namespace
}  // namespace loom
