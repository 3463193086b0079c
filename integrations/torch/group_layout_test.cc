#include "integrations/torch/group_layout.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace pytorch {
namespace {

using ::testing::HasSubstr;

// Ranks on `hosts`, started by mpirun (MPI rank 10 + r) when `mpi`.
std::vector<RankIdentity> OnHosts(const std::vector<std::string>& hosts, bool mpi = false) {
  std::vector<RankIdentity> ranks;
  for (size_t r = 0; r < hosts.size(); ++r) {
    ranks.push_back({hosts[r], hosts[r] + "-name", static_cast<int64_t>(1000 + r),
                     mpi ? static_cast<int>(10 + r) : -1});
  }
  return ranks;
}

TEST(GroupLayoutTest, OneHostIsShmForEveryRank) {
  const std::vector<RankIdentity> ranks = OnHosts({"a", "a", "a"});
  for (int r = 0; r < 3; ++r) {
    LOOM_ASSERT_OK_AND_ASSIGN(GroupLayout layout, PlanGroupLayout(ranks, r, TransportChoice::kAuto));
    EXPECT_FALSE(layout.two_level);
    EXPECT_EQ(layout.hosts, 1);
    EXPECT_EQ(layout.local_rank, r);
    EXPECT_EQ(layout.local_size, 3);
    EXPECT_EQ(layout.Describe(), "shm among 3 ranks on one host");
  }
}

TEST(GroupLayoutTest, ConsecutiveEqualHostsGetTwoLevels) {
  const std::vector<RankIdentity> ranks = OnHosts({"a", "a", "b", "b", "c", "c"});
  LOOM_ASSERT_OK_AND_ASSIGN(GroupLayout layout, PlanGroupLayout(ranks, 3, TransportChoice::kAuto));
  EXPECT_TRUE(layout.two_level);
  EXPECT_EQ(layout.hosts, 3);
  EXPECT_EQ(layout.ranks_per_node, 2);
  EXPECT_EQ(layout.node, 1);
  EXPECT_EQ(layout.local_rank, 1);
  EXPECT_EQ(layout.local_size, 2);
  EXPECT_EQ(layout.Describe(), "gloo between 3 hosts, shm inside each (2 ranks per host, every algorithm)");
  EXPECT_TRUE(layout.routed);
  EXPECT_EQ(layout.node_of_rank, (std::vector<int>{0, 0, 1, 1, 2, 2}));
  EXPECT_FALSE(layout.numbered_by_host);
  EXPECT_EQ(layout.host_ranks, (std::vector<int>{2, 3}));
}

TEST(GroupLayoutTest, InterleavedHostsAreNumberedByHostAndUnevenOnesRouteInsideAHost) {
  // Interleaved, equal hosts: two levels, the Communicator numbers them by host.
  LOOM_ASSERT_OK_AND_ASSIGN(GroupLayout dealt, PlanGroupLayout(OnHosts({"a", "b", "a", "b"}), 1,
                                                               TransportChoice::kAuto));
  EXPECT_EQ(dealt.ranks_per_node, 2);
  EXPECT_EQ(dealt.node_of_rank, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_TRUE(dealt.numbered_by_host);
  EXPECT_TRUE(dealt.routed);
  EXPECT_EQ(dealt.Describe(),
            "gloo between 2 hosts, shm inside each (2 ranks per host, numbered by host, every "
            "algorithm)");
  // Uneven: no node level, numbered, routed.
  for (const std::vector<std::string>& hosts :
       {std::vector<std::string>{"a", "b", "a", "a"}, std::vector<std::string>{"a", "a", "a", "b"}}) {
    const std::vector<RankIdentity> ranks = OnHosts(hosts);
    LOOM_ASSERT_OK_AND_ASSIGN(GroupLayout layout, PlanGroupLayout(ranks, 1, TransportChoice::kAuto));
    EXPECT_TRUE(layout.two_level);
    EXPECT_EQ(layout.ranks_per_node, 0) << hosts[1];
    EXPECT_TRUE(layout.routed);
    EXPECT_EQ(layout.Describe(),
              absl::StrCat("gloo among all ranks (2 hosts of unequal sizes",
                           hosts[1] == "b" ? ", numbered by host" : "",
                           ": shm between two ranks of a host)"));
  }
  // One rank a host: nothing to route.
  LOOM_ASSERT_OK_AND_ASSIGN(GroupLayout single,
                            PlanGroupLayout(OnHosts({"a", "b"}), 1, TransportChoice::kAuto));
  EXPECT_FALSE(single.routed);
  EXPECT_TRUE(single.node_of_rank.empty());  // nothing to number
  EXPECT_THAT(single.Describe(), HasSubstr("no shm level"));
  // Interleaved: rank 2 is the second of host "a", whose ranks are 0 and 2.
  LOOM_ASSERT_OK_AND_ASSIGN(GroupLayout layout,
                       PlanGroupLayout(OnHosts({"a", "b", "a", "b"}), 2, TransportChoice::kAuto));
  EXPECT_EQ(layout.node, 0);
  EXPECT_EQ(layout.local_rank, 1);
  EXPECT_EQ(layout.local_size, 2);
  EXPECT_EQ(layout.host_ranks, (std::vector<int>{0, 2}));
}

TEST(GroupLayoutTest, MpiConnectsHostsWhenMpirunStartedEveryRank) {
  LOOM_ASSERT_OK_AND_ASSIGN(
      GroupLayout layout,
      PlanGroupLayout(OnHosts({"a", "a", "b", "b"}, /*mpi=*/true), 0, TransportChoice::kAuto));
  EXPECT_TRUE(layout.mpi);
  EXPECT_FALSE(layout.routed);  // MPI's own shared memory carries the rest.
  EXPECT_EQ(layout.Describe(), "mpi between 2 hosts, shm inside each (2 ranks per host)");
  // One host under mpirun is still shm alone.
  LOOM_ASSERT_OK_AND_ASSIGN(layout, PlanGroupLayout(OnHosts({"a", "a"}, /*mpi=*/true), 1,
                                                    TransportChoice::kMpi));
  EXPECT_FALSE(layout.two_level);
  // transport=gloo keeps gloo under mpirun.
  LOOM_ASSERT_OK_AND_ASSIGN(layout, PlanGroupLayout(OnHosts({"a", "b"}, /*mpi=*/true), 1,
                                                    TransportChoice::kGloo));
  EXPECT_FALSE(layout.mpi);
  EXPECT_TRUE(layout.node_of_rank.empty());  // gloo keeps the launcher's order
  EXPECT_EQ(layout.Describe(), "gloo among all ranks (2 hosts, no shm level)");
}

TEST(GroupLayoutTest, MpiChoiceRefusesRanksNotStartedByMpirun) {
  std::vector<RankIdentity> ranks = OnHosts({"a", "b", "b"}, /*mpi=*/true);
  ranks[2].mpi_rank = -1;
  EXPECT_THAT(PlanGroupLayout(ranks, 0, TransportChoice::kMpi),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("needs every rank started by mpirun, but rank 2 of the group was not")));
  LOOM_ASSERT_OK_AND_ASSIGN(GroupLayout layout, PlanGroupLayout(ranks, 0, TransportChoice::kAuto));
  EXPECT_FALSE(layout.mpi);
}

TEST(GroupLayoutTest, GlooChoiceDropsTheShmLevelEvenOnOneHost) {
  LOOM_ASSERT_OK_AND_ASSIGN(GroupLayout layout,
                       PlanGroupLayout(OnHosts({"a", "a"}), 0, TransportChoice::kGloo));
  EXPECT_TRUE(layout.two_level);
  EXPECT_EQ(layout.ranks_per_node, 0);
  EXPECT_FALSE(layout.routed);
  EXPECT_EQ(layout.Describe(), "gloo among all ranks (1 host, no shm level)");
}

TEST(GroupLayoutTest, ShmChoiceRefusesSeveralHostsNamingThem) {
  EXPECT_THAT(PlanGroupLayout(OnHosts({"a", "b"}), 0, TransportChoice::kShm),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("2 ranks are on 2 hosts (a-name, b-name)")));
}

