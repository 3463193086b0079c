#include "tensor_parallel/layers/ulysses_attention.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "collectives/communicator.h"
#include "core/buffer_view.h"
#include "core/parallel_for.h"
#include "core/status_macros.h"
#include "tensor_parallel/layers/flash_attention.h"
#include "tensor_parallel/layers/gemm.h"
#include "tensor_parallel/layers/internal/cp_attention_checks.h"
#include "tensor_parallel/layers/ring_attention.h"

namespace loom {
namespace {

using cp_attention_internal::CheckHeads;
using cp_attention_internal::CpCall;
using cp_attention_internal::Fit;
using cp_attention_internal::FlashOptionsOf;
using cp_attention_internal::PackRows;

constexpr char kName[] = "UlyssesAttention";

// What every rank holds, known to every rank without a message: its positions and
// rows.
struct Split {
  int cp = 1;
  int rank = 0;
  int64_t seq_len = 0;
  std::vector<std::vector<PositionRange>> chunks;  // by rank
  std::vector<int64_t> rows;                       // by rank
};

absl::StatusOr<Split> MakeSplit(int64_t seq_len, int cp, int rank, CpLayout layout) {
  LOOM_RETURN_IF_ERROR(CpChunks(seq_len, cp, rank, layout).status());
  Split split;
  split.cp = cp;
  split.rank = rank;
  split.seq_len = seq_len;
  for (int r = 0; r < cp; ++r) {
    LOOM_ASSIGN_OR_RETURN(std::vector<PositionRange> chunks, CpChunks(seq_len, cp, r, layout));
    int64_t rows = 0;
    for (const PositionRange& c : chunks) rows += c.length;
    split.chunks.push_back(std::move(chunks));
    split.rows.push_back(rows);
  }
  return split;
}

// Stack: how one block of `rows` rows of a head group is laid out, in every message
// and in the whole-sequence buffers (rows = seq_len) alike: `parts` matrices [rows, d]
// of each of the group's heads, part-major (part p of head g at (p heads + g) rows d),
// then, with lse, each head's log-sum-exp [rows].
struct Stack {
  int64_t heads = 0;
  int64_t parts = 0;
  int64_t d = 0;
  bool lse = false;

