#include "tensor_parallel/layers/parallel_self_attention.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/compute_timer.h"
#include "core/parallel_for.h"
#include "core/status_macros.h"
#include "tensor_parallel/layers/flash_attention.h"
#include "tensor_parallel/layers/gemm.h"
#include "tensor_parallel/layers/internal/layer_math.h"

namespace loom {

namespace {

constexpr char kName[] = "ParallelSelfAttention";

// HeadView is one (batch, head) matrix [s, head_dim] inside a [s, b, width] tensor
// whose column `col` starts the head: rows are b * width apart.
ConstMatrixView HeadView(absl::Span<const float> data, int64_t s, int64_t b, int64_t width,
                         int64_t batch, int64_t col, int64_t head_dim) {
  return ConstMatrixView{data.subspan(static_cast<size_t>(batch * width + col)), s, head_dim,
                         b * width};
}
MatrixView HeadView(absl::Span<float> data, int64_t s, int64_t b, int64_t width, int64_t batch,
                    int64_t col, int64_t head_dim) {
  return MatrixView{data.subspan(static_cast<size_t>(batch * width + col)), s, head_dim,
                    b * width};
}

// HeadBlock is one (batch, head)'s queries, keys and values inside the local
// [s, b, 3 * width] QKV activation, whose Q, K and V column blocks are width apart.
AttentionBlock HeadBlock(absl::Span<const float> qkv, int64_t s, int64_t b, int64_t width,
                         int64_t batch, int64_t col, int64_t head_dim) {
  return AttentionBlock{HeadView(qkv, s, b, 3 * width, batch, col, head_dim),
                        HeadView(qkv, s, b, 3 * width, batch, width + col, head_dim),
                        HeadView(qkv, s, b, 3 * width, batch, 2 * width + col, head_dim)};
}

FlashAttentionOptions FlashOptions(const ParallelSelfAttentionOptions& options) {
  FlashAttentionOptions flash;
  flash.causal = options.causal;
  return flash;
}

RingAttentionOptions RingOptions(const ParallelSelfAttentionOptions& options) {
  RingAttentionOptions ring;
  ring.layout = options.cp_layout;
  ring.causal = options.causal;
  return ring;
}

// The ring's block buffers, one set per rank thread, shared by the rank's layers: they
// grow to the largest layer once and are reused every step (ring_attention.h).
RingAttentionBuffers& ThreadRingBuffers() {
  thread_local RingAttentionBuffers buffers;
  return buffers;
}

// The all-to-all variant's staging buffers, likewise one set per rank thread.
UlyssesAttentionBuffers& ThreadUlyssesBuffers() {
  thread_local UlyssesAttentionBuffers buffers;
  return buffers;
}

}  // namespace

RingOverlapStats ThisThreadRingOverlap() { return ThreadRingBuffers().stats(); }

absl::string_view CpCommName(CpComm comm) { return comm == CpComm::kRing ? "ring" : "a2a"; }

absl::StatusOr<ParallelSelfAttention> ParallelSelfAttention::Create(
    const Tensor& qkv_weight, const Tensor* qkv_bias, const Tensor& out_weight,
    const Tensor* out_bias, Communicator& tp, const ParallelSelfAttentionOptions& options) {
  const int64_t h = out_weight.rank() == 2 ? out_weight.dim(0) : -1;
  if (h < 1 || out_weight.shape() != std::vector<int64_t>{h, h} ||
      qkv_weight.shape() != std::vector<int64_t>{3 * h, h}) {
    return absl::InvalidArgumentError(absl::StrCat(
        kName, ": qkv_weight ", ShapeString(qkv_weight.shape()), " and out_weight ",
        ShapeString(out_weight.shape()), " must be [3h, h] and [h, h]"));
  }
  if (qkv_bias != nullptr && qkv_bias->shape() != std::vector<int64_t>{3 * h}) {
    return absl::InvalidArgumentError(absl::StrCat(
        kName, ": qkv_bias shape ", ShapeString(qkv_bias->shape()), " must be [", 3 * h, "]"));
  }
  if (options.num_heads < 1 || h % options.num_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": num_heads ", options.num_heads,
                                                   " must be >= 1 and divide hidden ", h));
  }
  if (options.context_parallel != nullptr && options.context_parallel->size() > 1 &&
      options.cp_sequence_length < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": cp_sequence_length ", options.cp_sequence_length,
                     " must be >= 1 under context parallelism (cp ",
                     options.context_parallel->size(), ")"));
  }
  const int64_t d = h / options.num_heads;
  const ShardExtent heads = ShardExtentOf(options.num_heads, tp.size(), tp.rank(), options.rule);
  if (options.context_parallel != nullptr && options.cp_comm == CpComm::kAllToAll) {
    if (absl::Status s = CheckUlyssesHeads(heads.length, options.context_parallel->size());
        !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(kName, ": cp_comm a2a: tp rank ", tp.rank(),
                                                     " holds ", heads.length, " of ",
                                                     options.num_heads, " heads: ", s.message()));
    }
  }
  const int64_t lo = heads.offset * d, width = heads.length * d;
  // This rank's Q, K and V rows: three slices of the [Q; K; V] weight.
  std::vector<Tensor> rows, biases;
  for (int64_t part = 0; part < 3; ++part) {
    LOOM_ASSIGN_OR_RETURN(Tensor r, qkv_weight.Slice(0, part * h + lo, width));
    rows.push_back(std::move(r));
    if (qkv_bias != nullptr) {
      LOOM_ASSIGN_OR_RETURN(Tensor b, qkv_bias->Slice(0, part * h + lo, width));
      biases.push_back(std::move(b));
    }
  }
  LOOM_ASSIGN_OR_RETURN(Tensor local_qkv, Tensor::Concat(rows, 0));
  Tensor local_qkv_bias;
  if (qkv_bias != nullptr) {
    LOOM_ASSIGN_OR_RETURN(local_qkv_bias, Tensor::Concat(biases, 0));
  }
  std::vector<int64_t> widths;
  for (int r = 0; r < tp.size(); ++r) {
    widths.push_back(3 * d * ShardExtentOf(options.num_heads, tp.size(), r, options.rule).length);
  }
  ColumnParallelOptions column;
  column.sequence_parallel = options.sequence_parallel;
  column.sequence_length = options.sequence_length;
  column.rule = options.rule;
  column.weight_dtype = options.weight_dtype;
  LOOM_ASSIGN_OR_RETURN(
      ColumnParallelLinear qkv,
      ColumnParallelLinear::FromShard(local_qkv, qkv_bias != nullptr ? &local_qkv_bias : nullptr,
                                      std::move(widths), tp, column));
  RowParallelOptions row;
  row.sequence_parallel = options.sequence_parallel;
  row.sequence_length = options.sequence_length;
  row.rule = options.rule;
  row.weight_dtype = options.weight_dtype;
  LOOM_ASSIGN_OR_RETURN(Tensor local_out, out_weight.Slice(1, lo, width));
  LOOM_ASSIGN_OR_RETURN(RowParallelLinear out,
                        RowParallelLinear::FromShard(local_out, out_bias, tp, row));
  ParallelSelfAttention attn(std::move(qkv), std::move(out));
  attn.options_ = options;
  attn.hidden_ = h;
  attn.head_dim_ = d;
  attn.heads_ = heads;
  return attn;
}

