#include "tools/training/job_mesh.h"

#include <cstdint>
#include <set>
#include <tuple>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TrainJobOptions Sized(int dp, int pp, int tp) {
  TrainJobOptions options;
  options.dp = dp;
  options.pp = pp;
  options.tp = tp;
  return options;
}

TEST(JobMeshTest, TheDocumentedExample) {
  LOOM_ASSERT_OK_AND_ASSIGN(const Mesh mesh, JobMeshOf(Sized(2, 2, 2)));
  LOOM_ASSERT_OK_AND_ASSIGN(const RankPlace place, PlaceRank(mesh, 5));
  EXPECT_EQ(place.rank, 5);
  EXPECT_EQ(std::make_tuple(place.d, place.s, place.t), std::make_tuple(1, 0, 1));
  EXPECT_EQ(std::make_tuple(place.tp_group, place.dp_group, place.pp_group),
            std::make_tuple(2, 1, 3));
  EXPECT_THAT(mesh.AllGroups("tp"), IsOkAndHolds(ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3),
                                                            ElementsAre(4, 5), ElementsAre(6, 7))));
  EXPECT_EQ(JobMeshCommand(Sized(2, 2, 2)), "--shape=dp=2,pp=2,cp=1,tp=2 --order=tp-cp-pp-dp");
}

// Every rank of several meshes: tp fastest, then cp, then pp, then dp; each group
// index names the group of mesh.AllGroups that holds the rank at its own coordinate,
// each dimension's groups partition the world, and the dp x cp group holds the
// rank at d * cp + c.
TEST(JobMeshTest, EveryRankOfSeveralMeshes) {
  for (const auto& [dp, pp, cp, tp] :
       {std::make_tuple(1, 1, 1, 1), std::make_tuple(8, 1, 1, 1), std::make_tuple(1, 4, 1, 1),
        std::make_tuple(1, 1, 1, 3), std::make_tuple(3, 2, 1, 2), std::make_tuple(2, 3, 1, 4),
        std::make_tuple(1, 1, 4, 1), std::make_tuple(2, 1, 2, 2), std::make_tuple(2, 2, 3, 2)}) {
    SCOPED_TRACE(testing::Message() << "dp " << dp << " pp " << pp << " cp " << cp << " tp "
                                    << tp);
    TrainJobOptions options = Sized(dp, pp, tp);
    options.cp = cp;
    LOOM_ASSERT_OK_AND_ASSIGN(const Mesh mesh, JobMeshOf(options));
    const int world = dp * pp * cp * tp;
    ASSERT_EQ(mesh.world_size(), world);
    LOOM_ASSERT_OK_AND_ASSIGN(const auto tp_groups, mesh.AllGroups("tp"));
    LOOM_ASSERT_OK_AND_ASSIGN(const auto cp_groups, mesh.AllGroups("cp"));
    LOOM_ASSERT_OK_AND_ASSIGN(const auto pp_groups, mesh.AllGroups("pp"));
    LOOM_ASSERT_OK_AND_ASSIGN(const auto dp_groups, mesh.AllGroups("dp"));
    LOOM_ASSERT_OK_AND_ASSIGN(const auto dpcp_groups, mesh.AllGroups("dp-cp"));
    EXPECT_EQ(tp_groups.size(), static_cast<size_t>(dp * pp * cp));
    EXPECT_EQ(cp_groups.size(), static_cast<size_t>(dp * pp * tp));
    EXPECT_EQ(pp_groups.size(), static_cast<size_t>(dp * cp * tp));
    EXPECT_EQ(dp_groups.size(), static_cast<size_t>(pp * cp * tp));
    EXPECT_EQ(dpcp_groups.size(), static_cast<size_t>(pp * tp));
    std::set<std::tuple<int, int, int, int>> seen;
    for (int rank = 0; rank < world; ++rank) {
      LOOM_ASSERT_OK_AND_ASSIGN(const RankPlace at, PlaceRank(mesh, rank));
      EXPECT_EQ(at.t, rank % tp);
      EXPECT_EQ(at.c, (rank / tp) % cp);
      EXPECT_EQ(at.s, (rank / (tp * cp)) % pp);
      EXPECT_EQ(at.d, rank / (tp * cp * pp));
      seen.insert({at.d, at.s, at.c, at.t});
      ASSERT_LT(at.tp_group, static_cast<int>(tp_groups.size()));
      ASSERT_LT(at.cp_group, static_cast<int>(cp_groups.size()));
      ASSERT_LT(at.pp_group, static_cast<int>(pp_groups.size()));
      ASSERT_LT(at.dp_group, static_cast<int>(dp_groups.size()));
      ASSERT_LT(at.dpcp_group, static_cast<int>(dpcp_groups.size()));
      EXPECT_EQ(tp_groups[at.tp_group][at.t], rank);
      EXPECT_EQ(cp_groups[at.cp_group][at.c], rank);
      EXPECT_EQ(pp_groups[at.pp_group][at.s], rank);
      EXPECT_EQ(dp_groups[at.dp_group][at.d], rank);
      EXPECT_EQ(at.dpcp_index, at.d * cp + at.c);
      EXPECT_EQ(dpcp_groups[at.dpcp_group][at.dpcp_index], rank);
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(world));
  }
}

// The header's cp example: 16 ranks, rank 5's cp ring and dp x cp group.
TEST(JobMeshTest, TheCpExample) {
  TrainJobOptions options = Sized(2, 2, 2);
  options.cp = 2;
  LOOM_ASSERT_OK_AND_ASSIGN(const Mesh mesh, JobMeshOf(options));
  LOOM_ASSERT_OK_AND_ASSIGN(const RankPlace place, PlaceRank(mesh, 5));
  EXPECT_EQ(std::make_tuple(place.t, place.c, place.s, place.d), std::make_tuple(1, 0, 1, 0));
  EXPECT_THAT(mesh.Group(5, "cp"), IsOkAndHolds(ElementsAre(5, 7)));
  EXPECT_THAT(mesh.Group(5, "dp-cp"), IsOkAndHolds(ElementsAre(5, 7, 13, 15)));
  EXPECT_EQ(place.dpcp_index, 0);
  EXPECT_EQ(JobMeshCommand(options), "--shape=dp=2,pp=2,cp=2,tp=2 --order=tp-cp-pp-dp");
}

TEST(JobMeshTest, BadSizesAndRanksAreErrors) {
  EXPECT_THAT(JobMeshOf(Sized(0, 1, 1)), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0")));
  LOOM_ASSERT_OK_AND_ASSIGN(const Mesh mesh, JobMeshOf(Sized(2, 1, 2)));
  EXPECT_THAT(PlaceRank(mesh, 4), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("4")));
  EXPECT_THAT(PlaceRank(mesh, -1), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("-1")));
  LOOM_ASSERT_OK_AND_ASSIGN(const Mesh other, (Mesh::Create({{"dp", 2}, {"tp", 2}})));
  EXPECT_THAT(PlaceRank(other, 0), StatusIs(absl::StatusCode::kNotFound, HasSubstr("pp")));
  LOOM_ASSERT_OK_AND_ASSIGN(const Mesh no_cp, (Mesh::Create({{"dp", 2}, {"pp", 1}, {"tp", 2}})));
  EXPECT_THAT(PlaceRank(no_cp, 0), StatusIs(absl::StatusCode::kNotFound, HasSubstr("cp")));
}

}  // namespace
}  // namespace loom
