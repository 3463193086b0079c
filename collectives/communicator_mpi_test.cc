// The Communicator over the MPI transport: ranks are the processes of an mpirun job
// (4 of them; the test starts mpirun itself). The gloo-style suite on worlds 2..4,
// every algorithm of the main collectives plus MPI's own (Algorithm::kNative), and
// on an emulated two-node layout (2 ranks per "node") so that the hierarchical
// algorithm runs its three phases: over MPI alone, and with Loom's shm transport
// inside each "node" (ConnectNodeShmTransport) and MPI across.
#include <mpi.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/calibration.h"
#include "collectives/communicator.h"
#include "collectives/internal/communicator_suite.h"
#include "collectives/internal/mismatch_suite.h"
#include "collectives/transport/mpi/mpi_harness.h"
#include "collectives/transport/mpi/mpi_transport.h"
#include "collectives/transport/mpi/node_shm.h"
#include "core/sanitizers.h"
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

// The two-level options of the whole job (4 ranks): `per_node` ranks per emulated
// node, Loom's shm transport among them.
absl::StatusOr<CommunicatorOptions> TwoLevelOptions(int per_node) {
  CommunicatorOptions options;
  options.ranks_per_node = per_node;
  LOOM_ASSIGN_OR_RETURN(options.node_transport, ConnectNodeShmTransport(MPI_COMM_WORLD, per_node));
  return options;
}

enum class Inside { kMpi, kShm };

// (world, ranks per node (0: one node), what the nodes' phases run over, collective).
using Case = std::tuple<int, int, Inside, CollectiveKind>;

class MpiCommunicatorTest : public ::testing::TestWithParam<Case> {};

TEST_P(MpiCommunicatorTest, EveryAlgorithmAndCountMatchesTheReference) {
  // Named copies, not a structured binding: clang 14 cannot capture those in lambdas.
  const auto world = std::get<0>(GetParam());
  const auto per_node = std::get<1>(GetParam());
  const auto inside = std::get<2>(GetParam());
  const auto kind = std::get<3>(GetParam());
  ASSERT_TRUE(inside == Inside::kMpi || world == MpiWorldSize());
  MpiHarness harness;
  const std::vector<absl::Status> results = harness.Run(world, [&](Transport& t) -> absl::Status {
    CommunicatorOptions options;
    options.ranks_per_node = per_node;
    if (inside == Inside::kShm) {
      LOOM_ASSIGN_OR_RETURN(options, TwoLevelOptions(per_node));
      if (options.node_transport->name() != "shm") {
        return absl::InternalError(absl::StrCat("node transport ", options.node_transport->name()));
      }
    }
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                          Communicator::Create(Borrow(t), options));
    const Algorithm native[] = {Algorithm::kNative};
    return collectives_internal::CheckEveryAlgorithmAndCount(*comm, kind, native);
  });
  for (int r = 0; r < world; ++r) EXPECT_THAT(results[r], IsOk()) << "rank " << r;
}

// Every pair of 14 calls of equal size on 2 of the job's processes (a fresh endpoint
// each): both fail at once (well under a second; the deadline is 60 s), each naming
// both calls.
TEST(MpiMismatchTest, EveryMismatchFailsAtOnceOnBothRanksNamingBothCalls) {
  MpiHarness harness;
  EXPECT_THAT(collectives_internal::CheckEveryMismatchFailsAtOnce(harness), IsOk());
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (CollectiveKind kind : collectives_internal::SuiteKinds()) {
    for (const auto& [world, per_node] : {std::pair{2, 0}, {3, 0}, {4, 0}, {4, 2}}) {
      cases.emplace_back(world, per_node, Inside::kMpi, kind);
    }
  }
  // Only all-reduce has a hierarchical algorithm, the one user of the node transport.
  cases.emplace_back(4, 2, Inside::kShm, CollectiveKind::kAllReduce);
  return cases;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  const int world = std::get<0>(info.param);
  const int per_node = std::get<1>(info.param);
  return absl::StrCat(CollectiveKindName(std::get<3>(info.param)), "_world", world,
                      per_node > 0 ? absl::StrCat("_", per_node, "pernode") : std::string(),
                      std::get<2>(info.param) == Inside::kShm ? "_shm_inside" : "");
}

