// All-gather and reduce-scatter of uneven contiguous pieces, by padding every piece
// to the largest one: the one place both sharded tensors (shard_ops.h) and the
// parallel layers (layers/internal/sharded_comm.h) turn ShardExtentOf's uneven
// pieces into the Communicator's equal-block collectives.
//
// Why padding: the equal-block AllGather and ReduceScatter run as one
// bandwidth-optimal ring, and pieces from ShardExtentOf differ by at most
// ceil(n/k) elements, so padding costs little. An AllToAllV gather would move exact
// sizes but as k - 1 point-to-point rounds, and reduce-scatter has no V form. With
// equal counts nothing is padded or copied: the collective runs on the caller's
// buffers.
//
// Example (3 ranks, counts {2, 1, 0}, f32):
//   rank 0: local {1, 2};  rank 1: local {3};  rank 2: local {}
//   PaddedAllGather(comm, local, counts, out);   // out == {1, 2, 3} on every rank
//   full == {1, 2, 3} on every rank:
//   PaddedReduceScatter(comm, full, counts, out, ReduceOp::kSum);
//     // rank 0: out == {3, 6};  rank 1: out == {9};  rank 2: out == {}
#ifndef LOOM_TENSOR_PARALLEL_INTERNAL_PADDED_COLLECTIVES_H_
#define LOOM_TENSOR_PARALLEL_INTERNAL_PADDED_COLLECTIVES_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "collectives/communicator.h"
#include "core/buffer_view.h"
#include "core/reduce_op.h"

namespace loom {
namespace tensor_parallel_internal {

// Both functions make exactly one collective call on `comm` (also for empty
// pieces), so every rank of the group must call them in the same order; on one rank
// they copy and leave the communicator alone, as there is nothing to exchange.
// counts[r] is rank r's piece in elements of the views' dtype. They return
// InvalidArgument, naming the values, when counts has not comm.size() entries, a
// count is negative, a view's size or dtype does not fit the counts, checked before
// any message; otherwise the collective's error.

// PaddedAllGather writes every rank's `local` piece (counts[comm.rank()] elements)
// into `output` (sum(counts) elements), concatenated in rank order.
absl::Status PaddedAllGather(Communicator& comm, ConstBufferView local,
                             absl::Span<const int64_t> counts, BufferView output);

// PaddedReduceScatter reduces `full` (sum(counts) elements, pieces in rank order)
// over the ranks with `op` and writes this rank's piece, elements
// [sum(counts[0..rank)), + counts[rank]), into `output` (counts[rank] elements).
absl::Status PaddedReduceScatter(Communicator& comm, ConstBufferView full,
                                 absl::Span<const int64_t> counts, BufferView output,
                                 ReduceOp op);

}  // namespace tensor_parallel_internal
}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_INTERNAL_PADDED_COLLECTIVES_H_
