// Collectives over uneven pieces for the parallel layers (private), each adding
// its logical payload to a CommTally.
//
// The Communicator's AllGather and ReduceScatter move equal blocks. Layers shard
// sequences, features, vocabularies and heads with ShardExtentOf, whose pieces
// differ by up to ceil(n/k) - floor(n/k) (tp = 3 and n = 10: 4,3,3 or 4,4,2).
// AllGatherV and ReduceScatterV go through padded_collectives.h, which pads every
// piece to the largest one, runs the equal-block collective, and trims (why, and
// what it costs, is written there). With even pieces no padding is added, so byte
// counts equal the analytical ones.
#ifndef LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_SHARDED_COMM_H_
#define LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_SHARDED_COMM_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/communicator.h"
#include "tensor_parallel/layers/comm_tally.h"
#include "tensor_parallel/placement.h"

namespace loom {
namespace tp_layers_internal {

// ShardCounts returns, per rank, ShardExtentOf(size, shards, r, rule).length * unit.
std::vector<int64_t> ShardCounts(int64_t size, int shards, ShardRule rule, int64_t unit);

// Each collective helper adds its logical payload to `tally` (see comm_tally.h)
// when it communicates (never on one rank).
//
// AllGatherV returns every rank's `local` piece (counts[r] elements on rank r)
// concatenated in rank order. InvalidArgument when counts has not comm.size()
// entries or local.size() != counts[comm.rank()]; otherwise the collective's error.
absl::StatusOr<std::vector<float>> AllGatherV(Communicator& comm, absl::Span<const float> local,
                                              absl::Span<const int64_t> counts, CommTally& tally);
// AllGatherVInto is AllGatherV into `out` (sum(counts) elements; InvalidArgument
// naming both sizes otherwise).
absl::Status AllGatherVInto(Communicator& comm, absl::Span<const float> local,
                            absl::Span<const int64_t> counts, CommTally& tally,
                            absl::Span<float> out);

// ReduceScatterV sums `full` (sum(counts) elements on every rank) over the ranks
// and returns this rank's piece, elements [sum(counts[0..r)), + counts[r]).
// InvalidArgument when the sizes disagree; otherwise the collective's error.
absl::StatusOr<std::vector<float>> ReduceScatterV(Communicator& comm, absl::Span<const float> full,
                                                  absl::Span<const int64_t> counts, CommTally& tally);

// AllReduceSum sums `data` over the ranks in place (no call on one rank).
absl::Status AllReduceSum(Communicator& comm, absl::Span<float> data, CommTally& tally);

// AllReduceMax takes the maximum of `data` over the ranks in place.
absl::Status AllReduceMax(Communicator& comm, absl::Span<float> data, CommTally& tally);

// GatherLastDim reassembles a [rows, sum(widths)] matrix from each rank's
// [rows, widths[r]] column block (an AllGatherV plus a transpose of blocks).
absl::StatusOr<std::vector<float>> GatherLastDim(Communicator& comm, absl::Span<const float> local,
                                                 int64_t rows, absl::Span<const int64_t> widths,
                                                 CommTally& tally);

}  // namespace tp_layers_internal
}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_LAYERS_INTERNAL_SHARDED_COMM_H_
