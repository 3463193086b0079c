#include "tensor_parallel/layers/internal/sharded_comm.h"

#include <algorithm>
#include <numeric>

#include "core/status_macros.h"
#include "tensor_parallel/internal/padded_collectives.h"

namespace loom {
namespace tp_layers_internal {

using tensor_parallel_internal::PaddedAllGather;
using tensor_parallel_internal::PaddedReduceScatter;

namespace {

// ElementsOrZero sizes an output before PaddedAllGather / PaddedReduceScatter have
// checked the counts; with bad counts they fail before touching it.
int64_t ElementsOrZero(absl::Span<const int64_t> counts) {
  int64_t total = 0;
  for (int64_t c : counts) total += std::max<int64_t>(c, 0);
  return total;
}

}  // namespace

std::vector<int64_t> ShardCounts(int64_t size, int shards, ShardRule rule, int64_t unit) {
  std::vector<int64_t> counts(static_cast<size_t>(shards));
  for (int r = 0; r < shards; ++r) counts[r] = ShardExtentOf(size, shards, r, rule).length * unit;
  return counts;
}

absl::StatusOr<std::vector<float>> AllGatherV(Communicator& comm, absl::Span<const float> local,
                                              absl::Span<const int64_t> counts, CommTally& tally) {
  std::vector<float> out(static_cast<size_t>(ElementsOrZero(counts)));
  LOOM_RETURN_IF_ERROR(AllGatherVInto(comm, local, counts, tally, absl::MakeSpan(out)));
  return out;
}

absl::Status AllGatherVInto(Communicator& comm, absl::Span<const float> local,
                            absl::Span<const int64_t> counts, CommTally& tally,
                            absl::Span<float> out) {
  const int64_t total = ElementsOrZero(counts);
  if (static_cast<int64_t>(out.size()) != total) {
    return absl::InvalidArgumentError(absl::StrCat("AllGatherV: the pieces hold ", total,
                                                   " elements; the output has room for ",
                                                   out.size()));
  }
  LOOM_RETURN_IF_ERROR(
      PaddedAllGather(comm, ConstBufferView::Of(local), counts, BufferView::Of(out)));
  if (comm.size() > 1) {
    tally.all_gather_bytes += out.size() * sizeof(float);
    ++tally.calls;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> ReduceScatterV(Communicator& comm, absl::Span<const float> full,
                                                  absl::Span<const int64_t> counts, CommTally& tally) {
  const size_t rank = static_cast<size_t>(comm.rank());
  std::vector<float> out(
      rank < counts.size() ? static_cast<size_t>(ElementsOrZero(counts.subspan(rank, 1))) : 0);
  LOOM_RETURN_IF_ERROR(PaddedReduceScatter(comm, ConstBufferView::Of(full), counts,
                                           BufferView::Of(absl::MakeSpan(out)), ReduceOp::kSum));
  if (comm.size() > 1) {
    tally.reduce_scatter_bytes += full.size() * sizeof(float);
    ++tally.calls;
  }
  return out;
}

absl::Status AllReduceSum(Communicator& comm, absl::Span<float> data, CommTally& tally) {
  if (comm.size() == 1) return absl::OkStatus();
  tally.all_reduce_bytes += data.size() * sizeof(float);
  ++tally.calls;
  return comm.AllReduce(data, ReduceOp::kSum);
}

absl::Status AllReduceMax(Communicator& comm, absl::Span<float> data, CommTally& tally) {
  if (comm.size() == 1) return absl::OkStatus();
  tally.all_reduce_bytes += data.size() * sizeof(float);
  ++tally.calls;
  return comm.AllReduce(data, ReduceOp::kMax);
}

absl::StatusOr<std::vector<float>> GatherLastDim(Communicator& comm, absl::Span<const float> local,
                                                 int64_t rows, absl::Span<const int64_t> widths,
                                                 CommTally& tally) {
  std::vector<int64_t> counts(widths.begin(), widths.end());
  for (int64_t& c : counts) c *= rows;
  LOOM_ASSIGN_OR_RETURN(std::vector<float> pieces, AllGatherV(comm, local, counts, tally));
  const int64_t total_width = std::accumulate(widths.begin(), widths.end(), int64_t{0});
  std::vector<float> out(static_cast<size_t>(rows * total_width));
  int64_t piece_offset = 0;
  int64_t col_offset = 0;
  for (size_t r = 0; r < widths.size(); ++r) {
    for (int64_t i = 0; i < rows; ++i) {
      std::copy_n(pieces.begin() + piece_offset + i * widths[r], widths[r],
                  out.begin() + i * total_width + col_offset);
    }
    piece_offset += rows * widths[r];
    col_offset += widths[r];
  }
  return out;
}

}  // namespace tp_layers_internal
}  // namespace loom
