#include "tensor_parallel/internal/shard_ops.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "tensor_parallel/internal/dim_copy.h"

namespace loom {
namespace tensor_parallel_internal {
namespace {

std::vector<int64_t> WithDim(std::vector<int64_t> shape, int dim, int64_t extent) {
  shape[static_cast<size_t>(dim)] = extent;
  return shape;
}

int64_t LongestPiece(const std::vector<ShardExtent>& pieces) {
  int64_t longest = 0;
  for (const ShardExtent& p : pieces) longest = std::max(longest, p.length);
  return longest;
}

absl::Status CheckPiece(const char* what, const Tensor& local, int dim, ShardExtent piece) {
  if (local.dim(dim) != piece.length) {
    return absl::InternalError(absl::StrCat(what, ": local shape ", ShapeString(local.shape()),
                                            " has ", local.dim(dim), " along dim ", dim,
                                            ", the rank's piece is ", piece.length));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<ShardExtent> Pieces(int64_t size, int shards, ShardRule rule) {
  std::vector<ShardExtent> pieces;
  pieces.reserve(static_cast<size_t>(shards));
  for (int i = 0; i < shards; ++i) pieces.push_back(ShardExtentOf(size, shards, i, rule));
  return pieces;
}

absl::StatusOr<Tensor> SliceAlongDim(const Tensor& local, int dim, ShardExtent piece) {
  return local.Slice(dim, piece.offset, piece.length);
}

absl::StatusOr<Tensor> ToPartial(const Tensor& local, ReduceOp op, int coordinate) {
  if (coordinate == 0 || (op != ReduceOp::kSum && op != ReduceOp::kProd)) return local.Clone();
  LOOM_ASSIGN_OR_RETURN(Tensor identity, Tensor::Create(local.shape(), DType::kF32));
  if (op == ReduceOp::kProd) {
    LOOM_ASSIGN_OR_RETURN(absl::Span<float> values, identity.As<float>());
    std::fill(values.begin(), values.end(), 1.0f);
  }
  if (local.dtype() == DType::kF32) return identity;
  return identity.ConvertTo(local.dtype());  // 0 and 1 are exact in bf16
}

absl::StatusOr<Tensor> AllGatherAlongDim(const Tensor& local, int dim, int64_t full_extent,
                                         ShardRule rule, Communicator& comm) {
  const std::vector<ShardExtent> pieces = Pieces(full_extent, comm.size(), rule);
  LOOM_RETURN_IF_ERROR(
      CheckPiece("all-gather", local, dim, pieces[static_cast<size_t>(comm.rank())]));
  const int64_t longest = LongestPiece(pieces);
  // Every rank sends its piece padded to the longest one: [outer, longest, inner],
  // its own elements first ([outer, length, inner] is a prefix of that block).
  LOOM_ASSIGN_OR_RETURN(Tensor send, Tensor::Create(WithDim(local.shape(), dim, longest),
                                                    local.dtype()));
  if (local.size_bytes() > 0) std::memcpy(send.view().data(), local.view().data(), local.size_bytes());
  LOOM_ASSIGN_OR_RETURN(Tensor gathered,
                        Tensor::Create({comm.size(), send.numel()}, local.dtype()));
  LOOM_RETURN_IF_ERROR(comm.AllGather(send.view(), gathered.view()));

  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Create(WithDim(local.shape(), dim, full_extent),
                                                   local.dtype()));
  const DimLayout layout = LayoutAround(out.shape(), dim, out.dtype());
  const std::byte* blocks = gathered.view().data();
  for (size_t r = 0; r < pieces.size(); ++r) {
    CopyAlongDim(blocks + r * send.size_bytes(), pieces[r].length, 0, out.view().data(),
                 full_extent, pieces[r].offset, pieces[r].length, layout.outer,
                 layout.inner_bytes);
  }
  return out;
}

absl::StatusOr<Tensor> AllReduceTensor(const Tensor& local, ReduceOp op, Communicator& comm) {
  Tensor out = local.Clone();
  LOOM_RETURN_IF_ERROR(comm.AllReduce(out.view(), out.view(), op));
  return out;
}

absl::StatusOr<Tensor> ReduceScatterAlongDim(const Tensor& local, int dim, ShardRule rule,
                                             ReduceOp op, Communicator& comm) {
  const int64_t extent = local.dim(dim);
  const std::vector<ShardExtent> pieces = Pieces(extent, comm.size(), rule);
  const int64_t longest = LongestPiece(pieces);
  // Block r holds rank r's piece as [outer, length_r, inner] padded with zeros to
  // [outer, longest, inner]. The padding is reduced too and then dropped, so its
  // value does not matter for any op.
  LOOM_ASSIGN_OR_RETURN(Tensor block, Tensor::Create(WithDim(local.shape(), dim, longest),
                                                     local.dtype()));
  LOOM_ASSIGN_OR_RETURN(Tensor send, Tensor::Create({comm.size(), block.numel()}, local.dtype()));
  const DimLayout layout = LayoutAround(local.shape(), dim, local.dtype());
  for (size_t r = 0; r < pieces.size(); ++r) {
    CopyAlongDim(local.view().data(), extent, pieces[r].offset,
                 send.view().data() + r * block.size_bytes(), pieces[r].length, 0,
                 pieces[r].length, layout.outer, layout.inner_bytes);
  }
  LOOM_RETURN_IF_ERROR(comm.ReduceScatter(send.view(), block.view(), op));

  const ShardExtent mine = pieces[static_cast<size_t>(comm.rank())];
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Create(WithDim(local.shape(), dim, mine.length),
                                                   local.dtype()));
  if (out.size_bytes() > 0) std::memcpy(out.view().data(), block.view().data(), out.size_bytes());
  return out;
}

absl::StatusOr<Tensor> AllToAllDims(const Tensor& local, int from_dim, int64_t from_full_extent,
                                    int to_dim, ShardRule rule, Communicator& comm) {
  const size_t k = static_cast<size_t>(comm.size());
  const size_t me = static_cast<size_t>(comm.rank());
  const std::vector<ShardExtent> from_pieces = Pieces(from_full_extent, comm.size(), rule);
  const std::vector<ShardExtent> to_pieces = Pieces(local.dim(to_dim), comm.size(), rule);
  LOOM_RETURN_IF_ERROR(CheckPiece("all-to-all", local, from_dim, from_pieces[me]));

  // Rank r gets piece r of to_dim from every rank (with this rank's piece of
  // from_dim), and sends back its piece of from_dim for our piece of to_dim.
  std::vector<size_t> send_counts(k), recv_counts(k);
  for (size_t r = 0; r < k; ++r) {
    send_counts[r] = static_cast<size_t>(NumElements(WithDim(local.shape(), to_dim,
                                                             to_pieces[r].length)));
    recv_counts[r] = static_cast<size_t>(NumElements(
        WithDim(WithDim(local.shape(), to_dim, to_pieces[me].length), from_dim,
                from_pieces[r].length)));
  }
  LOOM_ASSIGN_OR_RETURN(Tensor send, Tensor::Create({local.numel()}, local.dtype()));
  const DimLayout send_layout = LayoutAround(local.shape(), to_dim, local.dtype());
  size_t position = 0;
  for (size_t r = 0; r < k; ++r) {
    CopyAlongDim(local.view().data(), local.dim(to_dim), to_pieces[r].offset,
                 send.view().data() + position, to_pieces[r].length, 0, to_pieces[r].length,
                 send_layout.outer, send_layout.inner_bytes);
    position += send_counts[r] * DTypeSize(local.dtype());
  }
  int64_t received = 0;
  for (size_t count : recv_counts) received += static_cast<int64_t>(count);
  LOOM_ASSIGN_OR_RETURN(Tensor recv, Tensor::Create({received}, local.dtype()));
  LOOM_RETURN_IF_ERROR(comm.AllToAllV(send.view(), send_counts, recv.view(), recv_counts));

  LOOM_ASSIGN_OR_RETURN(
      Tensor out,
      Tensor::Create(WithDim(WithDim(local.shape(), to_dim, to_pieces[me].length), from_dim,
                             from_full_extent),
                     local.dtype()));
  const DimLayout out_layout = LayoutAround(out.shape(), from_dim, out.dtype());
  position = 0;
  for (size_t r = 0; r < k; ++r) {
    CopyAlongDim(recv.view().data() + position, from_pieces[r].length, 0, out.view().data(),
                 from_full_extent, from_pieces[r].offset, from_pieces[r].length,
                 out_layout.outer, out_layout.inner_bytes);
    position += recv_counts[r] * DTypeSize(local.dtype());
  }
  return out;
}

}  // namespace tensor_parallel_internal
}  // namespace loom