  size_t Size(int64_t rows) const {
    return static_cast<size_t>(heads * rows * (parts * d + (lse ? 1 : 0)));
  }
  size_t Matrix(int64_t rows, int64_t p, int64_t g) const {
    return static_cast<size_t>((p * heads + g) * rows * d);
  }
  size_t Lse(int64_t rows, int64_t g) const {
    return static_cast<size_t>(parts * heads * rows * d + g * rows);
  }
};

// Exchange: one all-to-all's element counts and offsets by rank.
struct Exchange {
  std::vector<size_t> send_counts, send_offsets, recv_counts, recv_offsets;
  size_t send_total = 0, recv_total = 0;
};

// MakeExchange lays out the blocks of an all-to-all in rank order. Outward (to the
// head groups), this rank sends its rows of group j's heads to every rank j and
// receives every rank's rows of its own heads; homeward, the reverse.
Exchange MakeExchange(const Split& split, const Stack& stack, bool outward) {
  Exchange x;
  const int64_t mine = split.rows[static_cast<size_t>(split.rank)];
  for (int r = 0; r < split.cp; ++r) {
    const int64_t theirs = split.rows[static_cast<size_t>(r)];
    x.send_offsets.push_back(x.send_total);
    x.recv_offsets.push_back(x.recv_total);
    x.send_counts.push_back(stack.Size(outward ? mine : theirs));
    x.recv_counts.push_back(stack.Size(outward ? theirs : mine));
    x.send_total += x.send_counts.back();
    x.recv_total += x.recv_counts.back();
  }
  return x;
}

absl::Status AllToAll(Communicator& comm, const Exchange& x, const std::vector<float>& send,
                      std::vector<float>& recv) {
  return comm.AllToAllV(ConstBufferView::Of(absl::MakeConstSpan(send.data(), x.send_total)),
                        x.send_counts, BufferView::Of(absl::MakeSpan(recv.data(), x.recv_total)),
                        x.recv_counts);
}

void UnpackRows(const float* src, MatrixView m) {
  for (int64_t i = 0; i < m.rows; ++i) {
    std::copy_n(src + i * m.cols, m.cols, m.data.data() + i * m.ld);
  }
}

void AddRows(const float* src, MatrixView m) {
  for (int64_t i = 0; i < m.rows; ++i) {
    float* row = m.data.data() + i * m.ld;
    for (int64_t e = 0; e < m.cols; ++e) row[e] += src[i * m.cols + e];
  }
}

// Place copies a rank's rows [rows, width] (its chunks' positions in order) to their
// positions in a sequence-major [seq_len, width] matrix; Take copies them back out.
void Place(const float* rows, const std::vector<PositionRange>& chunks, int64_t width,
           float* sequence) {
  for (const PositionRange& c : chunks) {
    if (c.length == 0) continue;
    std::copy_n(rows, c.length * width, sequence + c.offset * width);
    rows += c.length * width;
  }
}

void Take(const float* sequence, const std::vector<PositionRange>& chunks, int64_t width,
          float* rows) {
  for (const PositionRange& c : chunks) {
    if (c.length == 0) continue;
    std::copy_n(sequence + c.offset * width, c.length * width, rows);
    rows += c.length * width;
  }
}

// PackOutward packs this rank's rows of every head into `send` (laid out by x): head
// h = j G + g goes into rank j's block as its head g. matrix(h, p) is head h's part
// p and lse(h) its log-sum-exp (read when the stack has one).
template <typename MatrixOf, typename LseOf>
void PackOutward(const Split& split, const Stack& stack, const Exchange& x, MatrixOf matrix,
                 LseOf lse, float* send) {
  const int64_t rows = split.rows[static_cast<size_t>(split.rank)];
  ParallelForEach(split.cp * stack.heads, 1, [&](int64_t first, int64_t end) {
    for (int64_t h = first; h < end; ++h) {
      const int64_t g = h % stack.heads;
      float* block = send + x.send_offsets[static_cast<size_t>(h / stack.heads)];
      for (int64_t p = 0; p < stack.parts; ++p) {
        PackRows(matrix(h, p), block + stack.Matrix(rows, p, g));
      }
      if (stack.lse) {
        const absl::Span<const float> l = lse(h);
        std::copy(l.begin(), l.end(), block + stack.Lse(rows, g));
      }
    }
  });
}

// ToSequence places every rank's block of `recv` (its rows of this rank's heads) at
// their global positions in `sequence`, the stack of the whole sequence.
void ToSequence(const Split& split, const Stack& stack, const Exchange& x, const float* recv,
                float* sequence) {
  const int64_t s = split.seq_len;
  ParallelForEach(stack.heads, 1, [&](int64_t first, int64_t end) {
    for (int64_t g = first; g < end; ++g) {
      for (int r = 0; r < split.cp; ++r) {
        const float* block = recv + x.recv_offsets[static_cast<size_t>(r)];
        const int64_t rows = split.rows[static_cast<size_t>(r)];
        const std::vector<PositionRange>& chunks = split.chunks[static_cast<size_t>(r)];
        for (int64_t p = 0; p < stack.parts; ++p) {
          Place(block + stack.Matrix(rows, p, g), chunks, stack.d,
                sequence + stack.Matrix(s, p, g));
        }
        if (stack.lse) Place(block + stack.Lse(rows, g), chunks, 1, sequence + stack.Lse(s, g));
      }
    }
  });
}

// FromSequence packs, for every rank, the rows of `sequence` (a whole-sequence stack)
// at that rank's positions into its block of `send`.
void FromSequence(const Split& split, const Stack& stack, const Exchange& x, const float* sequence,
                  float* send) {
  const int64_t s = split.seq_len;
  ParallelForEach(stack.heads, 1, [&](int64_t first, int64_t end) {
    for (int64_t g = first; g < end; ++g) {
      for (int r = 0; r < split.cp; ++r) {
        float* block = send + x.send_offsets[static_cast<size_t>(r)];
        const int64_t rows = split.rows[static_cast<size_t>(r)];
        const std::vector<PositionRange>& chunks = split.chunks[static_cast<size_t>(r)];
        for (int64_t p = 0; p < stack.parts; ++p) {
          Take(sequence + stack.Matrix(s, p, g), chunks, stack.d, block + stack.Matrix(rows, p, g));
        }
        if (stack.lse) Take(sequence + stack.Lse(s, g), chunks, 1, block + stack.Lse(rows, g));
      }
    }
  });
}

// Home returns where head h's part p (or, with p = parts, its lse) of this rank's rows
// arrived in `recv` (laid out by a homeward x): rank j sent its heads g = h - j G.
const float* Home(const Split& split, const Stack& stack, const Exchange& x, const float* recv,
                  int64_t h, int64_t p) {
  const int64_t rows = split.rows[static_cast<size_t>(split.rank)];
  const float* block = recv + x.recv_offsets[static_cast<size_t>(h / stack.heads)];
  const int64_t g = h % stack.heads;
  return block + (p < stack.parts ? stack.Matrix(rows, p, g) : stack.Lse(rows, g));
}

// Checked: the split and the views of a call, checked before any message.
template <typename Head>
absl::StatusOr<Split> Checked(const Communicator& cp, absl::Span<const Head> heads, int64_t seq_len,
                              CpLayout layout) {
  LOOM_ASSIGN_OR_RETURN(Split split, MakeSplit(seq_len, cp.size(), cp.rank(), layout));
  LOOM_RETURN_IF_ERROR(CheckUlyssesHeads(static_cast<int64_t>(heads.size()), split.cp));
  if (heads.empty()) return split;
  LOOM_RETURN_IF_ERROR(CheckHeads(heads, split.rows[static_cast<size_t>(split.rank)],
                                  heads[0].q.cols,
                                  CpCall{kName, split.rank, split.cp, heads.size()}));
  return split;
}

}  // namespace

struct UlyssesAttentionBuffersAccess {
  static std::vector<float>& send(UlyssesAttentionBuffers& b) { return b.send_; }
  static std::vector<float>& recv(UlyssesAttentionBuffers& b) { return b.recv_; }
  static std::vector<float>& sequence(UlyssesAttentionBuffers& b) { return b.sequence_; }
  static std::vector<float>& result(UlyssesAttentionBuffers& b) { return b.result_; }
};

absl::Status CheckUlyssesHeads(int64_t num_heads, int cp) {
  if (cp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": cp is ", cp, " (", num_heads, " heads): it must be at least 1"));
  }
  if (num_heads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": ", num_heads, " heads (cp ", cp, "): the count must be at least 0"));
  }
  if (num_heads % cp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kName, ": ", num_heads, " heads do not divide over cp ", cp, "; use ring attention"));
  }
  return absl::OkStatus();
}

