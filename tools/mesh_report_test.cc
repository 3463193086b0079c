#include "tools/mesh_report.h"

#include <string>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(MeshReportTest, JsonFollowsTheSchema) {
  LOOM_ASSERT_OK_AND_ASSIGN(Mesh mesh, Mesh::Create({{"dp", 2}, {"tp", 2}}));
  LOOM_ASSERT_OK_AND_ASSIGN(NodeLayout nodes, NodeLayout::Create(4, 2));
  EXPECT_THAT(
      MeshReportJson(mesh, nodes, std::nullopt),
      IsOkAndHolds(
          "{\"world_size\": 4, \"dims\": [{\"name\": \"dp\", \"size\": 2}, {\"name\": \"tp\", "
          "\"size\": 2}], \"ranks\": ["
          "{\"rank\": 0, \"node\": 0, \"local_rank\": 0, \"coords\": {\"dp\": 0, \"tp\": 0}, "
          "\"groups\": {\"dp\": [0, 2], \"tp\": [0, 1]}}, "
          "{\"rank\": 1, \"node\": 0, \"local_rank\": 1, \"coords\": {\"dp\": 0, \"tp\": 1}, "
          "\"groups\": {\"dp\": [1, 3], \"tp\": [0, 1]}}, "
          "{\"rank\": 2, \"node\": 1, \"local_rank\": 0, \"coords\": {\"dp\": 1, \"tp\": 0}, "
          "\"groups\": {\"dp\": [0, 2], \"tp\": [2, 3]}}, "
          "{\"rank\": 3, \"node\": 1, \"local_rank\": 1, \"coords\": {\"dp\": 1, \"tp\": 1}, "
          "\"groups\": {\"dp\": [1, 3], \"tp\": [2, 3]}}]}\n"));
}

TEST(MeshReportTest, JsonForOneRankOfAMegatronOrderedMesh) {
  // tp fastest, then pp, then dp: rank 5 = (dp 1, pp 0, tp 1).
  LOOM_ASSERT_OK_AND_ASSIGN(Mesh mesh, Mesh::FromOrder("tp-pp-dp", {{"dp", 2}, {"pp", 2}, {"tp", 2}}));
  LOOM_ASSERT_OK_AND_ASSIGN(NodeLayout nodes, NodeLayout::Create(8, 4));
  EXPECT_THAT(MeshReportJson(mesh, nodes, 5),
              IsOkAndHolds(HasSubstr("\"ranks\": [{\"rank\": 5, \"node\": 1, \"local_rank\": 1, "
                                     "\"coords\": {\"dp\": 1, \"pp\": 0, \"tp\": 1}, \"groups\": "
                                     "{\"dp\": [1, 5], \"pp\": [5, 7], \"tp\": [4, 5]}}]}")));
}

TEST(MeshReportTest, TableMarksGroupsThatSpanNodes) {
  LOOM_ASSERT_OK_AND_ASSIGN(Mesh mesh, Mesh::Create({{"dp", 2}, {"tp", 2}}));
  LOOM_ASSERT_OK_AND_ASSIGN(NodeLayout nodes, NodeLayout::Create(4, 2));
  LOOM_ASSERT_OK_AND_ASSIGN(std::string table, MeshReportTable(mesh, nodes, std::nullopt));
  EXPECT_THAT(table, HasSubstr("mesh dp=2,tp=2: 4 ranks on 2 node(s) of 2"));
  EXPECT_THAT(table, HasSubstr("rank  node  local  dp  tp  dp group  tp group\n"));
  EXPECT_THAT(table, HasSubstr("3     1     1      1   1   [1,3]*    [2,3]\n"));
}

TEST(MeshReportTest, RejectsBadRankAndLayout) {
  LOOM_ASSERT_OK_AND_ASSIGN(Mesh mesh, Mesh::Create({{"dp", 2}, {"tp", 2}}));
  LOOM_ASSERT_OK_AND_ASSIGN(NodeLayout nodes, NodeLayout::Create(4, 2));
  EXPECT_THAT(MeshReportJson(mesh, nodes, 4),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("rank 4 is outside")));
  LOOM_ASSERT_OK_AND_ASSIGN(NodeLayout wrong, NodeLayout::Create(8, 2));
  EXPECT_THAT(MeshReportTable(mesh, wrong, std::nullopt),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("covers 8 ranks, mesh dp=2,tp=2 has 4")));
}

}  // namespace
}  // namespace loom
