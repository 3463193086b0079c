#include "tensor_parallel/distributed_tensor.h"

#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor_parallel/internal/mesh_threads_testing.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using tensor_parallel_internal::RunOnMesh;

Tensor Iota(std::vector<int64_t> shape) {
  std::vector<float> values(static_cast<size_t>(NumElements(shape)));
  std::iota(values.begin(), values.end(), 0.0f);
  return *Tensor::FromValues(std::move(shape), values);
}

Mesh MakeMesh(std::vector<MeshDim> dims) { return *Mesh::Create(std::move(dims)); }

std::vector<Placement> P(const std::string& text) { return *ParsePlacements(text); }

TensorSpec Spec(std::vector<int64_t> shape, const std::string& placements, const Mesh& mesh,
                ShardRule rule = ShardRule::kChunk) {
  return TensorSpec{std::move(shape), DType::kF32, P(placements), rule, mesh};
}

void ExpectAllOk(const std::vector<absl::Status>& statuses) {
  for (size_t r = 0; r < statuses.size(); ++r) EXPECT_THAT(statuses[r], IsOk()) << "rank " << r;
}

// The header's example, end to end on 4 thread ranks.
TEST(DistributedTensorTest, HeaderExample) {
  const Mesh mesh = MakeMesh({{"dp", 2}, {"tp", 2}});
  LOOM_ASSERT_OK_AND_ASSIGN(RedistributePlan plan,
                            PlanRedistribute(Spec({6, 4}, "R,S(0)", mesh), P("R,S(1)")));
  EXPECT_EQ(plan.ToString(),
            "[R, S(0)] -> [R, S(1)] on mesh [dp=2, tp=2], tensor [6,4], chunk\n"
            "step 1: mesh dim 1 (tp): S(0) -> S(1)  all-to-all  48 bytes/rank");
  std::vector<std::vector<int64_t>> shapes(4), shapes2(4);
  std::vector<std::vector<float>> locals2(4), gathered(4);
  ExpectAllOk(RunOnMesh(mesh, [&](const DeviceMesh& dm) -> absl::Status {
    const size_t r = static_cast<size_t>(dm.rank());
    const Tensor full_w = Iota({6, 4});
    LOOM_ASSIGN_OR_RETURN(DistributedTensor w,
                          DistributedTensor::Distribute(full_w, dm, P("R,S(0)")));
    shapes[r] = w.local().shape();
    LOOM_ASSIGN_OR_RETURN(DistributedTensor w2, Redistribute(w, P("R,S(1)")));
    shapes2[r] = w2.local().shape();
    locals2[r] = w2.local().ToF32();
    LOOM_ASSIGN_OR_RETURN(Tensor full, w2.Gather());
    gathered[r] = full.ToF32();
    return absl::OkStatus();
  }));
  for (size_t r = 0; r < 4; ++r) {
    EXPECT_THAT(shapes[r], ElementsAre(3, 4));
    EXPECT_THAT(shapes2[r], ElementsAre(6, 2));
    EXPECT_THAT(gathered[r], ElementsAreArray(Iota({6, 4}).ToF32()));
  }
  // tp coordinate 1 holds columns 2 and 3.
  EXPECT_THAT(locals2[3], ElementsAre(2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23));
}

TEST(TensorSpecTest, UnevenAndNestedShards) {
  const Mesh mesh = MakeMesh({{"a", 2}, {"b", 3}});
  // Dim 0 (10) split by a (5, 5), each piece by b under chunk (2, 2, 1).
  const TensorSpec chunk = Spec({10, 3}, "S(0),S(0)", mesh);
  EXPECT_THAT(chunk.LocalShape({1, 2}), ElementsAre(1, 3));
  EXPECT_THAT(chunk.LocalOffset({1, 2}), ElementsAre(9, 0));
  EXPECT_THAT(chunk.LocalOffset({1, 1}), ElementsAre(7, 0));
  // Balanced: 10 -> 5, 5 -> 2, 2, 1 as well; 7 -> 4, 3; 3 -> 1, 1, 1.
  const TensorSpec balanced = Spec({7, 3}, "S(0),S(0)", mesh, ShardRule::kBalanced);
  EXPECT_THAT(balanced.LocalShape({1, 0}), ElementsAre(1, 3));
  EXPECT_THAT(balanced.LocalOffset({1, 2}), ElementsAre(6, 0));
  // Fewer elements than shards: empty pieces.
  const TensorSpec tiny = Spec({1, 2}, "S(1),S(0)", mesh);
  EXPECT_THAT(tiny.LocalShape({1, 0}), ElementsAre(1, 1));
  EXPECT_THAT(tiny.LocalShape({0, 1}), ElementsAre(0, 1));
}

