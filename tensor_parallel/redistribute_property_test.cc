// Property test of Redistribute: random meshes (1 to 3 dimensions, up to 8 ranks),
// shapes (including dimensions shorter than the shard count), placement pairs
// (nested shards of one tensor dimension, Partial with sum, avg, max, min and prod,
// both shard rules, f32 and bf16), each checked against a reference computed on the
// host straight from the full tensor with ShardExtentOf, not with the library's
// TensorSpec or shard code.
//
// Exactness: every value is a small integer, so sums over up to 8 ranks, avg (whose
// partial contributions are built so that every partial average is an integer) and
// bf16 (integers within +-256) are exact, and results are compared bit for bit.
// Partial is tested with f32 only: bf16 reductions round.
//
// Seeds: case i uses seed kSeed + i and prints it with the case on failure. Under
// ASan or TSan fewer cases run (the same first ones).
#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor_parallel/distributed_tensor.h"
#include "tensor_parallel/internal/mesh_threads_testing.h"

namespace loom {
namespace {

using tensor_parallel_internal::RunOnMesh;

constexpr uint64_t kSeed = 0x7e5a2d;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int kCases = 500;
#else
constexpr int kCases = 2000;
#endif

struct Case {
  uint64_t seed = 0;
  std::vector<int64_t> mesh_sizes;
  std::vector<int64_t> shape;
  std::vector<Placement> from, to;
  ShardRule rule = ShardRule::kChunk;
  DType dtype = DType::kF32;

