// Test support for collective algorithms (testonly): runs one body per rank over a
// TransportHarness (threads over inproc, processes over shm), makes seeded distinct
// inputs, and checks results against a reference computed in rank order.
//
// Float bound. Reductions run in the dtype's own arithmetic in an order the
// algorithm picks, so a float sum over n ranks may differ from the exact sum by up
// to about (n - 1) * u * sum_r |x_r| (u: unit roundoff, 2^-24 f32, 2^-53 f64,
// 2^-11 f16, 2^-8 bf16); ExpectReduction allows n * u * sum_r |x_r| plus the
// smallest normal, and n * u * |exact| for products. min and max, and integers
// (wrapping), must be exact.
//
// Example:
//   RankInputs inputs = MakeInputs(DType::kF32, ReduceOp::kSum, /*world=*/4, /*count=*/1000, 7);
//   auto results = RunAlgorithmRanks(*MakeInprocHarness(), 4, [&](const CallContext& ctx) {
//     std::vector<std::byte> out(inputs.bytes_per_rank());
//     CollectiveArgs args = ...;   // input = inputs.View(ctx.rank()), output = out
//     LOOM_RETURN_IF_ERROR(RingAllReduce(ctx, args));
//     return ExpectReduction(inputs, ReduceOp::kSum, /*first=*/0, View(out, DType::kF32));
//   });
//
// The algorithm suite (gloo style). Every algorithm's test runs one matrix through one
// set of checks: it names its entry points in an AlgorithmUnderTest, makes its cases
// with Matrix and DTypeOpMatrix (world sizes, counts 0, 1, 3, n-1, 1000 and 65537, f32
// sum and i32 max, every dtype x op, in and out of place, chunk sizes, roots) and
// checks each with CheckCase; what only one algorithm has stays in its own test.
//
//   AlgorithmUnderTest Ring() {
//     AlgorithmUnderTest ring;
//     ring.all_reduce = RingAllReduce;   // ... every collective it has
//     return ring;
//   }
//   class RingMatrixTest : public ::testing::TestWithParam<AlgorithmCase> {};
//   TEST_P(RingMatrixTest, MatchesTheReference) {
//     LOOM_EXPECT_OK(CheckCase(Ring(), GetParam()));
//   }
//   INSTANTIATE_TEST_SUITE_P(Shared, RingMatrixTest, ::testing::ValuesIn(Matrix(Ring())),
//                            CaseName);
//   // Shared/RingMatrixTest.MatchesTheReference/all_reduce_w4_n1000_f32_sum_inplace_chunk4096
#ifndef LOOM_COLLECTIVES_INTERNAL_ALGORITHM_TESTING_H_
#define LOOM_COLLECTIVES_INTERNAL_ALGORITHM_TESTING_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collectives/collective_kind.h"
#include "collectives/internal/call_context.h"
#include "collectives/transport/transport_harness.h"
#include "core/buffer_view.h"
#include "core/dtype.h"
#include "core/reduce_op.h"
#include "gtest/gtest.h"

namespace loom {
namespace collectives_internal {

using RankBody = std::function<absl::Status(const CallContext& ctx)>;

// RunAlgorithmRanks runs `body` on `world` ranks of a fresh group from `harness`,
// each with a CallContext of its own (tag base 0, a deadline `timeout` away, a fresh
// Scratch, `chunk_bytes`), and returns each rank's status in rank order.
std::vector<absl::Status> RunAlgorithmRanks(TransportHarness& harness, int world,
                                            const RankBody& body,
                                            size_t chunk_bytes = size_t{256} << 10,
                                            absl::Duration timeout = absl::Seconds(60),
                                            PathEstimate agreed_path = {});

// WithPath wraps `inner` so that every rank's transport reports `path` as its
// estimate of the path to each peer (Transport::EstimatePath) and forwards the rest.
std::unique_ptr<TransportHarness> WithPath(std::unique_ptr<TransportHarness> inner,
                                           PathEstimate path);
// WithPaths: the same, with rank `rank`'s estimate of the path to `peer` given by
// paths(rank, peer).
std::unique_ptr<TransportHarness> WithPaths(std::unique_ptr<TransportHarness> inner,
                                            std::function<PathEstimate(int rank, int peer)> paths);

// AllOk folds per-rank statuses into one, naming the first failing rank.
absl::Status AllOk(const std::vector<absl::Status>& statuses);

// RankInputs: every rank's seeded input of `count` elements. Elements are distinct
// across ranks and indices (as far as the dtype's range allows), so a block sent to
// the wrong place shows. Products use values near 1 so they neither overflow nor
// vanish.
struct RankInputs {
  DType dtype = DType::kF32;
  size_t count = 0;
  std::vector<std::vector<std::byte>> data;  // data[rank]

