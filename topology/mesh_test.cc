#include "topology/mesh.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Optional;
using Groups = std::vector<std::vector<int64_t>>;

// ---------------------------------------------------------------------------------
// Worked example from the header.

TEST(MeshTest, HeaderExample) {
  LOOM_ASSERT_OK_AND_ASSIGN(Mesh mesh, Mesh::Create({{"dp", 2}, {"pp", 2}, {"tp", 2}}));
  EXPECT_EQ(mesh.world_size(), 8);
  EXPECT_THAT(mesh.Coordinates(5), IsOkAndHolds(ElementsAre(1, 0, 1)));
  EXPECT_THAT(mesh.Group(5, "tp"), IsOkAndHolds(ElementsAre(4, 5)));
  EXPECT_THAT(mesh.Group(5, "dp"), IsOkAndHolds(ElementsAre(1, 5)));
  EXPECT_THAT(mesh.Group(5, "dp-tp"), IsOkAndHolds(ElementsAre(0, 1, 4, 5)));
  EXPECT_THAT(mesh.AllGroups("pp"),
              IsOkAndHolds(ElementsAre(ElementsAre(0, 2), ElementsAre(1, 3), ElementsAre(4, 6),
                                       ElementsAre(5, 7))));
  EXPECT_THAT(mesh.NextRank(5, "pp"), IsOkAndHolds(Optional(7)));
  EXPECT_THAT(mesh.NextRank(7, "pp"), IsOkAndHolds(std::nullopt));
  EXPECT_THAT(mesh.PrevRank(5, "pp"), IsOkAndHolds(std::nullopt));
  EXPECT_THAT(mesh.RingPrev(5, "tp"), IsOkAndHolds(4));
  EXPECT_THAT(mesh.RingNext(5, "tp"), IsOkAndHolds(4));
  EXPECT_THAT(mesh.GroupFirst(6, "dp-pp"), IsOkAndHolds(0));
  EXPECT_THAT(mesh.GroupLast(0, "dp-pp"), IsOkAndHolds(6));
  EXPECT_EQ(mesh.ToString(), "dp=2,pp=2,tp=2");
  LOOM_ASSERT_OK_AND_ASSIGN(Mesh same, Mesh::FromOrder("tp-pp-dp", {{"dp", 2}, {"pp", 2}, {"tp", 2}}));
  EXPECT_EQ(same, mesh);
}

// ---------------------------------------------------------------------------------
// Exhaustive properties over every mesh of up to 4 dimensions and 64 ranks.

std::vector<std::vector<int64_t>> AllShapes(int max_dims, int64_t max_world) {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int64_t> current;
  std::function<void(int64_t)> extend = [&](int64_t product) {
    if (!current.empty()) shapes.push_back(current);
    if (static_cast<int>(current.size()) == max_dims) return;
    for (int64_t size = 1; product * size <= max_world; ++size) {
      current.push_back(size);
      extend(product * size);
      current.pop_back();
    }
  };
  extend(1);
  return shapes;
}

Mesh MakeMesh(const std::vector<int64_t>& shape) {
  static const char* kNames[] = {"a", "b", "c", "d"};
  std::vector<MeshDim> dims;
  for (size_t i = 0; i < shape.size(); ++i) dims.push_back({kNames[i], shape[i]});
  return *Mesh::Create(dims);
}

// Checks that `groups` are disjoint, cover [0, world), and are each ascending.
void ExpectPartition(const Groups& groups, int64_t world, const std::string& what) {
  std::vector<int> seen(world, 0);
  for (const auto& group : groups) {
    EXPECT_TRUE(std::is_sorted(group.begin(), group.end())) << what;
    for (int64_t r : group) {
      ASSERT_GE(r, 0) << what;
      ASSERT_LT(r, world) << what;
      ++seen[r];
    }
  }
  for (int64_t r = 0; r < world; ++r) EXPECT_EQ(seen[r], 1) << what << " rank " << r;
}