INSTANTIATE_TEST_SUITE_P(Worlds, MpiCommunicatorTest, ::testing::ValuesIn(Cases()), CaseName);

// Buffers from AllocateBuffer over MPI: ordinary memory (zero_copy false), on every
// rank and on every other rank.
TEST(MpiAllocatedBufferTest, CollectivesOverAllocatedBuffersMatchTheReference) {
  // Without zero copy both runs take the same paths; a sanitizer build runs the mixed
  // one only.
  for (bool mixed : kUnderSanitizer ? std::vector<bool>{true} : std::vector<bool>{false, true}) {
    MpiHarness harness;
    const std::vector<absl::Status> results = harness.Run(3, [&](Transport& t) -> absl::Status {
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, Communicator::Create(Borrow(t)));
      return collectives_internal::CheckAllocatedBuffers(*comm, mixed, /*expect_zero_copy=*/false);
    });
    for (int r = 0; r < 3; ++r) EXPECT_THAT(results[r], IsOk()) << "mixed " << mixed << " rank " << r;
  }
}

// The node layout from MPI: one host holds all four ranks; an override emulates
// smaller nodes, and one that does not divide the ranks is refused by value.
TEST(MpiRanksPerNodeTest, FindsTheHostAndTakesOverrides) {
  EXPECT_THAT(MpiRanksPerNode(MPI_COMM_WORLD), IsOkAndHolds(4));
  EXPECT_THAT(MpiRanksPerNode(MPI_COMM_WORLD, 2), IsOkAndHolds(2));
  EXPECT_THAT(MpiRanksPerNode(MPI_COMM_WORLD, 3),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("3 does not divide the 4")));
}

// The node transport is what the hierarchical algorithm's intra-node phases run
// over: once it is aborted, the ring (MPI only) still works and hierarchical fails
// with the abort's reason. Split children that are whole nodes keep it.
TEST(MpiTwoLevelTest, HierarchicalRunsItsNodePhasesOverTheNodeTransport) {
  MpiHarness harness;
  const std::vector<absl::Status> results = harness.Run(4, [&](Transport& t) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(CommunicatorOptions options, TwoLevelOptions(2));
    options.timeout = absl::Seconds(30);
    std::shared_ptr<Transport> node = options.node_transport;
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                          Communicator::Create(Borrow(t), options));
    const int rank = comm->rank();
    std::vector<int32_t> data = {rank + 1, 10 * rank};
    CallOptions hierarchical;
    hierarchical.algorithm = Algorithm::kHierarchical;
    LOOM_RETURN_IF_ERROR(comm->AllReduce(absl::MakeSpan(data), ReduceOp::kSum, hierarchical));
    if (data != std::vector<int32_t>{10, 60}) {
      return absl::InternalError(absl::StrCat("hierarchical sum ", data[0], ",", data[1]));
    }
    const int whole[] = {2, 3, 0, 1};
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> swapped, comm->Split(whole));
    const int one_per_node[2][2] = {{0, 2}, {1, 3}};
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> across,
                          comm->Split(absl::MakeConstSpan(one_per_node[rank % 2])));
    if (swapped->options().node_transport != node || across->options().node_transport != nullptr) {
      return absl::InternalError("split children keep the node transport wrongly");
    }

    node->Abort(absl::AbortedError("node transport closed by the test"));
    CallOptions ring;
    ring.algorithm = Algorithm::kRing;
    LOOM_RETURN_IF_ERROR(comm->AllReduce(absl::MakeSpan(data), ReduceOp::kSum, ring));
    if (data != std::vector<int32_t>{40, 240}) {
      return absl::InternalError(absl::StrCat("ring sum ", data[0], ",", data[1]));
    }
    return comm->AllReduce(absl::MakeSpan(data), ReduceOp::kSum, hierarchical);
  });
  // A rank whose hierarchical call fails aborts its communicator, the MPI transport
  // included; a rank still in its ring step then fails there, with Unavailable
  // naming the aborted peer. Either way every rank fails, and at least one with the
  // node transport's own error.
  int node_errors = 0;
  for (int r = 0; r < 4; ++r) {
    EXPECT_THAT(results[r],
                ::testing::AnyOf(StatusIs(absl::StatusCode::kAborted,
                                          HasSubstr("node transport closed by the test")),
                                 StatusIs(absl::StatusCode::kUnavailable, HasSubstr("aborted"))))
        << "rank " << r;
    if (results[r].code() == absl::StatusCode::kAborted) ++node_errors;
  }
  EXPECT_GT(node_errors, 0);
}