TEST(TensorSpecTest, ValidateNamesTheProblem) {
  const Mesh mesh = MakeMesh({{"dp", 2}, {"tp", 2}});
  EXPECT_THAT(Spec({4}, "R", mesh).Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the mesh has 2 dimensions")));
  EXPECT_THAT(Spec({4}, "R,S(1)", mesh).Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("S(1)")));
  EXPECT_THAT(Spec({4, -1}, "R,R", mesh).Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[4,-1]")));
  EXPECT_THAT(Spec({4}, "P(sum),P(max)", mesh).Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("mix P(sum) and P(max)")));
  TensorSpec f64 = Spec({4}, "R,R", mesh);
  f64.dtype = DType::kF64;
  EXPECT_THAT(f64.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("f64")));
  EXPECT_THAT(PlanRedistribute(Spec({4}, "R,R", mesh), P("R,S(2)")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("target [R, S(2)]")));
}

TEST(DistributedTensorTest, FromLocalChecksShapeDtypeAndMesh) {
  const Mesh mesh = MakeMesh({{"tp", 2}});
  ExpectAllOk(RunOnMesh(mesh, [&](const DeviceMesh& dm) -> absl::Status {
    // 5 rows under chunk: 3 and 2.
    const int64_t rows = dm.coordinate(0) == 0 ? 3 : 2;
    EXPECT_THAT(DistributedTensor::FromLocal(*Tensor::Create({rows, 2}), Spec({5, 2}, "S(0)", mesh), dm),
                IsOk());
    EXPECT_THAT(
        DistributedTensor::FromLocal(*Tensor::Create({4, 2}), Spec({5, 2}, "S(0)", mesh), dm),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 HasSubstr(absl::StrCat("local shape [4,2] is not [", rows, ",2]"))));
    EXPECT_THAT(DistributedTensor::FromLocal(*Tensor::Create({rows, 2}, DType::kBF16),
                                             Spec({5, 2}, "S(0)", mesh), dm),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("local tensor is bf16, the spec says f32")));
    EXPECT_THAT(DistributedTensor::FromLocal(*Tensor::Create({rows, 2}),
                                             Spec({5, 2}, "S(0)", MakeMesh({{"dp", 2}})), dm),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[dp=2]")));
    EXPECT_THAT(DistributedTensor::FromLocal(*Tensor::Create({rows, 2}),
                                             Spec({5, 2}, "S(3)", mesh), dm),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("S(3)")));
    return absl::OkStatus();
  }));
}

// Replicate -> Partial is exact: sum keeps the values at coordinate 0 and zeros
// elsewhere, prod ones, max every rank.
TEST(DistributedTensorTest, ReplicateToPartialRules) {
  const Mesh mesh = MakeMesh({{"tp", 3}});
  std::vector<std::vector<float>> sum(3), prod(3), max(3), back(3);
  ExpectAllOk(RunOnMesh(mesh, [&](const DeviceMesh& dm) -> absl::Status {
    const size_t r = static_cast<size_t>(dm.rank());
    const Tensor x = *Tensor::FromValues({3}, {0.1f, 2.0f, -3.0f});
    LOOM_ASSIGN_OR_RETURN(DistributedTensor s, DistributedTensor::Distribute(x, dm, P("P(sum)")));
    LOOM_ASSIGN_OR_RETURN(DistributedTensor p, DistributedTensor::Distribute(x, dm, P("P(prod)")));
    LOOM_ASSIGN_OR_RETURN(DistributedTensor m, DistributedTensor::Distribute(x, dm, P("P(max)")));
    sum[r] = s.local().ToF32();
    prod[r] = p.local().ToF32();
    max[r] = m.local().ToF32();
    LOOM_ASSIGN_OR_RETURN(Tensor full, s.Gather());
    back[r] = full.ToF32();
    return absl::OkStatus();
  }));
  EXPECT_THAT(sum[0], ElementsAre(0.1f, 2.0f, -3.0f));
  EXPECT_THAT(sum[2], ElementsAre(0, 0, 0));
  EXPECT_THAT(prod[1], ElementsAre(1, 1, 1));
  EXPECT_THAT(max[2], ElementsAre(0.1f, 2.0f, -3.0f));
  EXPECT_THAT(back[1], ElementsAre(0.1f, 2.0f, -3.0f));  // 0.1 + 0 + 0, bit for bit
}

