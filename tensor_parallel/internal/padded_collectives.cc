#include "tensor_parallel/internal/padded_collectives.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/dtype.h"
#include "core/status_macros.h"

namespace loom {
namespace tensor_parallel_internal {
namespace {

struct PieceCounts {
  int64_t total = 0;
  int64_t largest = 0;
  int64_t mine = 0;
};

absl::StatusOr<PieceCounts> CheckCounts(const char* what, const Communicator& comm,
                                        absl::Span<const int64_t> counts) {
  if (counts.size() != static_cast<size_t>(comm.size())) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", counts.size(), " counts {",
                                                   absl::StrJoin(counts, ","), "} for ",
                                                   comm.size(), " ranks"));
  }
  PieceCounts pieces;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": count of rank ", r, " is ",
                                                     counts[r], " in {",
                                                     absl::StrJoin(counts, ","), "}"));
    }
    pieces.total += counts[r];
    pieces.largest = std::max(pieces.largest, counts[r]);
  }
  pieces.mine = counts[static_cast<size_t>(comm.rank())];
  return pieces;
}

absl::Status CheckSize(const char* what, const char* view_name, size_t size, int64_t expected,
                       absl::Span<const int64_t> counts, int rank) {
  if (static_cast<int64_t>(size) != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": rank ", rank, "'s ", view_name, " has ", size, " elements, expected ", expected,
        " (counts {", absl::StrJoin(counts, ","), "})"));
  }
  return absl::OkStatus();
}

absl::Status CheckSameDType(const char* what, DType input, DType output) {
  if (input != output) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": input is ", DTypeName(input),
                                                   ", output is ", DTypeName(output)));
  }
  return absl::OkStatus();
}

// Moves `length` elements between offsets of two buffers of the same dtype.
void CopyElements(const std::byte* src, int64_t src_offset, std::byte* dst, int64_t dst_offset,
                  int64_t length, size_t element_bytes) {
  if (length == 0) return;  // the views of empty pieces may hold null data
  std::memcpy(dst + static_cast<size_t>(dst_offset) * element_bytes,
              src + static_cast<size_t>(src_offset) * element_bytes,
              static_cast<size_t>(length) * element_bytes);
}

}  // namespace

absl::Status PaddedAllGather(Communicator& comm, ConstBufferView local,
                             absl::Span<const int64_t> counts, BufferView output) {
  constexpr char kWhat[] = "PaddedAllGather";
  LOOM_ASSIGN_OR_RETURN(const PieceCounts pieces, CheckCounts(kWhat, comm, counts));
  LOOM_RETURN_IF_ERROR(CheckSameDType(kWhat, local.dtype(), output.dtype()));
  LOOM_RETURN_IF_ERROR(CheckSize(kWhat, "input", local.size(), pieces.mine, counts, comm.rank()));
  LOOM_RETURN_IF_ERROR(
      CheckSize(kWhat, "output", output.size(), pieces.total, counts, comm.rank()));
  const size_t element_bytes = DTypeSize(local.dtype());
  if (comm.size() == 1) {
    CopyElements(local.data(), 0, output.data(), 0, pieces.total, element_bytes);
    return absl::OkStatus();
  }
  const int64_t padded_total = pieces.largest * comm.size();
  if (padded_total == pieces.total) return comm.AllGather(local, output);

  const size_t block = static_cast<size_t>(pieces.largest);
  // Zeroed so that no uninitialised bytes travel; the padding is dropped on arrival.
  std::vector<std::byte> padded_in(block * element_bytes);
  std::vector<std::byte> gathered(static_cast<size_t>(padded_total) * element_bytes);
  CopyElements(local.data(), 0, padded_in.data(), 0, pieces.mine, element_bytes);
  LOOM_RETURN_IF_ERROR(comm.AllGather(ConstBufferView(padded_in.data(), block, local.dtype()),
                                      BufferView(gathered.data(), block * comm.size(),
                                                 local.dtype())));
  int64_t offset = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    CopyElements(gathered.data(), pieces.largest * static_cast<int64_t>(r), output.data(), offset,
                 counts[r], element_bytes);
    offset += counts[r];
  }
  return absl::OkStatus();
}

absl::Status PaddedReduceScatter(Communicator& comm, ConstBufferView full,
                                 absl::Span<const int64_t> counts, BufferView output,
                                 ReduceOp op) {
  constexpr char kWhat[] = "PaddedReduceScatter";
  LOOM_ASSIGN_OR_RETURN(const PieceCounts pieces, CheckCounts(kWhat, comm, counts));
  LOOM_RETURN_IF_ERROR(CheckSameDType(kWhat, full.dtype(), output.dtype()));
  LOOM_RETURN_IF_ERROR(CheckSize(kWhat, "input", full.size(), pieces.total, counts, comm.rank()));
  LOOM_RETURN_IF_ERROR(CheckSize(kWhat, "output", output.size(), pieces.mine, counts, comm.rank()));
  const size_t element_bytes = DTypeSize(full.dtype());
  if (comm.size() == 1) {  // every op of one value is that value
    CopyElements(full.data(), 0, output.data(), 0, pieces.total, element_bytes);
    return absl::OkStatus();
  }
  const int64_t padded_total = pieces.largest * comm.size();
  if (padded_total == pieces.total) return comm.ReduceScatter(full, output, op);

  const size_t block = static_cast<size_t>(pieces.largest);
  // The padding is reduced with the rest and then dropped, so any value works for
  // every op; zeros keep uninitialised bytes off the wire.
  std::vector<std::byte> padded_in(static_cast<size_t>(padded_total) * element_bytes);
  std::vector<std::byte> block_out(block * element_bytes);
  int64_t offset = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    CopyElements(full.data(), offset, padded_in.data(), pieces.largest * static_cast<int64_t>(r),
                 counts[r], element_bytes);
    offset += counts[r];
  }
  LOOM_RETURN_IF_ERROR(comm.ReduceScatter(
      ConstBufferView(padded_in.data(), block * comm.size(), full.dtype()),
      BufferView(block_out.data(), block, full.dtype()), op));
  CopyElements(block_out.data(), 0, output.data(), 0, pieces.mine, element_bytes);
  return absl::OkStatus();
}

}  // namespace tensor_parallel_internal
}  // namespace loom