absl::Status UlyssesAttentionForward(Communicator& cp, absl::Span<const RingAttentionHead> heads,
                                     int64_t seq_len, const RingAttentionOptions& options,
                                     UlyssesAttentionBuffers* buffers) {
  LOOM_ASSIGN_OR_RETURN(const Split split, Checked(cp, heads, seq_len, options.layout));
  if (heads.empty()) return absl::OkStatus();
  const int64_t d = heads[0].q.cols, s = seq_len;
  const int64_t group = static_cast<int64_t>(heads.size()) / split.cp;
  UlyssesAttentionBuffers own;
  UlyssesAttentionBuffers& b = buffers != nullptr ? *buffers : own;
  using Access = UlyssesAttentionBuffersAccess;

  // 1. Q, K and V of head group j to rank j, placed at their positions there.
  const Stack qkv{group, 3, d, false};
  const Exchange outward = MakeExchange(split, qkv, true);
  std::vector<float>& send = Fit(Access::send(b), outward.send_total);
  std::vector<float>& recv = Fit(Access::recv(b), outward.recv_total);
  const auto matrix = [&](int64_t h, int64_t p) {
    const RingAttentionHead& head = heads[static_cast<size_t>(h)];
    return p == 0 ? head.q : p == 1 ? head.k : head.v;
  };
  const auto no_lse = [](int64_t) { return absl::Span<const float>(); };
  PackOutward(split, qkv, outward, matrix, no_lse, send.data());
  LOOM_RETURN_IF_ERROR(AllToAll(cp, outward, send, recv));
  std::vector<float>& sequence = Fit(Access::sequence(b), qkv.Size(s));
  ToSequence(split, qkv, outward, recv.data(), sequence.data());

  // 2. Plain flash attention of the whole sequence, each of this rank's heads on one
  // thread.
  const Stack result{group, 1, d, true};
  std::vector<float>& out = Fit(Access::result(b), result.Size(s));
  const FlashAttentionOptions flash = FlashOptionsOf(options);
  const absl::Span<const float> seq(sequence);
  const auto whole = [&](int64_t p, int64_t g) {
    return Dense(seq.subspan(qkv.Matrix(s, p, g), static_cast<size_t>(s * d)), s, d);
  };
  const absl::Status computed = ParallelFor(group, GemmThreads(), [&](int64_t first, int64_t end) {
    for (int64_t g = first; g < end; ++g) {
      const AttentionBlock block{whole(0, g), whole(1, g), whole(2, g), 0, 0};
      const MatrixView o = Dense(
          absl::MakeSpan(out).subspan(result.Matrix(s, 0, g), static_cast<size_t>(s * d)), s, d);
      const absl::Span<float> l =
          absl::MakeSpan(out).subspan(result.Lse(s, g), static_cast<size_t>(s));
      LOOM_RETURN_IF_ERROR(FlashAttentionForward(block, o, l, flash));
    }
    return absl::OkStatus();
  });
  LOOM_RETURN_IF_ERROR(computed);

  // 3. Every output row and log-sum-exp home to the rank holding its position.
  const Exchange homeward = MakeExchange(split, result, false);
  FromSequence(split, result, homeward, out.data(), Fit(send, homeward.send_total).data());
  LOOM_RETURN_IF_ERROR(AllToAll(cp, homeward, send, Fit(recv, homeward.recv_total)));
  ParallelForEach(static_cast<int64_t>(heads.size()), 1, [&](int64_t first, int64_t end) {
    for (int64_t h = first; h < end; ++h) {
      const RingAttentionHead& head = heads[static_cast<size_t>(h)];
      UnpackRows(Home(split, result, homeward, recv.data(), h, 0), head.out);
      const float* lse = Home(split, result, homeward, recv.data(), h, 1);
      std::copy_n(lse, head.lse.size(), head.lse.data());
    }
  });
  return absl::OkStatus();
}