TEST(MeshExhaustiveTest, EveryMeshUpToFourDimsAndSixtyFourRanks) {
  const auto shapes = AllShapes(4, 64);
  ASSERT_GT(shapes.size(), 2000u);  // Sanity: the enumeration is really exhaustive.
  for (const auto& shape : shapes) {
    const Mesh mesh = MakeMesh(shape);
    const std::string name = mesh.ToString();
    const int64_t world = mesh.world_size();
    int64_t expected_world = 1;
    for (int64_t s : shape) expected_world *= s;
    ASSERT_EQ(world, expected_world) << name;

    // rank <-> coordinates round trip, with an independent row-major decode.
    for (int64_t rank = 0; rank < world; ++rank) {
      LOOM_ASSERT_OK_AND_ASSIGN(std::vector<int64_t> coords, mesh.Coordinates(rank));
      int64_t rest = rank;
      for (int i = mesh.num_dims() - 1; i >= 0; --i) {
        ASSERT_EQ(coords[i], rest % shape[i]) << name << " rank " << rank;
        rest /= shape[i];
      }
      ASSERT_THAT(mesh.RankAt(coords), IsOkAndHolds(rank)) << name;
    }

    // Single-dimension groups, neighbours, rings.
    for (int d = 0; d < mesh.num_dims(); ++d) {
      const std::string dim = mesh.dims()[d].name;
      LOOM_ASSERT_OK_AND_ASSIGN(Groups groups, mesh.AllGroups(dim));
      ASSERT_EQ(static_cast<int64_t>(groups.size()), world / shape[d]) << name << " " << dim;
      ExpectPartition(groups, world, name + " " + dim);
      for (int64_t rank = 0; rank < world; ++rank) {
        LOOM_ASSERT_OK_AND_ASSIGN(std::vector<int64_t> group, mesh.Group(rank, dim));
        ASSERT_EQ(static_cast<int64_t>(group.size()), shape[d]);
        const std::vector<int64_t> own = *mesh.Coordinates(rank);
        for (int64_t i = 0; i < shape[d]; ++i) {  // Member i has coordinate i along dim.
          std::vector<int64_t> member = *mesh.Coordinates(group[i]);
          std::vector<int64_t> expected = own;
          expected[d] = i;
          ASSERT_EQ(member, expected) << name << " " << dim << " rank " << rank;
        }
        ASSERT_NE(std::find(groups.begin(), groups.end(), group), groups.end());
        const std::optional<int64_t> next = *mesh.NextRank(rank, dim);
        const std::optional<int64_t> prev = *mesh.PrevRank(rank, dim);
        ASSERT_EQ(next.has_value(), own[d] + 1 < shape[d]) << name << " " << rank;
        ASSERT_EQ(prev.has_value(), own[d] > 0) << name << " " << rank;
        if (next) {
          ASSERT_THAT(mesh.PrevRank(*next, dim), IsOkAndHolds(Optional(rank)));
        }
        if (prev) {
          ASSERT_THAT(mesh.NextRank(*prev, dim), IsOkAndHolds(Optional(rank)));
        }
        const int64_t ring_next = *mesh.RingNext(rank, dim);
        ASSERT_THAT(mesh.RingPrev(ring_next, dim), IsOkAndHolds(rank));
        ASSERT_EQ(ring_next, group[(own[d] + 1) % shape[d]]);
        ASSERT_THAT(mesh.GroupFirst(rank, dim), IsOkAndHolds(group.front()));
        ASSERT_THAT(mesh.GroupLast(rank, dim), IsOkAndHolds(group.back()));
      }
    }

    // Flattened groups over every pair of dimensions.
    for (int d0 = 0; d0 < mesh.num_dims(); ++d0) {
      for (int d1 = d0 + 1; d1 < mesh.num_dims(); ++d1) {
        const std::string dims = mesh.dims()[d1].name + "-" + mesh.dims()[d0].name;
        LOOM_ASSERT_OK_AND_ASSIGN(Groups groups, mesh.AllGroups(dims));
        ExpectPartition(groups, world, name + " " + dims);
        for (const auto& group : groups) {
          ASSERT_EQ(static_cast<int64_t>(group.size()), shape[d0] * shape[d1]);
          const std::vector<int64_t> first = *mesh.Coordinates(group.front());
          for (int64_t member : group) {  // Members differ only along d0 and d1.
            const std::vector<int64_t> c = *mesh.Coordinates(member);
            for (int k = 0; k < mesh.num_dims(); ++k) {
              if (k != d0 && k != d1) {
                ASSERT_EQ(c[k], first[k]) << name << " " << dims;
              }
            }
          }
        }
      }
    }

    // The same layout written Megatron style (fastest first) is the same mesh.
    std::vector<std::string> reversed;
    std::vector<MeshDim> sizes;
    for (int i = mesh.num_dims() - 1; i >= 0; --i) reversed.push_back(mesh.dims()[i].name);
    for (const MeshDim& dim : mesh.dims()) sizes.push_back(dim);
    std::rotate(sizes.begin(), sizes.begin() + 1, sizes.end());  // Order of sizes is free.
    ASSERT_THAT(Mesh::FromOrder(absl::StrJoin(reversed, "-"), sizes), IsOkAndHolds(mesh));
  }
}

