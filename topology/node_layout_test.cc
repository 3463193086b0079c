#include "topology/node_layout.h"

#include <cstdint>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "topology/mesh.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(NodeLayoutTest, HeaderExample) {
  LOOM_ASSERT_OK_AND_ASSIGN(NodeLayout layout, NodeLayout::Create(8, 4));
  EXPECT_EQ(layout.num_nodes(), 2);
  EXPECT_THAT(layout.NodeOf(5), IsOkAndHolds(1));
  EXPECT_THAT(layout.LocalRank(5), IsOkAndHolds(1));
  EXPECT_THAT(layout.RanksOnNode(1), IsOkAndHolds(ElementsAre(4, 5, 6, 7)));
  EXPECT_THAT(layout.CrossesNodes({0, 4}), IsOkAndHolds(true));
  EXPECT_THAT(layout.CrossesNodes({4, 5}), IsOkAndHolds(false));
  EXPECT_THAT(layout.CrossesNodes({}), IsOkAndHolds(false));
}

TEST(NodeLayoutTest, EveryDivisorOfEveryWorldUpTo64) {
  for (int64_t world = 1; world <= 64; ++world) {
    for (int64_t per_node = 1; per_node <= world; ++per_node) {
      if (world % per_node != 0) continue;
      LOOM_ASSERT_OK_AND_ASSIGN(NodeLayout layout, NodeLayout::Create(world, per_node));
      std::vector<int> count(layout.num_nodes(), 0);
      for (int64_t rank = 0; rank < world; ++rank) {
        const int64_t node = *layout.NodeOf(rank);
        const int64_t local = *layout.LocalRank(rank);
        ASSERT_EQ(node * per_node + local, rank);
        ASSERT_LT(local, per_node);
        ++count[node];
        EXPECT_THAT(layout.RanksOnNode(node), IsOkAndHolds(::testing::Contains(rank)));
      }
      for (int c : count) ASSERT_EQ(c, per_node);
    }
  }
}

TEST(NodeLayoutTest, TellsWhichMeshGroupsCrossNodes) {
  // dp=2 x tp=4 on two nodes of four: tp groups stay inside a node, dp groups cross.
  LOOM_ASSERT_OK_AND_ASSIGN(Mesh mesh, Mesh::Create({{"dp", 2}, {"tp", 4}}));
  LOOM_ASSERT_OK_AND_ASSIGN(NodeLayout layout, NodeLayout::Create(mesh.world_size(), 4));
  LOOM_ASSERT_OK_AND_ASSIGN(auto tp_groups, mesh.AllGroups("tp"));
  LOOM_ASSERT_OK_AND_ASSIGN(auto dp_groups, mesh.AllGroups("dp"));
  for (const auto& group : tp_groups) EXPECT_THAT(layout.CrossesNodes(group), IsOkAndHolds(false));
  for (const auto& group : dp_groups) EXPECT_THAT(layout.CrossesNodes(group), IsOkAndHolds(true));
}

TEST(NodeLayoutTest, RejectsBadInput) {
  EXPECT_THAT(NodeLayout::Create(8, 3),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ranks_per_node=3 does not divide world size 8")));
  EXPECT_THAT(NodeLayout::Create(8, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ranks_per_node=0")));
  EXPECT_THAT(NodeLayout::Create(0, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("world size 0")));
  LOOM_ASSERT_OK_AND_ASSIGN(NodeLayout layout, NodeLayout::Create(4, 2));
  EXPECT_THAT(layout.NodeOf(4), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("rank 4")));
  EXPECT_THAT(layout.RanksOnNode(2), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("node 2")));
  EXPECT_THAT(layout.CrossesNodes({0, 7}), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("rank 7")));
}

}  // namespace
}  // namespace loom
