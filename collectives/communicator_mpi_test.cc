// The Communicator over the MPI transport: ranks are the processes of an mpirun job
// (4 of them; the test starts mpirun itself). The gloo-style suite on worlds 2..4,
// every algorithm of the main collectives plus MPI's own (Algorithm::kNative), and
// on an emulated two-node layout (2 ranks per "node") so that the hierarchical
// algorithm runs its three phases.
#include <mpi.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/communicator.h"
#include "collectives/internal/communicator_suite.h"
#include "collectives/transport/mpi/mpi_harness.h"
#include "collectives/transport/mpi/mpi_transport.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<Transport> Borrow(Transport& transport) {
  return std::shared_ptr<Transport>(&transport, [](Transport*) {});
}

// (world, ranks per node (0: one node), collective).
class MpiCommunicatorTest
    : public ::testing::TestWithParam<std::tuple<int, int, CollectiveKind>> {};

TEST_P(MpiCommunicatorTest, EveryAlgorithmAndCountMatchesTheReference) {
  const auto [world, per_node, kind] = GetParam();
  MpiHarness harness;
  const std::vector<absl::Status> results = harness.Run(world, [&](Transport& t) -> absl::Status {
    CommunicatorOptions options;
    options.ranks_per_node = per_node;
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                          Communicator::Create(Borrow(t), options));
    const Algorithm native[] = {Algorithm::kNative};
    return collectives_internal::CheckEveryAlgorithmAndCount(*comm, kind, native);
  });
  for (int r = 0; r < world; ++r) EXPECT_THAT(results[r], IsOk()) << "rank " << r;
}

std::vector<std::tuple<int, int, CollectiveKind>> Cases() {
  std::vector<std::tuple<int, int, CollectiveKind>> cases;
  for (CollectiveKind kind : collectives_internal::SuiteKinds()) {
    for (const auto& [world, per_node] : {std::pair{2, 0}, {3, 0}, {4, 0}, {4, 2}}) {
      cases.emplace_back(world, per_node, kind);
    }
  }
  return cases;
}

std::string CaseName(const ::testing::TestParamInfo<std::tuple<int, int, CollectiveKind>>& info) {
  const int world = std::get<0>(info.param);
  const int per_node = std::get<1>(info.param);
  return absl::StrCat(CollectiveKindName(std::get<2>(info.param)), "_world", world,
                      per_node > 0 ? absl::StrCat("_", per_node, "pernode") : std::string());
}

INSTANTIATE_TEST_SUITE_P(Worlds, MpiCommunicatorTest, ::testing::ValuesIn(Cases()), CaseName);

// The node layout from MPI: one host holds all four ranks; an override emulates
// smaller nodes, and one that does not divide the ranks is refused by value.
TEST(MpiRanksPerNodeTest, FindsTheHostAndTakesOverrides) {
  EXPECT_THAT(MpiRanksPerNode(MPI_COMM_WORLD), IsOkAndHolds(4));
  EXPECT_THAT(MpiRanksPerNode(MPI_COMM_WORLD, 2), IsOkAndHolds(2));
  EXPECT_THAT(MpiRanksPerNode(MPI_COMM_WORLD, 3),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("3 does not divide the 4")));
}

// Native collectives refuse what MPI cannot promise, by name.
TEST(MpiNativeTest, RefusesDeterministicMode) {
  MpiHarness harness;
  const std::vector<absl::Status> results = harness.Run(2, [&](Transport& t) -> absl::Status {
    CommunicatorOptions options;
    options.deterministic = true;
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                          Communicator::Create(Borrow(t), options));
    std::vector<float> data(8, 1.0f);
    CallOptions call;
    call.algorithm = Algorithm::kNative;
    return comm->AllReduce(absl::MakeSpan(data), ReduceOp::kSum, call);
  });
  for (const absl::Status& status : results) {
    EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("no reduction order")));
  }
}

}  // namespace
}  // namespace loom
