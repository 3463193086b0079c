#include "tensor_parallel/layers/internal/sharded_comm.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace loom {
namespace tp_layers_internal {
namespace {

absl::Status CheckCounts(const Communicator& comm, absl::Span<const int64_t> counts,
                         const char* what) {
  if (static_cast<int>(counts.size()) != comm.size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", counts.size(),
                                                   " piece counts for ", comm.size(), " ranks"));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<int64_t> ShardCounts(int64_t size, int shards, ShardRule rule, int64_t unit) {
  std::vector<int64_t> counts(static_cast<size_t>(shards));
  for (int r = 0; r < shards; ++r) counts[r] = ShardExtentOf(size, shards, r, rule).length * unit;
  return counts;
}

absl::StatusOr<std::vector<float>> AllGatherV(Communicator& comm, absl::Span<const float> local,
                                              absl::Span<const int64_t> counts, CommTally& tally) {
  LOOM_RETURN_IF_ERROR(CheckCounts(comm, counts, "AllGatherV"));
  const int64_t mine = counts[comm.rank()];
  if (static_cast<int64_t>(local.size()) != mine) {
    return absl::InvalidArgumentError(absl::StrCat("AllGatherV: rank ", comm.rank(), " has ",
                                                   local.size(), " elements, expected ", mine,
                                                   " (pieces ", absl::StrJoin(counts, ","), ")"));
  }
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  if (comm.size() == 1) return std::vector<float>(local.begin(), local.end());
  const int64_t block = *std::max_element(counts.begin(), counts.end());
  std::vector<float> padded_in(static_cast<size_t>(block), 0.0f);
  std::copy(local.begin(), local.end(), padded_in.begin());
  std::vector<float> gathered(static_cast<size_t>(block * comm.size()));
  tally.all_gather_bytes += static_cast<uint64_t>(total) * sizeof(float);
  ++tally.calls;
  LOOM_RETURN_IF_ERROR(comm.AllGather(ConstBufferView::Of(absl::MakeConstSpan(padded_in)),
                                      BufferView::Of(absl::MakeSpan(gathered))));
  if (block * comm.size() == total) return gathered;  // even pieces: nothing to trim
  std::vector<float> out(static_cast<size_t>(total));
  int64_t offset = 0;
  for (int r = 0; r < comm.size(); ++r) {
    std::copy_n(gathered.begin() + r * block, counts[r], out.begin() + offset);
    offset += counts[r];
  }
  return out;
}

absl::StatusOr<std::vector<float>> ReduceScatterV(Communicator& comm, absl::Span<const float> full,
                                                  absl::Span<const int64_t> counts, CommTally& tally) {
  LOOM_RETURN_IF_ERROR(CheckCounts(comm, counts, "ReduceScatterV"));
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  if (static_cast<int64_t>(full.size()) != total) {
    return absl::InvalidArgumentError(absl::StrCat("ReduceScatterV: input has ", full.size(),
                                                   " elements, pieces ", absl::StrJoin(counts, ","),
                                                   " sum to ", total));
  }
  if (comm.size() == 1) return std::vector<float>(full.begin(), full.end());
  const int64_t block = *std::max_element(counts.begin(), counts.end());
  std::vector<float> padded;
  absl::Span<const float> input = full;
  if (block * comm.size() != total) {
    padded.assign(static_cast<size_t>(block * comm.size()), 0.0f);
    int64_t offset = 0;
    for (int r = 0; r < comm.size(); ++r) {
      std::copy_n(full.begin() + offset, counts[r], padded.begin() + r * block);
      offset += counts[r];
    }
    input = padded;
  }
  std::vector<float> out(static_cast<size_t>(block));
  tally.reduce_scatter_bytes += static_cast<uint64_t>(total) * sizeof(float);
  ++tally.calls;
  LOOM_RETURN_IF_ERROR(comm.ReduceScatter(ConstBufferView::Of(input),
                                          BufferView::Of(absl::MakeSpan(out)), ReduceOp::kSum));
  out.resize(static_cast<size_t>(counts[comm.rank()]));
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