  size_t bytes_per_rank() const { return count * DTypeSize(dtype); }
  ConstBufferView View(int rank) const;
};
RankInputs MakeInputs(DType dtype, ReduceOp op, int world, size_t count, uint64_t seed);

// ViewOf wraps bytes as a typed view of bytes.size() / DTypeSize(dtype) elements.
ConstBufferView ViewOf(const std::vector<std::byte>& bytes, DType dtype);
BufferView MutableViewOf(std::vector<std::byte>& bytes, DType dtype);

// ExpectReduction checks that got[i] is `op` over ranks of inputs.data[r][first + i]
// for every i < got.size(), within the bound above. Internal naming the first wrong
// element otherwise.
absl::Status ExpectReduction(const RankInputs& inputs, ReduceOp op, size_t first,
                             ConstBufferView got);

// ExpectSameBytes checks that `got` equals `want` bit for bit; Internal naming
// `what` and the first differing element otherwise.
absl::Status ExpectSameBytes(ConstBufferView want, ConstBufferView got, const std::string& what);

// RankOrderReduce returns op folded over ranks in rank order 0, 1, ..., n-1 in the
// dtype's own arithmetic (the reduction kernels), elements [first, first + count):
// the bitwise reference of deterministic mode.
std::vector<std::byte> RankOrderReduce(const RankInputs& inputs, ReduceOp op, size_t first,
                                       size_t count);

// Garbage returns `bytes` bytes of 0xCD: what an output holds before a call, so that
// an element the algorithm never wrote shows.
std::vector<std::byte> Garbage(size_t bytes);

// ---- The algorithm suite -------------------------------------------------------

// Chunk sizes of the matrix: RunAlgorithmRanks' default, and one small enough that a
// 65537-element buffer is cut into many chunks per block.
inline constexpr size_t kDefaultChunkBytes = size_t{256} << 10;
inline constexpr size_t kSmallChunkBytes = size_t{4} << 10;

// AlgorithmCase: one call shape. `count` is CollectiveArgs::count (per rank's block
// for the collectives of blocks); `root` is used by rooted kinds, `op` by reducing
// ones. `blocks` runs the all-reduce half of reduce_scatter or all_gather
// (RingReduceScatterBlocks, ...: `count` elements cut by Block) in place of the
// collective.
struct AlgorithmCase {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  int world = 1;
  size_t count = 0;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  bool in_place = false;
  int root = 0;
  size_t chunk_bytes = kDefaultChunkBytes;
  bool blocks = false;
  // What every rank's transport reports of the path to each peer (EstimatePath):
  // a long one makes the pipelined algorithms keep more chunks in flight
  // (ChunksInFlight), and it is every rank's CallContext::agreed_path too (the
  // trees' window, AgreedChunksInFlight). Zeros: the inproc transport's own
  // (nothing measured).
  PathEstimate path = {};