TEST(GroupLayoutTest, RankOutsideTheListIsRefused) {
  EXPECT_THAT(PlanGroupLayout(OnHosts({"a"}), 1, TransportChoice::kAuto),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 1 is outside a group of 1")));
}

TEST(GroupLayoutTest, IdentityRoundTripsAndMalformedTextIsNamed) {
  const RankIdentity identity{"host:1234-boot", "host", 4242, 7};
  LOOM_ASSERT_OK_AND_ASSIGN(RankIdentity back, ParseRankIdentity(FormatRankIdentity(identity)));
  EXPECT_EQ(back.host_id, identity.host_id);
  EXPECT_EQ(back.hostname, identity.hostname);
  EXPECT_EQ(back.pid, 4242);
  EXPECT_EQ(back.mpi_rank, 7);
  EXPECT_THAT(ParseRankIdentity("host\tname"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("malformed rank identity")));
  EXPECT_THAT(ParseRankIdentity("host\tname\tpid\t-1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"host\\tname\\tpid\\t-1\"")));
}

TEST(BackendOptionsTest, TransportNamesAndHeartbeatBound) {
  LOOM_ASSERT_OK_AND_ASSIGN(TransportChoice choice, ParseTransportChoice("GLOO"));
  EXPECT_EQ(choice, TransportChoice::kGloo);
  EXPECT_EQ(TransportChoiceName(TransportChoice::kShm), "shm");
  LOOM_ASSERT_OK_AND_ASSIGN(choice, ParseTransportChoice("mpi"));
  EXPECT_EQ(choice, TransportChoice::kMpi);
  EXPECT_THAT(ParseTransportChoice("nccl"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown transport \"nccl\"")));
  LOOM_ASSERT_OK_AND_ASSIGN(ShmOptions::CopyMode copy, ParseShmCopy("staged_or_mapped"));
  EXPECT_EQ(copy, ShmOptions::CopyMode::kStagedOrMapped);
  LOOM_ASSERT_OK_AND_ASSIGN(copy, ParseShmCopy("CMA"));
  EXPECT_EQ(copy, ShmOptions::CopyMode::kCma);
  EXPECT_THAT(ParseShmCopy("xpmem"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown shm_copy \"xpmem\"")));
  BackendOptions options;
  EXPECT_EQ(options.shm_copy, ShmOptions::CopyMode::kStagedOrMapped);
  LOOM_EXPECT_OK(ValidateBackendOptions(options));
  options.heartbeat_timeout = absl::Milliseconds(10);
  EXPECT_THAT(ValidateBackendOptions(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("heartbeat_timeout 10ms")));
  options.heartbeat_timeout = kDefaultHeartbeatTimeout;
  EXPECT_EQ(options.cost_model_calibrations, 3);
  options.cost_model_calibrations = 1;
  LOOM_EXPECT_OK(ValidateBackendOptions(options));
  options.cost_model_calibrations = 0;
  EXPECT_THAT(ValidateBackendOptions(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cost_model_calibrations 0 must be 1 or more")));
}

}  // namespace
}  // namespace pytorch
}  // namespace loom