// ---------------------------------------------------------------------------------
// picotron: grid = arange(world).view(dp, pp, cp, tp); groups are slices of it;
// cp ring and pp neighbours as in its process_group_manager.

struct PicotronGrid {
  int64_t dp, pp, cp, tp;
  int64_t At(int64_t d, int64_t p, int64_t c, int64_t t) const {
    return ((d * pp + p) * cp + c) * tp + t;  // Row-major view of arange.
  }
};

TEST(MeshPicotronTest, MatchesPicotronGridOnEveryFourDimMeshUpTo32Ranks) {
  for (const auto& shape : AllShapes(4, 32)) {
    if (shape.size() != 4) continue;
    const PicotronGrid grid{shape[0], shape[1], shape[2], shape[3]};
    LOOM_ASSERT_OK_AND_ASSIGN(
        Mesh mesh, Mesh::Create({{"dp", grid.dp}, {"pp", grid.pp}, {"cp", grid.cp}, {"tp", grid.tp}}));
    for (int64_t d = 0; d < grid.dp; ++d)
      for (int64_t p = 0; p < grid.pp; ++p)
        for (int64_t c = 0; c < grid.cp; ++c)
          for (int64_t t = 0; t < grid.tp; ++t) {
            const int64_t rank = grid.At(d, p, c, t);
            std::vector<int64_t> tp_group, cp_group, pp_group, dp_group;
            for (int64_t i = 0; i < grid.tp; ++i) tp_group.push_back(grid.At(d, p, c, i));
            for (int64_t i = 0; i < grid.cp; ++i) cp_group.push_back(grid.At(d, p, i, t));
            for (int64_t i = 0; i < grid.pp; ++i) pp_group.push_back(grid.At(d, i, c, t));
            for (int64_t i = 0; i < grid.dp; ++i) dp_group.push_back(grid.At(i, p, c, t));
            ASSERT_THAT(mesh.Coordinates(rank), IsOkAndHolds(ElementsAre(d, p, c, t)));
            ASSERT_THAT(mesh.Group(rank, "tp"), IsOkAndHolds(tp_group));
            ASSERT_THAT(mesh.Group(rank, "cp"), IsOkAndHolds(cp_group));
            ASSERT_THAT(mesh.Group(rank, "pp"), IsOkAndHolds(pp_group));
            ASSERT_THAT(mesh.Group(rank, "dp"), IsOkAndHolds(dp_group));
            // picotron's cp_dp group: grid[:, pp, :, tp] flattened (dp slower than cp).
            std::vector<int64_t> cp_dp;
            for (int64_t i = 0; i < grid.dp; ++i)
              for (int64_t j = 0; j < grid.cp; ++j) cp_dp.push_back(grid.At(i, p, j, t));
            ASSERT_THAT(mesh.Group(rank, "cp-dp"), IsOkAndHolds(cp_dp));
            ASSERT_THAT(mesh.RingNext(rank, "cp"), IsOkAndHolds(grid.At(d, p, (c + 1) % grid.cp, t)));
            ASSERT_THAT(mesh.RingPrev(rank, "cp"),
                        IsOkAndHolds(grid.At(d, p, (c - 1 + grid.cp) % grid.cp, t)));
            const std::optional<int64_t> next =
                p + 1 < grid.pp ? std::optional<int64_t>(grid.At(d, p + 1, c, t)) : std::nullopt;
            const std::optional<int64_t> prev =
                p > 0 ? std::optional<int64_t>(grid.At(d, p - 1, c, t)) : std::nullopt;
            ASSERT_THAT(mesh.NextRank(rank, "pp"), IsOkAndHolds(next));
            ASSERT_THAT(mesh.PrevRank(rank, "pp"), IsOkAndHolds(prev));
            ASSERT_THAT(mesh.GroupFirst(rank, "pp"), IsOkAndHolds(grid.At(d, 0, c, t)));
            ASSERT_THAT(mesh.GroupLast(rank, "pp"), IsOkAndHolds(grid.At(d, grid.pp - 1, c, t)));
          }
  }
}

