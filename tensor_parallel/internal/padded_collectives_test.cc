#include "tensor_parallel/internal/padded_collectives.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collectives/communicator.h"
#include "core/buffer_view.h"
#include "core/reduce_op.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor_parallel/device_mesh.h"
#include "tensor_parallel/internal/mesh_threads_testing.h"
#include "topology/mesh.h"

namespace loom {
namespace tensor_parallel_internal {
namespace {

using ::testing::HasSubstr;

Mesh LineOf(int ranks) { return *Mesh::Create({{"tp", ranks}}); }

// Even, uneven, with empty pieces first and last, and all empty.
std::vector<std::vector<int64_t>> CountPatterns(int ranks) {
  std::vector<std::vector<int64_t>> patterns(4, std::vector<int64_t>(static_cast<size_t>(ranks)));
  for (int r = 0; r < ranks; ++r) {
    patterns[0][r] = 3;
    patterns[1][r] = (5 * r + 2) % 4 + 1;
    patterns[2][r] = r % 2 == 0 ? 0 : 2 + r;
    patterns[3][r] = 0;
  }
  return patterns;
}

// Element `index` of rank `rank`'s input: distinct over (rank, index) for rank < 16,
// small integers (exact in f32, signed so that max cannot pick the padding zeros).
template <typename T>
T InputValue(int rank, int64_t index, int base) {
  return static_cast<T>(base + 16 * index + rank - 400);
}

std::string Describe(int ranks, const std::vector<int64_t>& counts, uint32_t seed) {
  return absl::StrCat(ranks, " ranks, counts {", absl::StrJoin(counts, ","), "}, seed ", seed);
}

template <typename T>
void ExpectAllGatherConcatenates(int ranks, const std::vector<int64_t>& counts, uint32_t seed) {
  SCOPED_TRACE(Describe(ranks, counts, seed));
  const int base = static_cast<int>(std::mt19937(seed)() % 1000);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  std::vector<int64_t> offsets(counts.size(), 0);
  std::partial_sum(counts.begin(), counts.end() - 1, offsets.begin() + 1);
  std::vector<T> expected(static_cast<size_t>(total));
  for (size_t r = 0; r < counts.size(); ++r) {
    for (int64_t i = 0; i < counts[r]; ++i) {
      expected[offsets[r] + i] = InputValue<T>(static_cast<int>(r), i, base);
    }
  }
  std::vector<std::vector<T>> outputs(static_cast<size_t>(ranks));
  std::vector<absl::Status> statuses = RunOnMesh(LineOf(ranks), [&](const DeviceMesh& dm) {
    const int r = dm.rank();
    std::vector<T> local(static_cast<size_t>(counts[r]));
    for (int64_t i = 0; i < counts[r]; ++i) local[i] = InputValue<T>(r, i, base);
    outputs[r].resize(static_cast<size_t>(total));
    return PaddedAllGather(dm.comm(0), ConstBufferView::Of(absl::MakeConstSpan(local)), counts,
                           BufferView::Of(absl::MakeSpan(outputs[r])));
  });
  for (int r = 0; r < ranks; ++r) {
    LOOM_EXPECT_OK(statuses[r]) << "rank " << r;
    EXPECT_EQ(outputs[r], expected) << "rank " << r;
  }
}

template <typename T>
void ExpectReduceScatterKeepsOwnPiece(int ranks, const std::vector<int64_t>& counts, ReduceOp op,
                                      uint32_t seed) {
  SCOPED_TRACE(absl::StrCat(Describe(ranks, counts, seed), ", op ", static_cast<int>(op)));
  const int base = static_cast<int>(std::mt19937(seed)() % 1000);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  std::vector<T> reduced(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) {
    T acc = InputValue<T>(0, i, base);
    for (int r = 1; r < ranks; ++r) {
      const T x = InputValue<T>(r, i, base);
      acc = op == ReduceOp::kSum ? static_cast<T>(acc + x) : std::max(acc, x);
    }
    reduced[i] = acc;
  }
  std::vector<std::vector<T>> outputs(static_cast<size_t>(ranks));
  std::vector<absl::Status> statuses = RunOnMesh(LineOf(ranks), [&](const DeviceMesh& dm) {
    const int r = dm.rank();
    std::vector<T> full(static_cast<size_t>(total));
    for (int64_t i = 0; i < total; ++i) full[i] = InputValue<T>(r, i, base);
    outputs[r].resize(static_cast<size_t>(counts[r]));
    return PaddedReduceScatter(dm.comm(0), ConstBufferView::Of(absl::MakeConstSpan(full)), counts,
                               BufferView::Of(absl::MakeSpan(outputs[r])), op);
  });
  int64_t offset = 0;
  for (int r = 0; r < ranks; ++r) {
    LOOM_EXPECT_OK(statuses[r]) << "rank " << r;
    const std::vector<T> mine(reduced.begin() + offset, reduced.begin() + offset + counts[r]);
    EXPECT_EQ(outputs[r], mine) << "rank " << r;
    offset += counts[r];
  }
}

class PaddedCollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(PaddedCollectivesTest, AllGatherConcatenatesPiecesInRankOrder) {
  const int ranks = GetParam();
  uint32_t seed = 0x9ad0 + static_cast<uint32_t>(ranks);
  for (const std::vector<int64_t>& counts : CountPatterns(ranks)) {
    ExpectAllGatherConcatenates<int32_t>(ranks, counts, ++seed);
    ExpectAllGatherConcatenates<float>(ranks, counts, ++seed);
  }
}

TEST_P(PaddedCollectivesTest, ReduceScatterKeepsOwnPieceOfReduction) {
  const int ranks = GetParam();
  uint32_t seed = 0x5ca7 + static_cast<uint32_t>(ranks);
  for (const std::vector<int64_t>& counts : CountPatterns(ranks)) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      ExpectReduceScatterKeepsOwnPiece<int32_t>(ranks, counts, op, ++seed);
      ExpectReduceScatterKeepsOwnPiece<float>(ranks, counts, op, ++seed);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, PaddedCollectivesTest, ::testing::Range(1, 5),
                         [](const ::testing::TestParamInfo<int>& param_info) {
                           return absl::StrCat(param_info.param, "ranks");
                         });

// Bad arguments fail on every rank before any message, so no rank waits on another.
std::vector<absl::Status> OnTwoRanks(
    const std::function<absl::Status(Communicator&, int rank)>& body) {
  return RunOnMesh(LineOf(2), [&](const DeviceMesh& dm) { return body(dm.comm(0), dm.rank()); });
}

TEST(PaddedCollectivesErrorTest, CountsNotOnePerRank) {
  std::vector<float> in(1), out(6);
  std::vector<absl::Status> statuses = OnTwoRanks([&](Communicator& comm, int) {
    return PaddedAllGather(comm, ConstBufferView::Of(absl::MakeConstSpan(in)), {1, 2, 3},
                           BufferView::Of(absl::MakeSpan(out)));
  });
  for (const absl::Status& s : statuses) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("PaddedAllGather: 3 counts {1,2,3} for 2 ranks")));
  }
}

