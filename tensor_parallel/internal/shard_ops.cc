#include "tensor_parallel/internal/shard_ops.h"

#include <algorithm>
#include <cstddef>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "tensor_parallel/internal/dim_copy.h"
#include "tensor_parallel/internal/padded_collectives.h"

namespace loom {
namespace tensor_parallel_internal {
namespace {

std::vector<int64_t> WithDim(std::vector<int64_t> shape, int dim, int64_t extent) {
  shape[static_cast<size_t>(dim)] = extent;
  return shape;
}

// PieceElements returns the element count of each piece of `dim` of `shape`.
std::vector<int64_t> PieceElements(const std::vector<int64_t>& shape, int dim,
                                   const std::vector<ShardExtent>& pieces) {
  std::vector<int64_t> counts;
  counts.reserve(pieces.size());
  for (const ShardExtent& p : pieces) counts.push_back(NumElements(WithDim(shape, dim, p.length)));
  return counts;
}

std::vector<size_t> AsSizes(const std::vector<int64_t>& counts) {
  return std::vector<size_t>(counts.begin(), counts.end());
}

// PackPieces returns `t`'s pieces of `dim` one after another in rank order, each
// contiguous ([outer, length, inner]), as a flat tensor: the layout of the
// collectives' rank-ordered blocks. The pieces cover the whole dimension.
absl::StatusOr<Tensor> PackPieces(const Tensor& t, int dim,
                                  const std::vector<ShardExtent>& pieces) {
  LOOM_ASSIGN_OR_RETURN(Tensor packed, Tensor::Create({t.numel()}, t.dtype()));
  const DimLayout layout = LayoutAround(t.shape(), dim, t.dtype());
  size_t position = 0;
  for (const ShardExtent& p : pieces) {
    CopyAlongDim(t.view().data(), layout.extent, p.offset, packed.view().data() + position,
                 p.length, 0, p.length, layout.outer, layout.inner_bytes);
    position += static_cast<size_t>(layout.outer * p.length) * layout.inner_bytes;
  }
  return packed;
}

// UnpackPieces is the inverse of PackPieces: it copies the rank-ordered pieces in
// `packed` to their places along `dim` of `out`.
void UnpackPieces(const std::byte* packed, const std::vector<ShardExtent>& pieces, int dim,
                  Tensor& out) {
  const DimLayout layout = LayoutAround(out.shape(), dim, out.dtype());
  size_t position = 0;
  for (const ShardExtent& p : pieces) {
    CopyAlongDim(packed + position, p.length, 0, out.view().data(), layout.extent, p.offset,
                 p.length, layout.outer, layout.inner_bytes);
    position += static_cast<size_t>(layout.outer * p.length) * layout.inner_bytes;
  }
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
  // The local tensor is one piece, so it is already contiguous.
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Create(WithDim(local.shape(), dim, full_extent),
                                                   local.dtype()));
  LOOM_ASSIGN_OR_RETURN(Tensor packed, Tensor::Create({out.numel()}, local.dtype()));
  LOOM_RETURN_IF_ERROR(PaddedAllGather(comm, local.view(),
                                       PieceElements(out.shape(), dim, pieces), packed.view()));
  UnpackPieces(packed.view().data(), pieces, dim, out);
  return out;
}

absl::StatusOr<Tensor> AllReduceTensor(const Tensor& local, ReduceOp op, Communicator& comm) {
  Tensor out = local.Clone();
  LOOM_RETURN_IF_ERROR(comm.AllReduce(out.view(), out.view(), op));
  return out;
}

absl::StatusOr<Tensor> ReduceScatterAlongDim(const Tensor& local, int dim, ShardRule rule,
                                             ReduceOp op, Communicator& comm) {
  const std::vector<ShardExtent> pieces = Pieces(local.dim(dim), comm.size(), rule);
  const ShardExtent mine = pieces[static_cast<size_t>(comm.rank())];
  LOOM_ASSIGN_OR_RETURN(Tensor send, PackPieces(local, dim, pieces));
  LOOM_ASSIGN_OR_RETURN(Tensor out, Tensor::Create(WithDim(local.shape(), dim, mine.length),
                                                   local.dtype()));
  LOOM_RETURN_IF_ERROR(PaddedReduceScatter(comm, send.view(),
                                           PieceElements(local.shape(), dim, pieces), out.view(),
                                           op));
  return out;
}

absl::StatusOr<Tensor> AllToAllDims(const Tensor& local, int from_dim, int64_t from_full_extent,
                                    int to_dim, ShardRule rule, Communicator& comm) {
  const size_t me = static_cast<size_t>(comm.rank());
  const std::vector<ShardExtent> from_pieces = Pieces(from_full_extent, comm.size(), rule);
  const std::vector<ShardExtent> to_pieces = Pieces(local.dim(to_dim), comm.size(), rule);
  LOOM_RETURN_IF_ERROR(CheckPiece("all-to-all", local, from_dim, from_pieces[me]));
  LOOM_ASSIGN_OR_RETURN(
      Tensor out,
      Tensor::Create(WithDim(WithDim(local.shape(), to_dim, to_pieces[me].length), from_dim,
                             from_full_extent),
                     local.dtype()));

  // Rank r gets piece r of to_dim from every rank (with this rank's piece of
  // from_dim), and sends back its piece of from_dim for our piece of to_dim.
  const std::vector<size_t> send_counts =
      AsSizes(PieceElements(local.shape(), to_dim, to_pieces));
  const std::vector<size_t> recv_counts =
      AsSizes(PieceElements(out.shape(), from_dim, from_pieces));
  LOOM_ASSIGN_OR_RETURN(Tensor send, PackPieces(local, to_dim, to_pieces));
  LOOM_ASSIGN_OR_RETURN(Tensor recv, Tensor::Create({out.numel()}, local.dtype()));
  LOOM_RETURN_IF_ERROR(comm.AllToAllV(send.view(), send_counts, recv.view(), recv_counts));
  UnpackPieces(recv.view().data(), from_pieces, from_dim, out);
  return out;
}

}  // namespace tensor_parallel_internal
}  // namespace loom