// picotron with dp=2, pp=2, cp=2, tp=2, worked by hand: rank 5 is (dp0, pp1, cp0, tp1).
TEST(MeshPicotronTest, WorkedCaseSixteenRanks) {
  LOOM_ASSERT_OK_AND_ASSIGN(Mesh mesh, Mesh::Create({{"dp", 2}, {"pp", 2}, {"cp", 2}, {"tp", 2}}));
  EXPECT_THAT(mesh.Coordinates(5), IsOkAndHolds(ElementsAre(0, 1, 0, 1)));
  EXPECT_THAT(mesh.Group(5, "tp"), IsOkAndHolds(ElementsAre(4, 5)));
  EXPECT_THAT(mesh.Group(5, "cp"), IsOkAndHolds(ElementsAre(5, 7)));
  EXPECT_THAT(mesh.Group(5, "pp"), IsOkAndHolds(ElementsAre(1, 5)));
  EXPECT_THAT(mesh.Group(5, "dp"), IsOkAndHolds(ElementsAre(5, 13)));
  EXPECT_THAT(mesh.Group(5, "cp-dp"), IsOkAndHolds(ElementsAre(5, 7, 13, 15)));
  EXPECT_THAT(mesh.RingNext(5, "cp"), IsOkAndHolds(7));
  EXPECT_THAT(mesh.NextRank(5, "pp"), IsOkAndHolds(std::nullopt));
  EXPECT_THAT(mesh.PrevRank(5, "pp"), IsOkAndHolds(Optional(1)));
}

// ---------------------------------------------------------------------------------
// Megatron-LM's RankGenerator: an order string, first name fastest; a group of a
// token mask ("dp-cp") enumerates the masked coordinates first-fastest, and groups
// are enumerated over the unmasked coordinates first-fastest. Written here from that
// description as an independent reference.

Groups MegatronGroups(const std::vector<std::string>& order, const std::vector<int64_t>& sizes,
                      const std::string& token) {
  const std::vector<std::string> wanted = absl::StrSplit(token, '-');
  std::vector<bool> mask(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    mask[i] = std::find(wanted.begin(), wanted.end(), order[i]) != wanted.end();
  }
  std::vector<int64_t> stride(order.size(), 1);
  for (size_t i = 1; i < order.size(); ++i) stride[i] = stride[i - 1] * sizes[i - 1];
  std::vector<size_t> in, out;
  for (size_t i = 0; i < order.size(); ++i) (mask[i] ? in : out).push_back(i);
  auto count = [&](const std::vector<size_t>& idx) {
    int64_t n = 1;
    for (size_t i : idx) n *= sizes[i];
    return n;
  };
  // Decompose a linear index over `idx` first-fastest into a global rank offset.
  auto offset = [&](int64_t linear, const std::vector<size_t>& idx) {
    int64_t rank = 0;
    for (size_t i : idx) {
      rank += (linear % sizes[i]) * stride[i];
      linear /= sizes[i];
    }
    return rank;
  };
  Groups groups;
  for (int64_t g = 0; g < count(out); ++g) {
    std::vector<int64_t> group;
    for (int64_t m = 0; m < count(in); ++m) group.push_back(offset(g, out) + offset(m, in));
    groups.push_back(group);
  }
  return groups;
}

TEST(MeshMegatronTest, DocumentedSixteenGpuExample) {
  // Megatron's docstring: 16 GPUs, tp=2, pp=4, dp=2 (order tp-dp-pp).
  LOOM_ASSERT_OK_AND_ASSIGN(Mesh mesh,
                            Mesh::FromOrder("tp-dp-pp", {{"tp", 2}, {"pp", 4}, {"dp", 2}}));
  EXPECT_THAT(mesh.AllGroups("tp"),
              IsOkAndHolds(ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3), ElementsAre(4, 5),
                                       ElementsAre(6, 7), ElementsAre(8, 9), ElementsAre(10, 11),
                                       ElementsAre(12, 13), ElementsAre(14, 15))));
  EXPECT_THAT(mesh.AllGroups("pp"),
              IsOkAndHolds(ElementsAre(ElementsAre(0, 4, 8, 12), ElementsAre(1, 5, 9, 13),
                                       ElementsAre(2, 6, 10, 14), ElementsAre(3, 7, 11, 15))));
  EXPECT_THAT(mesh.AllGroups("dp"),
              IsOkAndHolds(ElementsAre(ElementsAre(0, 2), ElementsAre(1, 3), ElementsAre(4, 6),
                                       ElementsAre(5, 7), ElementsAre(8, 10), ElementsAre(9, 11),
                                       ElementsAre(12, 14), ElementsAre(13, 15))));
}