  std::string ToString() const {
    return absl::StrCat("seed ", seed, ": mesh [", absl::StrJoin(mesh_sizes, "x"), "], tensor ",
                        ShapeString(shape), " ", DTypeName(dtype), ", ", ShardRuleName(rule), ", ",
                        PlacementsString(from), " -> ", PlacementsString(to));
  }
};

bool HasPartial(const std::vector<Placement>& placements) {
  return std::any_of(placements.begin(), placements.end(),
                     [](const Placement& p) { return p.is_partial(); });
}

std::vector<Placement> RandomPlacements(std::mt19937_64& rng, int mesh_rank, int tensor_rank) {
  static constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax,
                                      ReduceOp::kMin, ReduceOp::kProd};
  const ReduceOp op = kOps[rng() % 5];  // one op per layout (mixing is invalid)
  std::vector<Placement> placements;
  for (int m = 0; m < mesh_rank; ++m) {
    const uint64_t kind = rng() % 8;
    if (kind < 2) {
      placements.push_back(Placement::Replicate());
    } else if (kind < 6) {
      placements.push_back(Placement::Shard(static_cast<int>(rng() % static_cast<uint64_t>(tensor_rank))));
    } else {
      placements.push_back(Placement::Partial(op));
    }
  }
  return placements;
}

Case RandomCase(uint64_t seed) {
  std::mt19937_64 rng(seed);
  Case c;
  c.seed = seed;
  const int mesh_rank = 1 + static_cast<int>(rng() % 3);
  do {
    c.mesh_sizes.clear();
    for (int m = 0; m < mesh_rank; ++m) c.mesh_sizes.push_back(1 + static_cast<int64_t>(rng() % 4));
  } while (NumElements(c.mesh_sizes) > 8);
  const int tensor_rank = 1 + static_cast<int>(rng() % 3);
  for (int d = 0; d < tensor_rank; ++d) c.shape.push_back(static_cast<int64_t>(rng() % 7));
  c.from = RandomPlacements(rng, mesh_rank, tensor_rank);
  c.to = RandomPlacements(rng, mesh_rank, tensor_rank);
  c.rule = rng() % 2 == 0 ? ShardRule::kChunk : ShardRule::kBalanced;
  if (!HasPartial(c.from) && !HasPartial(c.to) && rng() % 3 == 0) c.dtype = DType::kBF16;
  return c;
}

// ---- The host reference: boxes and values from the full tensor. ----

struct Box {
  std::vector<int64_t> offset, length;
};

// ReferenceBox nests the shards in mesh-dimension order with ShardExtentOf.
Box ReferenceBox(const Case& c, const std::vector<Placement>& placements,
                 const std::vector<int64_t>& coords) {
  Box box{std::vector<int64_t>(c.shape.size(), 0), c.shape};
  for (size_t m = 0; m < placements.size(); ++m) {
    if (!placements[m].is_shard()) continue;
    const size_t d = static_cast<size_t>(placements[m].dim());
    const ShardExtent e = ShardExtentOf(box.length[d], static_cast<int>(c.mesh_sizes[m]),
                                        static_cast<int>(coords[m]), c.rule);
    box.offset[d] += e.offset;
    box.length[d] = e.length;
  }
  return box;
}

std::vector<float> Extract(const std::vector<float>& full, const std::vector<int64_t>& shape,
                           const Box& box) {
  std::vector<float> out;
  const int64_t n = NumElements(box.length);
  std::vector<int64_t> index(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t flat = 0;
    for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + box.offset[d] + index[d];
    out.push_back(full[static_cast<size_t>(flat)]);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++index[d] < box.length[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

std::vector<int> PartialDims(const std::vector<Placement>& placements) {
  std::vector<int> dims;
  for (size_t m = 0; m < placements.size(); ++m) {
    if (placements[m].is_partial()) dims.push_back(static_cast<int>(m));
  }
  return dims;
}

// Contributions: one full tensor per rank whose reduction over the source's Partial
// mesh dimensions is x, exactly (see the file comment).
std::vector<std::vector<float>> Contributions(const Case& c, const Mesh& mesh,
                                              const std::vector<float>& x, std::mt19937_64& rng) {
  const size_t world = static_cast<size_t>(mesh.world_size());
  std::vector<std::vector<float>> out(world, x);
  const std::vector<int> q = PartialDims(c.from);
  if (q.empty()) return out;
  const ReduceOp op = c.from[static_cast<size_t>(q[0])].op();
  auto at_origin = [&](const std::vector<int64_t>& coords) {
    return std::all_of(q.begin(), q.end(), [&](int m) { return coords[static_cast<size_t>(m)] == 0; });
  };
  std::uniform_int_distribution<int> small(-20, 20), positive(1, 20);
  if (op == ReduceOp::kSum || op == ReduceOp::kAvg) {
    // Per Partial mesh dim m, a term that sums to zero over m's coordinates:
    // v * (k - 1) at coordinate 0 and -v elsewhere.
    for (int m : q) {
      std::vector<float> v(x.size());
      for (float& e : v) e = static_cast<float>(small(rng));
      const float k = static_cast<float>(c.mesh_sizes[static_cast<size_t>(m)]);
      for (size_t r = 0; r < world; ++r) {
        const bool zero = mesh.Coordinates(static_cast<int64_t>(r))->at(static_cast<size_t>(m)) == 0;
        for (size_t i = 0; i < x.size(); ++i) out[r][i] += zero ? v[i] * (k - 1) : -v[i];
      }
    }
    if (op == ReduceOp::kSum) {
      for (size_t r = 0; r < world; ++r) {
        if (at_origin(*mesh.Coordinates(static_cast<int64_t>(r)))) continue;
        for (size_t i = 0; i < x.size(); ++i) out[r][i] -= x[i];
      }
    }
    return out;
  }
  // max / min / prod: per element, one rank of each partial group (the one whose
  // partial coordinates are the element's pick) holds x; the others hold values that
  // lose (max, min) or multiply to 1 (prod: 1 everywhere else).
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<int64_t> pick;
    for (int m : q) pick.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(c.mesh_sizes[static_cast<size_t>(m)])));
    for (size_t r = 0; r < world; ++r) {
      const std::vector<int64_t> coords = *mesh.Coordinates(static_cast<int64_t>(r));
      bool picked = true;
      for (size_t j = 0; j < q.size(); ++j) picked &= coords[static_cast<size_t>(q[j])] == pick[j];
      if (picked) continue;
      if (op == ReduceOp::kMax) out[r][i] = x[i] - static_cast<float>(positive(rng));
      if (op == ReduceOp::kMin) out[r][i] = x[i] + static_cast<float>(positive(rng));
      if (op == ReduceOp::kProd) out[r][i] = 1.0f;
    }
  }
  return out;
}

// ReplicateToPartial: the header's rule for a freshly made Partial layout.
std::vector<float> ReplicateToPartial(std::vector<float> values, const std::vector<Placement>& to,
                                      const std::vector<int64_t>& coords) {
  for (size_t m = 0; m < to.size(); ++m) {
    if (!to[m].is_partial() || coords[m] == 0) continue;
    if (to[m].op() == ReduceOp::kSum) std::fill(values.begin(), values.end(), 0.0f);
    if (to[m].op() == ReduceOp::kProd) std::fill(values.begin(), values.end(), 1.0f);
  }
  return values;
}

// What each rank observed.
struct Observed {
  std::vector<int64_t> shape;
  std::vector<float> local, gathered, distributed;
};

absl::Status RunRank(const Case& c, const Mesh& mesh, const DeviceMesh& dm,
                     const std::vector<float>& x, const std::vector<float>& source,
                     Observed& seen) {
  const std::vector<int64_t> coords = *mesh.Coordinates(dm.rank());
  const Box box = ReferenceBox(c, c.from, coords);
  LOOM_ASSIGN_OR_RETURN(Tensor local_f32, Tensor::FromValues(box.length, source));
  LOOM_ASSIGN_OR_RETURN(Tensor local, local_f32.ConvertTo(c.dtype));
  LOOM_ASSIGN_OR_RETURN(
      DistributedTensor from,
      DistributedTensor::FromLocal(std::move(local),
                                   TensorSpec{c.shape, c.dtype, c.from, c.rule, mesh}, dm));
  LOOM_ASSIGN_OR_RETURN(DistributedTensor to, Redistribute(from, c.to));
  if (to.local().dtype() != c.dtype) return absl::InternalError("dtype changed");
  seen.shape = to.local().shape();
  seen.local = to.local().ToF32();
  LOOM_ASSIGN_OR_RETURN(Tensor gathered, to.Gather());
  seen.gathered = gathered.ToF32();
  LOOM_ASSIGN_OR_RETURN(Tensor full_f32, Tensor::FromValues(c.shape, x));
  LOOM_ASSIGN_OR_RETURN(Tensor full, full_f32.ConvertTo(c.dtype));
  LOOM_ASSIGN_OR_RETURN(DistributedTensor distributed,
                        DistributedTensor::Distribute(full, dm, c.to, c.rule));
  seen.distributed = distributed.local().ToF32();
  return absl::OkStatus();
}

// HostReduce reduces the target locals of the ranks that differ from `rank` only
// along the target's Partial mesh dimensions.
std::vector<float> HostReduce(const Case& c, const Mesh& mesh, const std::vector<Observed>& seen,
                              int64_t rank) {
  const std::vector<int> q = PartialDims(c.to);
  const std::vector<int64_t> mine = *mesh.Coordinates(rank);
  const ReduceOp op = c.to[static_cast<size_t>(q[0])].op();
  std::vector<double> acc;
  int members = 0;
  for (int64_t r = 0; r < mesh.world_size(); ++r) {
    const std::vector<int64_t> coords = *mesh.Coordinates(r);
    bool same = true;
    for (size_t m = 0; m < coords.size(); ++m) {
      if (std::find(q.begin(), q.end(), static_cast<int>(m)) == q.end()) same &= coords[m] == mine[m];
    }
    if (!same) continue;
    const std::vector<float>& v = seen[static_cast<size_t>(r)].local;
    if (members++ == 0) {
      acc.assign(v.begin(), v.end());
      continue;
    }
    for (size_t i = 0; i < acc.size() && i < v.size(); ++i) {
      const double e = static_cast<double>(v[i]);
      if (op == ReduceOp::kSum || op == ReduceOp::kAvg) acc[i] += e;
      if (op == ReduceOp::kProd) acc[i] *= e;
      if (op == ReduceOp::kMax) acc[i] = std::max(acc[i], e);
      if (op == ReduceOp::kMin) acc[i] = std::min(acc[i], e);
    }
  }
  std::vector<float> out;
  for (double a : acc) out.push_back(static_cast<float>(op == ReduceOp::kAvg ? a / members : a));
  return out;
}

TEST(RedistributePropertyTest, MatchesTheHostReference) {
  std::set<std::string> collectives;
  std::set<std::string> ops;
  int nested = 0, uneven = 0, bf16 = 0;
  for (int i = 0; i < kCases; ++i) {
    const Case c = RandomCase(kSeed + static_cast<uint64_t>(i));
    SCOPED_TRACE(c.ToString());
    LOOM_ASSERT_OK_AND_ASSIGN(Mesh mesh, Mesh::Create([&] {
      std::vector<MeshDim> dims;
      for (size_t m = 0; m < c.mesh_sizes.size(); ++m) dims.push_back({std::string(1, static_cast<char>('a' + m)), c.mesh_sizes[m]});
      return dims;
    }()));
    const TensorSpec spec{c.shape, c.dtype, c.from, c.rule, mesh};
    const TensorSpec target_spec{c.shape, c.dtype, c.to, c.rule, mesh};
    if (!spec.Validate().ok() || !target_spec.Validate().ok()) {
      ADD_FAILURE() << "generated an invalid layout";
      continue;
    }
    LOOM_ASSERT_OK_AND_ASSIGN(RedistributePlan plan, PlanRedistribute(spec, c.to));
    for (const RedistributeStep& s : plan.steps) collectives.insert(s.collective);
    for (const std::vector<Placement>* p : {&c.from, &c.to}) {
      std::map<int, int> per_dim;
      for (const Placement& pl : *p) {
        if (pl.is_shard() && ++per_dim[pl.dim()] == 2) ++nested;
        if (pl.is_shard() && c.shape[static_cast<size_t>(pl.dim())] % 2 == 1) ++uneven;
        if (pl.is_partial()) ops.insert(std::string(ReduceOpName(pl.op())));
      }
    }
    bf16 += c.dtype == DType::kBF16;

    std::mt19937_64 rng(c.seed ^ 0x9e3779b97f4a7c15ULL);
    const int64_t n = NumElements(c.shape);
    std::vector<float> x(static_cast<size_t>(n));
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t e = 0; e < x.size(); ++e) {
      // Distinct integers; within +-108 for bf16 (exact below 256).
      x[e] = static_cast<float>(c.dtype == DType::kBF16 ? order[e] - n / 2 : 3 * order[e] - n);
    }
    const std::vector<std::vector<float>> contributions = Contributions(c, mesh, x, rng);
    std::vector<std::vector<float>> sources;
    for (int64_t r = 0; r < mesh.world_size(); ++r) {
      sources.push_back(Extract(contributions[static_cast<size_t>(r)], c.shape,
                                ReferenceBox(c, c.from, *mesh.Coordinates(r))));
    }

    std::vector<Observed> seen(static_cast<size_t>(mesh.world_size()));
    const std::vector<absl::Status> statuses =
        RunOnMesh(mesh, [&](const DeviceMesh& dm) {
          const size_t r = static_cast<size_t>(dm.rank());
          return RunRank(c, mesh, dm, x, sources[r], seen[r]);
        }, absl::Seconds(60));
    for (size_t r = 0; r < statuses.size(); ++r) ASSERT_THAT(statuses[r], IsOk()) << "rank " << r;

    for (int64_t r = 0; r < mesh.world_size(); ++r) {
      SCOPED_TRACE(absl::StrCat("rank ", r));
      const std::vector<int64_t> coords = *mesh.Coordinates(r);
      const Box box = ReferenceBox(c, c.to, coords);
      const std::vector<float> expected = Extract(x, c.shape, box);
      const Observed& o = seen[static_cast<size_t>(r)];
      ASSERT_EQ(o.shape, box.length);
      EXPECT_EQ(o.gathered, x);
      EXPECT_EQ(o.distributed, ReplicateToPartial(expected, c.to, coords));
      if (!HasPartial(c.to)) {
        EXPECT_EQ(o.local, expected);
      } else {
        EXPECT_EQ(HostReduce(c, mesh, seen, r), expected);
        if (!HasPartial(c.from)) {
          EXPECT_EQ(o.local, ReplicateToPartial(expected, c.to, coords));
        }
      }
    }
    if (testing::Test::HasFatalFailure()) return;
  }
  // The generator reaches every transition, every op and the tricky layouts.
  EXPECT_THAT(collectives, testing::IsSupersetOf({"all-gather", "all-reduce", "reduce-scatter",
                                                  "all-to-all", "local slice", "local partial"}));
  EXPECT_THAT(ops, testing::IsSupersetOf({"sum", "avg", "max", "min", "prod"}));
  EXPECT_GT(nested, kCases / 20);
  EXPECT_GT(uneven, kCases / 10);
  EXPECT_GT(bf16, kCases / 20);
}

}  // namespace
}  // namespace loom