// Partial(sum) -> Shard(1) on 3 ranks with 4 columns (chunk: 2, 2, 0): a padded
// reduce-scatter; then back to Replicate with a padded all-gather.
TEST(DistributedTensorTest, UnevenReduceScatterAndAllGather) {
  const Mesh mesh = MakeMesh({{"tp", 3}});
  std::vector<std::vector<float>> scattered(3), gathered(3);
  std::vector<std::string> plans(3);
  ExpectAllOk(RunOnMesh(mesh, [&](const DeviceMesh& dm) -> absl::Status {
    const size_t r = static_cast<size_t>(dm.rank());
    // Rank r holds (r + 1) * iota: the sum is 6 * iota.
    std::vector<float> values = Iota({2, 4}).ToF32();
    for (float& v : values) v *= static_cast<float>(r + 1);
    LOOM_ASSIGN_OR_RETURN(Tensor local, Tensor::FromValues({2, 4}, values));
    LOOM_ASSIGN_OR_RETURN(DistributedTensor partial,
                          DistributedTensor::FromLocal(std::move(local),
                                                       Spec({2, 4}, "P(sum)", mesh), dm));
    LOOM_ASSIGN_OR_RETURN(DistributedTensor sharded, Redistribute(partial, P("S(1)")));
    scattered[r] = sharded.local().ToF32();
    LOOM_ASSIGN_OR_RETURN(RedistributePlan plan, PlanRedistribute(partial.spec(), P("S(1)")));
    plans[r] = plan.ToString();
    LOOM_ASSIGN_OR_RETURN(Tensor full, sharded.Gather());
    gathered[r] = full.ToF32();
    return absl::OkStatus();
  }));
  EXPECT_THAT(scattered[0], ElementsAre(0, 6, 24, 30));
  EXPECT_THAT(scattered[1], ElementsAre(12, 18, 36, 42));
  EXPECT_THAT(scattered[2], ElementsAre());
  EXPECT_THAT(gathered[2], ElementsAre(0, 6, 12, 18, 24, 30, 36, 42));
  // Padded input: 3 blocks of [2, 2] f32.
  EXPECT_THAT(plans[0], HasSubstr("step 1: mesh dim 0 (tp): P(sum) -> S(1)  reduce-scatter  48 bytes/rank"));
}

// bf16 moves through every Shard / Replicate transition bit for bit, including a
// nested shard on a 2 x 2 mesh and an all-to-all.
TEST(DistributedTensorTest, BF16ShardTransitionsAreExact) {
  const Mesh mesh = MakeMesh({{"dp", 2}, {"tp", 2}});
  std::vector<std::vector<float>> gathered(4);
  std::vector<DType> dtypes(4);
  ExpectAllOk(RunOnMesh(mesh, [&](const DeviceMesh& dm) -> absl::Status {
    const size_t r = static_cast<size_t>(dm.rank());
    LOOM_ASSIGN_OR_RETURN(Tensor x, Iota({5, 3}).ConvertTo(DType::kBF16));
    LOOM_ASSIGN_OR_RETURN(DistributedTensor t,
                          DistributedTensor::Distribute(x, dm, P("S(0),S(0)"), ShardRule::kBalanced));
    LOOM_ASSIGN_OR_RETURN(DistributedTensor u, Redistribute(t, P("S(1),S(0)")));
    LOOM_ASSIGN_OR_RETURN(DistributedTensor v, Redistribute(u, P("R,S(1)")));
    dtypes[r] = v.local().dtype();
    LOOM_ASSIGN_OR_RETURN(Tensor full, v.Gather());
    gathered[r] = full.ToF32();
    return absl::OkStatus();
  }));
  for (size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(dtypes[r], DType::kBF16);
    EXPECT_THAT(gathered[r], ElementsAreArray(Iota({5, 3}).ToF32()));
  }
}

TEST(DistributedTensorTest, PlanOfNestedGatherPrintsEveryStep) {
  const Mesh mesh = MakeMesh({{"dp", 2}, {"tp", 2}});
  LOOM_ASSERT_OK_AND_ASSIGN(RedistributePlan plan,
                            PlanRedistribute(Spec({8, 2}, "S(0),S(0)", mesh), P("R,S(0)")));
  EXPECT_EQ(plan.ToString(),
            "[S(0), S(0)] -> [R, S(0)] on mesh [dp=2, tp=2], tensor [8,2], chunk\n"
            "step 1: mesh dim 1 (tp): S(0) -> R  all-gather  16 bytes/rank\n"
            "step 2: mesh dim 0 (dp): S(0) -> R  all-gather  32 bytes/rank\n"
            "step 3: mesh dim 1 (tp): R -> S(0)  local slice  64 bytes/rank");
  LOOM_ASSERT_OK_AND_ASSIGN(RedistributePlan same,
                            PlanRedistribute(Spec({8, 2}, "S(0),S(0)", mesh), P("S(0),S(0)")));
  EXPECT_TRUE(same.steps.empty());
}

// A rank that does not join a collective fails the others at their deadline, with
// the step named, instead of hanging.
TEST(DistributedTensorTest, MismatchedCallFailsAtTheDeadlineNamingTheStep) {
  const Mesh mesh = MakeMesh({{"tp", 2}});
  const std::vector<absl::Status> statuses = RunOnMesh(
      mesh,
      [&](const DeviceMesh& dm) -> absl::Status {
        LOOM_ASSIGN_OR_RETURN(DistributedTensor t,
                              DistributedTensor::Distribute(Iota({4}), dm, P("S(0)")));
        if (dm.rank() == 1) return absl::OkStatus();
        return Redistribute(t, P("R")).status();
      },
      absl::Milliseconds(300));
  EXPECT_THAT(statuses[0], StatusIs(absl::StatusCode::kDeadlineExceeded,
                                    HasSubstr("Redistribute step 1 of 1 (mesh dim 0 (tp): S(0) -> R"
                                              "  all-gather  8 bytes/rank): ")));
  EXPECT_THAT(statuses[1], IsOk());
}

}  // namespace
}  // namespace loom