TEST(MeshMegatronTest, MatchesRankGeneratorOnEveryConfigUpTo64Ranks) {
  const std::vector<std::string> order = {"tp", "cp", "dp", "pp"};  // Megatron's default.
  const std::vector<std::string> tokens = {"tp", "cp", "dp", "pp", "dp-cp", "tp-pp",
                                           "tp-cp", "tp-dp-pp", "tp-cp-dp-pp"};
  int checked = 0;
  for (const auto& shape : AllShapes(4, 64)) {
    if (shape.size() != 4) continue;
    std::vector<MeshDim> sizes;
    for (size_t i = 0; i < order.size(); ++i) sizes.push_back({order[i], shape[i]});
    LOOM_ASSERT_OK_AND_ASSIGN(Mesh mesh, Mesh::FromOrder("tp-cp-dp-pp", sizes));
    for (const std::string& token : tokens) {
      ASSERT_THAT(mesh.AllGroups(token), IsOkAndHolds(MegatronGroups(order, shape, token)))
          << mesh << " " << token;
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000);
}

// ---------------------------------------------------------------------------------
// Bad input: InvalidArgument / NotFound / OutOfRange with the values in the message.

TEST(MeshErrorsTest, CreateRejectsBadDimensions) {
  EXPECT_THAT(Mesh::Create({}), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("1 to 8 dimensions, got 0")));
  std::vector<MeshDim> nine;
  for (int i = 0; i < 9; ++i) nine.push_back({"d" + std::to_string(i), 1});
  EXPECT_THAT(Mesh::Create(nine), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("got 9")));
  EXPECT_THAT(Mesh::Create({{"dp", 0}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"dp\" has size 0")));
  EXPECT_THAT(Mesh::Create({{"tp", -2}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"tp\" has size -2")));
  EXPECT_THAT(Mesh::Create({{"dp", 2}, {"dp", 2}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"dp\" appears twice")));
  EXPECT_THAT(Mesh::Create({{"", 2}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name \"\"")));
  EXPECT_THAT(Mesh::Create({{"d-p", 2}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name \"d-p\"")));
  EXPECT_THAT(Mesh::Create({{"a", 1 << 20}, {"b", 1 << 20}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("more than 2^31")));
}

TEST(MeshErrorsTest, FromOrderRejectsMismatchedNames) {
  EXPECT_THAT(Mesh::FromOrder("tp-ep-dp", {{"tp", 2}, {"dp", 2}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("names \"ep\", which has no size")));
  EXPECT_THAT(Mesh::FromOrder("tp-dp", {{"tp", 2}, {"dp", 2}, {"pp", 4}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("does not place dimension \"pp\" (size 4)")));
  EXPECT_THAT(Mesh::FromOrder("tp-tp", {{"tp", 2}, {"dp", 2}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"tp\" appears twice")));
}

TEST(MeshErrorsTest, ParseShape) {
  EXPECT_THAT(Mesh::ParseShape("dp=2, pp=4,tp=1"),
              IsOkAndHolds(ElementsAre(MeshDim{"dp", 2}, MeshDim{"pp", 4}, MeshDim{"tp", 1})));
  EXPECT_THAT(Mesh::ParseShape("dp=2,pp"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("token \"pp\"")));
  EXPECT_THAT(Mesh::ParseShape("dp=x"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("token \"dp=x\"")));
  EXPECT_THAT(Mesh::ParseShape("=3"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("token \"=3\"")));
}

TEST(MeshErrorsTest, QueriesRejectBadRanksAndNames) {
  LOOM_ASSERT_OK_AND_ASSIGN(Mesh mesh, Mesh::Create({{"dp", 2}, {"tp", 3}}));
  EXPECT_THAT(mesh.Coordinates(6), StatusIs(absl::StatusCode::kOutOfRange,
                                            HasSubstr("rank 6 is outside mesh dp=2,tp=3 of 6 ranks")));
  EXPECT_THAT(mesh.Group(-1, "tp"), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("rank -1")));
  EXPECT_THAT(mesh.Group(0, "pp"), StatusIs(absl::StatusCode::kNotFound,
                                            HasSubstr("mesh dp=2,tp=3 has no dimension \"pp\"")));
  EXPECT_THAT(mesh.Group(0, "dp-dp"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("names \"dp\" twice")));
  EXPECT_THAT(mesh.AllGroups("dp-"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty dimension name")));
  EXPECT_THAT(mesh.RankAt({1}), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("needs 2 coordinates, got 1")));
  EXPECT_THAT(mesh.RankAt({1, 3}), StatusIs(absl::StatusCode::kOutOfRange,
                                            HasSubstr("coordinate 3 along \"tp\" is outside [0, 3)")));
  EXPECT_THAT(mesh.NextRank(9, "dp"), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("rank 9")));
  EXPECT_THAT(mesh.DimSize("ep"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("\"ep\"")));
}

}  // namespace
}  // namespace loom