// A node transport must be this rank's place in its node; anything else is refused
// by value before any message.
TEST(MpiTwoLevelTest, RefusesANodeTransportThatDoesNotFit) {
  MpiHarness harness;
  const std::vector<absl::Status> results = harness.Run(4, [&](Transport& t) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(CommunicatorOptions options, TwoLevelOptions(2));
    options.ranks_per_node = 4;
    return Communicator::Create(Borrow(t), options).status();
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_THAT(results[r], StatusIs(absl::StatusCode::kInvalidArgument,
                                     HasSubstr("at 4 ranks per node (it must be rank")))
        << "rank " << r;
  }
}

// Calibration prices the two levels separately: alpha and beta over the node
// transport, the inter-node constants over MPI; every rank ends with rank 0's.
TEST(MpiTwoLevelTest, CalibratesBothLevels) {
  MpiHarness harness;
  const std::vector<absl::Status> results = harness.Run(4, [&](Transport& t) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(CommunicatorOptions options, TwoLevelOptions(2));
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                          Communicator::Create(Borrow(t), options));
    CalibrationOptions calibration;
    calibration.latency_round_trips = 20;
    calibration.bandwidth_bytes = 1 << 20;
    calibration.bandwidth_round_trips = 3;
    LOOM_ASSIGN_OR_RETURN(CostModel model, Calibrate(*comm, calibration));
    const CostModel::Constants& c = model.constants();
    // Every rank checks it holds the same constants as rank 0.
    std::vector<double> mine = {c.alpha, c.beta, c.inter_node_alpha, c.inter_node_beta};
    std::vector<double> root = mine;
    LOOM_RETURN_IF_ERROR(comm->Broadcast(absl::MakeSpan(root), 0));
    if (mine != root) return absl::InternalError("ranks hold different constants");
    const CostModel::Constants defaults = CostModel::Default().constants();
    if (c.alpha == defaults.alpha || c.inter_node_alpha == defaults.inter_node_alpha) {
      return absl::InternalError("a level kept its default constants");
    }
    return absl::OkStatus();
  });
  for (int r = 0; r < 4; ++r) EXPECT_THAT(results[r], IsOk()) << "rank " << r;
}

// One endpoint per color, ranked by key, as a job connects the lines of a mesh
// dimension: {0, 2} and {1, 3}, each summing its own members' ranks.
TEST(MpiSplitTest, ConnectsOneGroupPerColor) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  absl::StatusOr<std::unique_ptr<Transport>> line =
      ConnectMpiTransportSplit(MPI_COMM_WORLD, rank % 2, rank);
  ASSERT_THAT(line, IsOk());
  EXPECT_EQ((*line)->size(), 2);
  EXPECT_EQ((*line)->rank(), rank / 2);
  std::shared_ptr<Transport> shared = std::move(*line);
  absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(shared);
  ASSERT_THAT(comm, IsOk());
  std::vector<int64_t> value = {rank};
  ASSERT_THAT((*comm)->AllReduce(absl::MakeSpan(value), ReduceOp::kSum), IsOk());
  EXPECT_EQ(value[0], rank % 2 == 0 ? 0 + 2 : 1 + 3);
  EXPECT_THAT(ConnectMpiTransportSplit(MPI_COMM_WORLD, -1, rank),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("color -1 is negative")));
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