  uint64_t seed() const;
};

// CaseName names a case for gtest: kind, world, count, dtype, op (reducing kinds),
// placement, root (rooted kinds) and chunk bytes, e.g.
// "reduce_w5_n1000_i32_max_inplace_root4_chunk4096".
std::string CaseName(const ::testing::TestParamInfo<AlgorithmCase>& info);
void PrintTo(const AlgorithmCase& c, std::ostream* os);

using CollectiveFn = absl::Status (*)(const CallContext& ctx, const CollectiveArgs& args);
using ReduceScatterBlocksFn = absl::Status (*)(const CallContext& ctx, ReduceOp op,
                                               ConstBufferView input, BufferView output);
using AllGatherBlocksFn = absl::Status (*)(const CallContext& ctx, BufferView buffer);

// AlgorithmUnderTest: one algorithm's entry points, null for what it does not have,
// and what it promises beyond the collectives' contract.
struct AlgorithmUnderTest {
  CollectiveFn all_reduce = nullptr;
  CollectiveFn reduce_scatter = nullptr;
  CollectiveFn all_gather = nullptr;
  CollectiveFn broadcast = nullptr;
  CollectiveFn reduce = nullptr;
  CollectiveFn gather = nullptr;
  CollectiveFn scatter = nullptr;
  CollectiveFn all_to_all = nullptr;
  CollectiveFn barrier = nullptr;
  ReduceScatterBlocksFn reduce_scatter_blocks = nullptr;
  AllGatherBlocksFn all_gather_blocks = nullptr;
  // Every reduction is the rank-order fold bit for bit (RankOrderReduce), not only
  // within the float bound.
  bool rank_order_bitwise = false;
  // reduce_scatter_blocks leaves the output's other blocks as they were, rather than
  // holding partial results there.
  bool blocks_leave_the_rest = false;
};

// Roots of the rooted kinds in Matrix.
enum class MatrixRoots {
  kFirstAndLast,          // 0 and n-1
  kFirstSecondAndLast,    // 0, 1 and n-1; n-1 alone at the largest count
};

// Which cases of Matrix run in chunks of kSmallChunkBytes, so that the large counts
// pipeline through many chunks; the others run in chunks of kDefaultChunkBytes.
enum class MatrixChunks {
  kInPlace,    // the in-place ones: in the buffers the caller shares with the algorithm
  kFirstType,  // the first type's, in and out of place (and so every copy)
};

// MatrixOptions: what Matrix spans beyond its counts (MatrixCounts).
struct MatrixOptions {
  std::vector<int> worlds = {1, 2, 3, 4, 5, 8, 16};
  // (dtype, op) pairs of the reducing kinds. The kinds that only move bytes run the
  // first pair's op with the dtype cycling through AllDTypes() from case to case
  // (the element width is all a copy sees).
  std::vector<std::pair<DType, ReduceOp>> types = {{DType::kF32, ReduceOp::kSum},
                                                   {DType::kI32, ReduceOp::kMax}};
  // Only the first pair at the largest count: the others repeat its data movement
  // at the highest cost under the sanitizers.
  bool largest_count_first_type_only = false;
  MatrixRoots roots = MatrixRoots::kFirstAndLast;
  MatrixChunks small_chunks = MatrixChunks::kInPlace;
};

// MatrixCounts: 0, 1, 3, world - 1, 1000 and 65537 (empty, one, odd, fewer than
// ranks, large odd), each once, ascending.
std::vector<size_t> MatrixCounts(int world);

// Matrix: for every kind `algorithm` has (its blocks last, barrier on each world
// alone), every world x count x type x root x placement of `options`. Where one side
// of a call is world * count elements (reduce_scatter, all_gather, gather, scatter,
// all_to_all) the largest count becomes (65537 / world) | 1, keeping that side about
// 65537 elements (still odd, still many chunks).
std::vector<AlgorithmCase> Matrix(const AlgorithmUnderTest& algorithm,
                                  const MatrixOptions& options = {});

// LongPathCases: the f32 cases of `cases` with 1000 elements or more on `worlds`
// (all worlds but 1 where empty), each in 4 KiB chunks over two paths: a 4 ms round
// trip at 250 MB/s and a 100 us one at 100 MB/s (AlgorithmCase::path), so that the
// pipelined algorithms run with windows of 32 and 6 chunks.
std::vector<AlgorithmCase> LongPathCases(const std::vector<AlgorithmCase>& cases,
                                         const std::vector<int>& worlds = {});

// DTypeOpOptions: the worlds and counts on which DTypeOpMatrix runs every dtype x op.
struct DTypeOpOptions {
  std::vector<int> worlds;
  std::vector<size_t> counts;
  // Both placements of every case, or in and out of place in turn.
  bool both_placements = true;
  size_t chunk_bytes = kDefaultChunkBytes;
};

// DTypeOpMatrix: for every reducing collective `algorithm` has (all_reduce,
// reduce_scatter, reduce; not the blocks), every dtype x op (sum, prod, min, max) on
// the worlds x counts of `options`; rooted at n-1. Under a sanitizer (core/sanitizers.h)
// each dtype with one op, the four ops in turn.
std::vector<AlgorithmCase> DTypeOpMatrix(const AlgorithmUnderTest& algorithm,
                                         const DTypeOpOptions& options);

// kNeverCalls: a rank of RunInPlace that never calls.
inline constexpr size_t kNeverCalls = ~size_t{0};

// RunInPlace runs `fn` (args.kind `kind`) in place over counts[r] zero elements of
// `dtype` on rank r of counts.size() thread ranks (chunks of `chunk_bytes`, a
// deadline `timeout` away), a rank whose count is kNeverCalls returning OK without
// calling, and returns each rank's status: for the tests in which ranks that
// disagree on the count, or a rank that never comes, must fail rather than hang.
std::vector<absl::Status> RunInPlace(CollectiveFn fn, CollectiveKind kind,
                                     const std::vector<size_t>& counts, DType dtype,
                                     size_t chunk_bytes, absl::Duration timeout);

// Concat joins lists of cases, leaving out a case named as an earlier one (the same
// test twice: the lists of a test overlap where, say, the dtype x op matrix meets the
// f32 sum and i32 max of the main one; gtest refuses two tests of one name).
std::vector<AlgorithmCase> Concat(const std::vector<std::vector<AlgorithmCase>>& lists);

// CheckCase runs `c` with `algorithm`'s entry point for c.kind on c.world thread
// ranks (inproc, chunks of c.chunk_bytes) over seeded distinct inputs and checks:
// every output element against the reference (reductions within ExpectReduction's
// bound, or bit for bit against RankOrderReduce where rank_order_bitwise; every rank
// of an all-reduce bit for bit the same; copies bit for bit), outputs filled with
// Garbage beforehand so an element never written shows, and inputs unchanged
// outside what aliases the output. Barrier: in each of 5 rounds a different rank
// comes 20 ms late, and no rank may leave before every rank entered. Returns the
// first failure (Internal naming the rank, block and element), or a rank's error.
absl::Status CheckCase(const AlgorithmUnderTest& algorithm, const AlgorithmCase& c);

}  // namespace collectives_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_INTERNAL_ALGORITHM_TESTING_H_