absl::StatusOr<Tensor> ParallelSelfAttention::Forward(const Tensor& input) {
  if (input.rank() != 3 || input.dim(2) != hidden_) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": input shape ",
                                                   ShapeString(input.shape()), " must be [s, b, ",
                                                   hidden_, "]"));
  }
  LOOM_ASSIGN_OR_RETURN(Tensor qkv, qkv_.Forward(input));  // [s, b, 3L], s gathered
  const int64_t s = qkv.dim(0), b = qkv.dim(1);
  state_.qkv = std::move(qkv);
  LOOM_RETURN_IF_ERROR(CoreForward(s, b));
  state_.seq = s;
  state_.batch = b;
  state_.valid = true;
  return out_.Forward(state_.ctx);
}

absl::Status ParallelSelfAttention::CoreForward(int64_t s, int64_t b) {
  const int64_t d = head_dim_, local = heads_.length, L = local * d;
  LOOM_ASSIGN_OR_RETURN(state_.ctx, Tensor::Create({s, b, L}));
  state_.lse.assign(static_cast<size_t>(b * local * s), 0.0f);
  LOOM_ASSIGN_OR_RETURN(const absl::Span<const float> qkv_values,
                        std::as_const(state_.qkv).As<float>());
  LOOM_ASSIGN_OR_RETURN(const absl::Span<float> ctx, state_.ctx.As<float>());
  const ScopedComputeTimer timer(ComputeKind::kAttention);  // the job's step breakdown
  const auto lse_of = [&](int64_t pair) {
    return absl::MakeSpan(state_.lse).subspan(static_cast<size_t>(pair * s), static_cast<size_t>(s));
  };
  if (ContextParallel()) {
    std::vector<RingAttentionHead> heads;
    heads.reserve(static_cast<size_t>(b * local));
    for (int64_t pair = 0; pair < b * local; ++pair) {
      const int64_t bi = pair / local, j = pair % local;
      const AttentionBlock block = HeadBlock(qkv_values, s, b, L, bi, j * d, d);
      heads.push_back(RingAttentionHead{block.q, block.k, block.v,
                                        HeadView(ctx, s, b, L, bi, j * d, d),
                                        lse_of(pair)});
    }
    if (options_.cp_comm == CpComm::kAllToAll) {
      return UlyssesAttentionForward(*options_.context_parallel, heads,
                                     options_.cp_sequence_length, RingOptions(options_),
                                     &ThreadUlyssesBuffers());
    }
    return RingAttentionForward(*options_.context_parallel, heads, options_.cp_sequence_length,
                                RingOptions(options_), &ThreadRingBuffers());
  }
  // The (batch, head) pairs are independent and write disjoint columns of state_.ctx and
  // rows of state_.lse: they run on the rank's threads, with the same bits at any count.
  return ParallelFor(b * local, GemmThreads(), [&](int64_t first, int64_t end) {
    for (int64_t pair = first; pair < end; ++pair) {
      const int64_t bi = pair / local, j = pair % local;
      LOOM_RETURN_IF_ERROR(FlashAttentionForward(
          HeadBlock(qkv_values, s, b, L, bi, j * d, d),
          HeadView(ctx, s, b, L, bi, j * d, d), lse_of(pair),
          FlashOptions(options_)));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<Tensor> ParallelSelfAttention::Backward(const Tensor& grad_output) {
  if (!state_.valid) {
    return absl::FailedPreconditionError(absl::StrCat(kName, ": Backward before Forward"));
  }
  LOOM_ASSIGN_OR_RETURN(Tensor grad_ctx, out_.Backward(grad_output));  // [s, b, L]
  LOOM_ASSIGN_OR_RETURN(Tensor dqkv, CoreBackward(grad_ctx));
  return qkv_.Backward(dqkv);
}

absl::StatusOr<Tensor> ParallelSelfAttention::BackwardInput(const Tensor& grad_output,
                                                            AttentionWeightGradWork& work) {
  if (!state_.valid) {
    return absl::FailedPreconditionError(absl::StrCat(kName, ": Backward before Forward"));
  }
  LOOM_ASSIGN_OR_RETURN(Tensor grad_ctx, out_.BackwardInput(grad_output, work.out));
  LOOM_ASSIGN_OR_RETURN(Tensor dqkv, CoreBackward(grad_ctx));
  LOOM_ASSIGN_OR_RETURN(Tensor dx, qkv_.BackwardInput(dqkv, work.qkv));
  ReleaseActivations();
  return dx;
}

absl::Status ParallelSelfAttention::BackwardWeight(const AttentionWeightGradWork& work,
                                                   absl::Span<float> qkv_weight_grad_into,
                                                   absl::Span<float> out_weight_grad_into) {
  LOOM_RETURN_IF_ERROR(out_.BackwardWeight(work.out, out_weight_grad_into));
  return qkv_.BackwardWeight(work.qkv, qkv_weight_grad_into);
}

absl::StatusOr<Tensor> ParallelSelfAttention::CoreBackward(const Tensor& grad_ctx) {
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> dctx, grad_ctx.As<float>());
  const int64_t s = state_.seq, b = state_.batch, d = head_dim_, local = heads_.length;
  const int64_t L = local * d;
  const ScopedComputeTimer timer(ComputeKind::kAttention);
  LOOM_ASSIGN_OR_RETURN(const absl::Span<const float> qkv_values,
                        std::as_const(state_.qkv).As<float>());
  LOOM_ASSIGN_OR_RETURN(const absl::Span<const float> ctx, std::as_const(state_.ctx).As<float>());
  // Made as the tensor returned: each pair writes its columns in place.
  LOOM_ASSIGN_OR_RETURN(Tensor dqkv_tensor, Tensor::Create({s, b, 3 * L}));
  LOOM_ASSIGN_OR_RETURN(const absl::Span<float> dqkv, dqkv_tensor.As<float>());
  const auto lse_of = [&](int64_t pair) {
    return absl::MakeConstSpan(state_.lse).subspan(static_cast<size_t>(pair * s),
                                             static_cast<size_t>(s));
  };
  const auto grad_of = [&](int64_t bi, int64_t col) {
    return HeadView(dqkv, s, b, 3 * L, bi, col, d);
  };
  if (ContextParallel()) {
    std::vector<RingAttentionHeadGrad> heads;
    heads.reserve(static_cast<size_t>(b * local));
    for (int64_t pair = 0; pair < b * local; ++pair) {
      const int64_t bi = pair / local, j = pair % local;
      const AttentionBlock block = HeadBlock(qkv_values, s, b, L, bi, j * d, d);
      heads.push_back(RingAttentionHeadGrad{
          block.q, block.k, block.v, HeadView(ctx, s, b, L, bi, j * d, d),
          HeadView(dctx, s, b, L, bi, j * d, d), lse_of(pair), grad_of(bi, j * d),
          grad_of(bi, L + j * d), grad_of(bi, 2 * L + j * d)});
    }
    if (options_.cp_comm == CpComm::kAllToAll) {
      LOOM_RETURN_IF_ERROR(UlyssesAttentionBackward(*options_.context_parallel, heads,
                                                    options_.cp_sequence_length,
                                                    RingOptions(options_),
                                                    &ThreadUlyssesBuffers()));
    } else {
      LOOM_RETURN_IF_ERROR(RingAttentionBackward(*options_.context_parallel, heads,
                                                 options_.cp_sequence_length,
                                                 RingOptions(options_), &ThreadRingBuffers()));
    }
    return dqkv_tensor;
  }
  // As in Forward: each (batch, head) pair writes only its own columns of dqkv.
  const absl::Status done = ParallelFor(b * local, GemmThreads(), [&](int64_t first, int64_t end) {
    for (int64_t pair = first; pair < end; ++pair) {
      const int64_t bi = pair / local, j = pair % local;
      LOOM_RETURN_IF_ERROR(FlashAttentionBackward(
          HeadBlock(qkv_values, s, b, L, bi, j * d, d),
          HeadView(ctx, s, b, L, bi, j * d, d),
          HeadView(dctx, s, b, L, bi, j * d, d), lse_of(pair), grad_of(bi, j * d),
          grad_of(bi, L + j * d), grad_of(bi, 2 * L + j * d), FlashOptions(options_)));
    }
    return absl::OkStatus();
  });
  LOOM_RETURN_IF_ERROR(done);
  return dqkv_tensor;
}

}  // namespace loom