// Calibration with curves measures every candidate, MPI's own collectives too, on
// the communicator itself, the same on every rank; auto then runs native where its
// curve says it is faster, and never on a deterministic communicator (whose
// calibration measures no native curve).
TEST(MpiNativeTest, CalibrationPricesNativeAndAutoChoosesItWhereFaster) {
  MpiHarness harness;
  const std::vector<absl::Status> results = harness.Run(3, [&](Transport& t) -> absl::Status {
    std::shared_ptr<Transport> shared = Borrow(t);
    CalibrationOptions calibration;
    calibration.latency_round_trips = 10;
    calibration.bandwidth_bytes = 64 << 10;
    calibration.bandwidth_round_trips = 2;
    calibration.curve_sizes = {4 << 10, 256 << 10};
    calibration.curve_batch_seconds = 0.001;
    CostModel model = CostModel::Default();
    {
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, Communicator::Create(shared));
      if (!comm->HasNative()) return absl::InternalError("the MPI transport has no native");
      LOOM_ASSIGN_OR_RETURN(model, Calibrate(*comm, calibration));
      for (CollectiveKind kind : {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter,
                                  CollectiveKind::kAllGather, CollectiveKind::kBroadcast}) {
        for (Algorithm algorithm : {Algorithm::kNative, Algorithm::kRing}) {
          const auto curve = model.curve(kind, algorithm, 3, 0);
          if (curve.size() != 2 || curve[0].first != 4096 || curve[1].first != 262144 ||
              !(curve[0].second > 0) || !(curve[1].second > 0)) {
            return absl::InternalError(absl::StrCat("curve of ", AlgorithmName(algorithm), " ",
                                                    CollectiveKindName(kind), ": ",
                                                    model.Serialize()));
          }
        }
      }
      std::vector<double> mine = {
          model.curve(CollectiveKind::kAllReduce, Algorithm::kNative, 3, 0)[0].second,
          model.curve(CollectiveKind::kBroadcast, Algorithm::kRing, 3, 0)[1].second};
      std::vector<double> root = mine;
      LOOM_RETURN_IF_ERROR(comm->Broadcast(absl::MakeSpan(root), 0));
      if (mine != root) return absl::InternalError("ranks hold different native curves");
    }
    // A native all-reduce a thousand times faster than Loom's best prediction.
    const double loom_best =
        model.Explain(CollectiveKind::kAllReduce, 4096, 3, 0).predictions.front().second;
    LOOM_RETURN_IF_ERROR(model.SetCurve(CollectiveKind::kAllReduce, Algorithm::kNative, 3, 0,
                                        {{1024, loom_best / 4000}, {4096, loom_best / 1000}}));
    for (const bool deterministic : {false, true}) {
      CommunicatorOptions options;
      options.cost_model = model;
      options.deterministic = deterministic;
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                            Communicator::Create(shared, options));
      const Algorithm chosen = comm->Explain(CollectiveKind::kAllReduce, 4096).chosen;
      if ((chosen == Algorithm::kNative) == deterministic) {
        return absl::InternalError(absl::StrCat("deterministic ", deterministic, ": auto chose ",
                                                AlgorithmName(chosen)));
      }
      std::vector<float> data(1024, static_cast<float>(comm->rank() + 1));
      LOOM_RETURN_IF_ERROR(comm->AllReduce(absl::MakeSpan(data), ReduceOp::kSum));
      for (float x : data) {
        if (x != 6.0f) return absl::InternalError(absl::StrCat("sum ", x, ", expected 6"));
      }
      const std::vector<FlightRecord> calls = comm->FlightRecorderSnapshot();
      if (calls.empty() || calls.back().algorithm != chosen) {
        return absl::InternalError("the call did not run the chosen algorithm");
      }
      if (deterministic) {
        LOOM_ASSIGN_OR_RETURN(CostModel measured, Calibrate(*comm, calibration));
        if (!measured.curve(CollectiveKind::kAllReduce, Algorithm::kNative, 3, 0).empty() ||
            measured.curve(CollectiveKind::kAllReduce, Algorithm::kRing, 3, 0).empty()) {
          return absl::InternalError(absl::StrCat(
              "a deterministic communicator measures Loom's curves, not native: ",
              measured.Serialize()));
        }
      }
    }
    return absl::OkStatus();
  });
  for (int r = 0; r < 3; ++r) EXPECT_THAT(results[r], IsOk()) << "rank " << r;
}

}  // namespace
}  // namespace loom
