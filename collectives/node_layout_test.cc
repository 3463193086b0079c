#include "collectives/node_layout.h"

#include <string>
#include <vector>

#include "collectives/inproc_ranks_testing.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::ElementsAre;

TEST(NodeLayoutTest, ConsecutiveRanksOfEqualHostsMakeNodes) {
  const std::vector<std::string> hosts = {"h1", "h1", "h1", "h2", "h2", "h2"};
  for (int rank = 0; rank < 6; ++rank) {
    const NodeLayout layout = PlanNodeLayout(hosts, rank);
    EXPECT_EQ(layout.ranks_per_node, 3);
    EXPECT_EQ(layout.hosts, 2);
    EXPECT_EQ(layout.node, rank / 3);
    EXPECT_EQ(layout.local_rank, rank % 3);
  }
}

TEST(NodeLayoutTest, LayoutsTheCommunicatorCannotUseAreNone) {
  const std::vector<std::vector<std::string>> none = {
      {"h1", "h1", "h1", "h1"},  // one host
      {"h1", "h2", "h3", "h4"},  // one rank a host: node-blind is the layout
      {"h1", "h2", "h1", "h2"},  // not consecutive
      {"h1", "h1", "h1", "h2"},  // uneven
      {"h1", "h1", "h2", "h2", "h1", "h1"},  // a host in two runs
      {"h1", "h1", "h2"},        // k does not divide the size
      {},
  };
  for (const auto& hosts : none) {
    const NodeLayout layout = PlanNodeLayout(hosts, 0);
    EXPECT_EQ(layout.ranks_per_node, 0) << ::testing::PrintToString(hosts);
    EXPECT_EQ(layout.node, 0);  // rank 0's host is always node 0
    EXPECT_EQ(layout.local_rank, 0);
  }
  EXPECT_EQ(PlanNodeLayout({"h1", "h2", "h1", "h2"}, 3).hosts, 2);
}

TEST(NodeLayoutTest, EveryLayoutNumbersItsHostsForTheCommunicator) {
  // Round-robin over hosts: not blocks, but every host holds 2.
  const std::vector<std::string> dealt = {"h2", "h1", "h2", "h1"};
  for (int rank = 0; rank < 4; ++rank) {
    const NodeLayout layout = PlanNodeLayout(dealt, rank);
    EXPECT_EQ(layout.ranks_per_node, 0);
    EXPECT_EQ(layout.ranks_per_host, 2);
    EXPECT_THAT(layout.node_of_rank, ElementsAre(0, 1, 0, 1));
    EXPECT_EQ(layout.node, rank % 2);
    EXPECT_EQ(layout.local_rank, rank / 2);
  }
  // Blocks: both.
  NodeLayout layout = PlanNodeLayout({"a", "a", "b", "b"}, 3);
  EXPECT_EQ(layout.ranks_per_node, 2);
  EXPECT_EQ(layout.ranks_per_host, 2);
  EXPECT_THAT(layout.node_of_rank, ElementsAre(0, 0, 1, 1));
  // Hosts of 3 and 1: numbered, no count.
  layout = PlanNodeLayout({"h1", "h1", "h2", "h1"}, 3);
  EXPECT_EQ(layout.ranks_per_host, 0);
  EXPECT_THAT(layout.node_of_rank, ElementsAre(0, 0, 1, 0));
  EXPECT_EQ(layout.node, 0);
  EXPECT_EQ(layout.local_rank, 2);
  // One rank a host, and one host: no count either.
  EXPECT_EQ(PlanNodeLayout({"h1", "h2", "h3"}, 0).ranks_per_host, 0);
  EXPECT_EQ(PlanNodeLayout({"h1", "h1"}, 0).ranks_per_host, 0);
}

// Over real ranks (threads over the inproc transport), each naming its own host:
// every rank gets every name in rank order, long ones shortened alike, and the layout.
TEST(NodeLayoutTest, EveryRankFindsTheSameLayout) {
  // Two names of 100 bytes alike in their first 99: two hosts, not one.
  const std::string long_a = std::string(99, 'x') + "a";
  const std::string long_b = std::string(99, 'x') + "b";
  const std::string sent_a = SentHostName(long_a);
  const std::string sent_b = SentHostName(long_b);
  EXPECT_EQ(sent_a.size(), kHostNameBytes - 1);
  EXPECT_NE(sent_a, sent_b);
  EXPECT_EQ(SentHostName("alpha"), "alpha");
  RunInprocRanks(6, [&](int rank, Communicator& comm) {
    const std::string mine = rank < 2 ? "alpha" : rank < 4 ? long_a : long_b;
    LOOM_ASSERT_OK_AND_ASSIGN(const NodeLayout layout, FindNodeLayout(comm, mine));
    EXPECT_THAT(layout.host_names, ElementsAre("alpha", "alpha", sent_a, sent_a, sent_b, sent_b));
    EXPECT_EQ(layout.hosts, 3);
    EXPECT_EQ(layout.ranks_per_node, 2);
    EXPECT_EQ(layout.node, rank / 2);
    EXPECT_EQ(layout.local_rank, rank % 2);
  });
  // Empty: this machine's host name, the same for every thread: one host.
  RunInprocRanks(3, [](int, Communicator& comm) {
    LOOM_ASSERT_OK_AND_ASSIGN(const NodeLayout layout, FindNodeLayout(comm));
    EXPECT_EQ(layout.hosts, 1);
    EXPECT_EQ(layout.ranks_per_node, 0);
    ASSERT_EQ(layout.host_names.size(), 3u);
    EXPECT_FALSE(layout.host_names[0].empty());
  });
}

}  // namespace
}  // namespace loom