TEST(PaddedCollectivesErrorTest, NegativeCount) {
  std::vector<float> in(0), out(1);
  std::vector<absl::Status> statuses = OnTwoRanks([&](Communicator& comm, int) {
    return PaddedReduceScatter(comm, ConstBufferView::Of(absl::MakeConstSpan(in)), {1, -2},
                               BufferView::Of(absl::MakeSpan(out)), ReduceOp::kSum);
  });
  for (const absl::Status& s : statuses) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("PaddedReduceScatter: count of rank 1 is -2 in {1,-2}")));
  }
}

TEST(PaddedCollectivesErrorTest, InputSizeNotOwnCount) {
  std::vector<std::vector<float>> in(2, std::vector<float>(2)), out(2, std::vector<float>(4));
  std::vector<absl::Status> statuses = OnTwoRanks([&](Communicator& comm, int rank) {
    return PaddedAllGather(comm, ConstBufferView::Of(absl::MakeConstSpan(in[rank])), {1, 3},
                           BufferView::Of(absl::MakeSpan(out[rank])));
  });
  EXPECT_THAT(statuses[0],
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 0's input has 2 elements, expected 1 (counts {1,3})")));
  EXPECT_THAT(statuses[1],
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("rank 1's input has 2 elements, expected 3 (counts {1,3})")));
}

TEST(PaddedCollectivesErrorTest, OutputSizeNotTotal) {
  std::vector<std::vector<float>> in{{1}, {2, 3, 4}}, out(2, std::vector<float>(3));
  std::vector<absl::Status> statuses = OnTwoRanks([&](Communicator& comm, int rank) {
    return PaddedAllGather(comm, ConstBufferView::Of(absl::MakeConstSpan(in[rank])), {1, 3},
                           BufferView::Of(absl::MakeSpan(out[rank])));
  });
  for (const absl::Status& s : statuses) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("output has 3 elements, expected 4 (counts {1,3})")));
  }
}

TEST(PaddedCollectivesErrorTest, ReduceScatterInputNotSumOfCounts) {
  std::vector<std::vector<float>> in(2, std::vector<float>(5)), out{{0}, {0, 0, 0}};
  std::vector<absl::Status> statuses = OnTwoRanks([&](Communicator& comm, int rank) {
    return PaddedReduceScatter(comm, ConstBufferView::Of(absl::MakeConstSpan(in[rank])), {1, 3},
                               BufferView::Of(absl::MakeSpan(out[rank])), ReduceOp::kSum);
  });
  for (const absl::Status& s : statuses) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("input has 5 elements, expected 4 (counts {1,3})")));
  }
}

TEST(PaddedCollectivesErrorTest, OutputDTypeNotInputDType) {
  std::vector<std::vector<float>> in{{1}, {2}};
  std::vector<std::vector<int32_t>> out(2, std::vector<int32_t>(2));
  std::vector<absl::Status> statuses = OnTwoRanks([&](Communicator& comm, int rank) {
    return PaddedAllGather(comm, ConstBufferView::Of(absl::MakeConstSpan(in[rank])), {1, 1},
                           BufferView::Of(absl::MakeSpan(out[rank])));
  });
  for (const absl::Status& s : statuses) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("PaddedAllGather: input is f32, output is i32")));
  }
}

}  // namespace
}  // namespace tensor_parallel_internal
}  // namespace loom