absl::Status UlyssesAttentionBackward(Communicator& cp,
                                      absl::Span<const RingAttentionHeadGrad> heads,
                                      int64_t seq_len, const RingAttentionOptions& options,
                                      UlyssesAttentionBuffers* buffers) {
  LOOM_ASSIGN_OR_RETURN(const Split split, Checked(cp, heads, seq_len, options.layout));
  if (heads.empty()) return absl::OkStatus();
  const int64_t d = heads[0].q.cols, s = seq_len;
  const int64_t group = static_cast<int64_t>(heads.size()) / split.cp;
  UlyssesAttentionBuffers own;
  UlyssesAttentionBuffers& b = buffers != nullptr ? *buffers : own;
  using Access = UlyssesAttentionBuffersAccess;

  // 1. Q, K, V, out, dL/d(out) and lse of head group j to rank j, at their positions.
  const Stack operands{group, 5, d, true};
  const Exchange outward = MakeExchange(split, operands, true);
  std::vector<float>& send = Fit(Access::send(b), outward.send_total);
  std::vector<float>& recv = Fit(Access::recv(b), outward.recv_total);
  const auto matrix = [&](int64_t h, int64_t p) {
    const RingAttentionHeadGrad& head = heads[static_cast<size_t>(h)];
    const ConstMatrixView parts[] = {head.q, head.k, head.v, head.out, head.grad_out};
    return parts[p];
  };
  const auto lse_of = [&](int64_t h) { return heads[static_cast<size_t>(h)].lse; };
  PackOutward(split, operands, outward, matrix, lse_of, send.data());
  LOOM_RETURN_IF_ERROR(AllToAll(cp, outward, send, recv));
  std::vector<float>& sequence = Fit(Access::sequence(b), operands.Size(s));
  ToSequence(split, operands, outward, recv.data(), sequence.data());

  // 2. Flash attention's backward of the whole sequence into zeroed gradients, each
  // of this rank's heads on one thread.
  const Stack grads{group, 3, d, false};
  std::vector<float>& dqkv = Fit(Access::result(b), grads.Size(s));
  std::fill_n(dqkv.begin(), grads.Size(s), 0.0f);
  const FlashAttentionOptions flash = FlashOptionsOf(options);
  const absl::Span<const float> seq(sequence);
  const auto whole = [&](int64_t p, int64_t g) {
    return Dense(seq.subspan(operands.Matrix(s, p, g), static_cast<size_t>(s * d)), s, d);
  };
  const auto grad = [&](int64_t p, int64_t g) {
    return Dense(absl::MakeSpan(dqkv).subspan(grads.Matrix(s, p, g), static_cast<size_t>(s * d)), s,
                 d);
  };
  const absl::Status computed = ParallelFor(group, GemmThreads(), [&](int64_t first, int64_t end) {
    for (int64_t g = first; g < end; ++g) {
      const AttentionBlock block{whole(0, g), whole(1, g), whole(2, g), 0, 0};
      const absl::Span<const float> lse = seq.subspan(operands.Lse(s, g), static_cast<size_t>(s));
      LOOM_RETURN_IF_ERROR(FlashAttentionBackward(block, whole(3, g), whole(4, g), lse, grad(0, g),
                                                  grad(1, g), grad(2, g), flash));
    }
    return absl::OkStatus();
  });
  LOOM_RETURN_IF_ERROR(computed);

  // 3. dQ, dK and dV home to the rank holding each position, added to its gradients.
  const Exchange homeward = MakeExchange(split, grads, false);
  FromSequence(split, grads, homeward, dqkv.data(), Fit(send, homeward.send_total).data());
  LOOM_RETURN_IF_ERROR(AllToAll(cp, homeward, send, Fit(recv, homeward.recv_total)));
  ParallelForEach(static_cast<int64_t>(heads.size()), 1, [&](int64_t first, int64_t end) {
    for (int64_t h = first; h < end; ++h) {
      const RingAttentionHeadGrad& head = heads[static_cast<size_t>(h)];
      AddRows(Home(split, grads, homeward, recv.data(), h, 0), head.grad_q);
      AddRows(Home(split, grads, homeward, recv.data(), h, 1), head.grad_k);
      AddRows(Home(split, grads, homeward, recv.data(), h, 2), head.grad_v);
    }
  });
  return absl::OkStatus();
}

absl::StatusOr<UlyssesAttentionTraffic> UlyssesAttentionSentElements(int64_t seq_len, int cp,
                                                                     int rank, CpLayout layout,
                                                                     int64_t num_heads, int64_t d) {
  if (d < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("UlyssesAttentionSentElements: d is ", d, ": it must be at least 0"));
  }
  LOOM_ASSIGN_OR_RETURN(const Split split, MakeSplit(seq_len, cp, rank, layout));
  LOOM_RETURN_IF_ERROR(CheckUlyssesHeads(num_heads, cp));
  const int64_t group = num_heads / cp;
  const int64_t rows = split.rows[static_cast<size_t>(rank)], others = seq_len - rows;
  UlyssesAttentionTraffic traffic;
  traffic.forward = group * (3 * d * rows * (cp - 1) + (d + 1) * others);
  traffic.backward = group * ((5 * d + 1) * rows * (cp - 1) + 3 * d * others);
  return traffic;
}

}  // namespace loom
