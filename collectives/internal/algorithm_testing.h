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
#ifndef LOOM_COLLECTIVES_INTERNAL_ALGORITHM_TESTING_H_
#define LOOM_COLLECTIVES_INTERNAL_ALGORITHM_TESTING_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collectives/internal/call_context.h"
#include "collectives/transport/transport_harness.h"
#include "core/buffer_view.h"
#include "core/dtype.h"
#include "core/reduce_op.h"

namespace loom {
namespace collectives_internal {

using RankBody = std::function<absl::Status(const CallContext& ctx)>;

// RunAlgorithmRanks runs `body` on `world` ranks of a fresh group from `harness`,
// each with a CallContext of its own (tag base 0, a deadline `timeout` away, a fresh
// Scratch, `chunk_bytes`), and returns each rank's status in rank order.
std::vector<absl::Status> RunAlgorithmRanks(TransportHarness& harness, int world,
                                            const RankBody& body,
                                            size_t chunk_bytes = size_t{256} << 10,
                                            absl::Duration timeout = absl::Seconds(60));

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

}  // namespace collectives_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_INTERNAL_ALGORITHM_TESTING_H_
