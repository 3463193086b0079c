#include "tensor_parallel/layers/ring_attention.h"

#include <algorithm>
#include <optional>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collectives/comm_worker.h"
#include "collectives/communicator.h"
#include "core/buffer_view.h"
#include "core/parallel_for.h"
#include "core/status_macros.h"
#include "tensor_parallel/layers/flash_attention.h"
#include "tensor_parallel/layers/gemm.h"
#include "tensor_parallel/layers/internal/cp_attention_checks.h"
#include "tensor_parallel/placement.h"

namespace loom {
namespace {

using cp_attention_internal::CheckHeads;
using cp_attention_internal::CpCall;
using cp_attention_internal::Fit;
using cp_attention_internal::FlashOptionsOf;
using cp_attention_internal::PackRows;

constexpr char kName[] = "RingAttention";

// A run of a rank's rows at consecutive global positions.
struct RowBlock {
  int64_t row = 0;
  int64_t position = 0;
  int64_t length = 0;
};

// What every rank holds, known to every rank without a message: a rank's row blocks,
// which hop carries which rank's keys and how many rows they have.
struct Ring {
  int cp = 1;
  int rank = 0;
  std::vector<std::vector<RowBlock>> blocks;  // by rank
  std::vector<int64_t> rows;                  // by rank
  int64_t max_rows = 0;

  // Source returns the rank whose keys and values this rank holds after `hop` hops.
  int Source(int hop) const { return ((rank - hop) % cp + cp) % cp; }
  int Next() const { return (rank + 1) % cp; }
  int Prev() const { return (rank + cp - 1) % cp; }
};

// BlocksOf turns chunks into row blocks, joining chunks at adjacent positions (zigzag's
// rank cp - 1 holds chunks cp - 1 and cp): one flash call instead of two, so cp = 1
// computes exactly what plain flash attention does, bit for bit. Empty chunks drop.
std::vector<RowBlock> BlocksOf(const std::vector<PositionRange>& chunks) {
  std::vector<RowBlock> blocks;
  int64_t row = 0;
  for (const PositionRange& c : chunks) {
    if (c.length == 0) continue;
    if (!blocks.empty() && blocks.back().position + blocks.back().length == c.offset) {
      blocks.back().length += c.length;
    } else {
      blocks.push_back(RowBlock{row, c.offset, c.length});
    }
    row += c.length;
  }
  return blocks;
}

absl::StatusOr<Ring> MakeRing(int64_t seq_len, int cp, int rank, CpLayout layout) {
  LOOM_RETURN_IF_ERROR(CpChunks(seq_len, cp, rank, layout).status());
  Ring ring;
  ring.cp = cp;
  ring.rank = rank;
  for (int r = 0; r < cp; ++r) {
    LOOM_ASSIGN_OR_RETURN(std::vector<PositionRange> chunks, CpChunks(seq_len, cp, r, layout));
    int64_t rows = 0;
    for (const PositionRange& c : chunks) rows += c.length;
    ring.blocks.push_back(BlocksOf(chunks));
    ring.rows.push_back(rows);
    ring.max_rows = std::max(ring.max_rows, rows);
  }
  return ring;
}

// Rows [first, first + count) of a view (count > 0).
template <typename View>
View Rows(View m, int64_t first, int64_t count) {
  return View{m.data.subspan(static_cast<size_t>(first * m.ld),
                             static_cast<size_t>((count - 1) * m.ld + m.cols)),
              count, m.cols, m.ld};
}

// AddInto adds dense rows into a view.
void AddInto(const float* src, MatrixView m) {
  for (int64_t i = 0; i < m.rows; ++i) {
    float* row = m.data.data() + i * m.ld;
    for (int64_t e = 0; e < m.cols; ++e) row[e] += src[i * m.cols + e];
  }
}

// Visible: under a causal mask, a key block wholly after the query block's last
// position contributes nothing; skipping it also keeps -inf rows out of the merges.
bool Visible(const RowBlock& q, const RowBlock& k, bool causal) {
  return !causal || k.position <= q.position + q.length - 1;
}

// Hop sends `send` to the next rank and receives `recv` from the previous one, even
// ranks sending first and odd ranks receiving first (the header's deadlock argument).
absl::Status Hop(Communicator& comm, const Ring& ring, absl::Span<const float> send,
                 absl::Span<float> recv) {
  if (ring.rank % 2 == 0) {
    LOOM_RETURN_IF_ERROR(comm.Send(ConstBufferView::Of(send), ring.Next()));
    return comm.Recv(BufferView::Of(recv), ring.Prev());
  }
  LOOM_RETURN_IF_ERROR(comm.Recv(BufferView::Of(recv), ring.Prev()));
  return comm.Send(ConstBufferView::Of(send), ring.Next());
}

size_t Elements(int64_t rows, int64_t d, int parts) {
  return static_cast<size_t>(rows * d * parts);
}

// PackKeysValues packs every head's keys, then every head's values, part-major:
// head h's K at h rows d, its V at (heads + h) rows d, as both passes send them.
template <typename Head>
void PackKeysValues(absl::Span<const Head> heads, int64_t rows, int64_t d, float* dst) {
  const int64_t h_count = static_cast<int64_t>(heads.size());
  for (int64_t h = 0; h < h_count; ++h) {
    PackRows(heads[h].k, dst + Elements(rows, d, h));
    PackRows(heads[h].v, dst + Elements(rows, d, h_count + h));
  }
}

}  // namespace

struct RingAttentionBuffersAccess {
  static std::vector<float>& block_out(RingAttentionBuffers& b) { return b.block_out_; }
  static std::vector<float>& block_lse(RingAttentionBuffers& b) { return b.block_lse_; }
  static std::vector<float>& grads(RingAttentionBuffers& b) { return b.grads_; }
  static std::vector<float>& grads_out(RingAttentionBuffers& b) { return b.grads_out_; }
  static std::vector<float>& grads_in(RingAttentionBuffers& b) { return b.grads_in_; }
  static RingOverlapStats& stats(RingAttentionBuffers& b) { return b.stats_; }

  // The travelling block of every head, room for `parts` parts of max_rows x d (K,
  // V and, in the backward, dK, dV), with this rank's K and V packed in, and the
  // next hop's landing place: an odd rank receives before it sends, so the two
  // cannot share storage.
  struct Travelling {
    std::vector<float>& held;
    std::vector<float>& landing;
  };
  template <typename Head>
  static Travelling Start(RingAttentionBuffers& b, absl::Span<const Head> heads,
                          int64_t max_rows, int64_t rows, int64_t d, int parts) {
    std::vector<float>& held = Fit(b.held_, Elements(max_rows, d, parts));
    std::vector<float>& landing = Fit(b.landing_, held.size());
    PackKeysValues(heads, rows, d, held.data());
    return {held, landing};
  }
};

namespace {

// HopRunner runs a call's hops on a communication thread while the caller computes
// (the header's Overlap). Its destructor waits for a hop still running, so the
// buffers a hop reads and writes outlive it: declare it after them.
class HopRunner {
 public:
  HopRunner(Communicator& comm, RingOverlapStats& stats) : comm_(comm), stats_(stats) {}

  // Start runs `hop` on the communication thread (started at the first hop).
  template <typename Hop>
  void Start(Hop hop) {
    if (!worker_.has_value()) worker_.emplace();
    ticket_ = worker_->Submit([this, hop]() -> absl::Status {
      const absl::Time start = absl::Now();
      absl::Status status = hop();
      hop_seconds_ = absl::ToDoubleSeconds(absl::Now() - start);
      return status;
    });
  }

  // Finish waits for the started hop, if any, and returns the first error: the
  // caller's own `computed` status, else the hop's.
  absl::Status Finish(const absl::Status& computed) {
    if (ticket_ == 0) return computed;
    const absl::Time start = absl::Now();
    // Each hop's calls wait at most the communicator's timeout each; beyond two of
    // them and a margin, the communication thread itself is stuck.
    const absl::Status hopped =
        worker_->Wait(ticket_, start + 4 * comm_.options().timeout + absl::Seconds(10));
    ticket_ = 0;
    ++stats_.hops;
    stats_.exposed_seconds += absl::ToDoubleSeconds(absl::Now() - start);
    stats_.hop_seconds += hop_seconds_;
    return computed.ok() ? hopped : computed;
  }

 private:
  Communicator& comm_;
  RingOverlapStats& stats_;
  std::optional<CommWorker> worker_;
  CommWorker::Ticket ticket_ = 0;
  double hop_seconds_ = 0;  // written by the worker, read after its Wait
};

}  // namespace

absl::string_view CpLayoutName(CpLayout layout) {
  return layout == CpLayout::kZigzag ? "zigzag" : "contiguous";
}

absl::StatusOr<std::vector<PositionRange>> CpChunks(int64_t seq_len, int cp, int rank,
                                                    CpLayout layout) {
  if (cp < 1) {
    return absl::InvalidArgumentError(absl::StrCat("CpChunks: cp is ", cp, " (seq_len ", seq_len,
                                                   ", rank ", rank, "): it must be at least 1"));
  }
  if (seq_len < 0) {
    return absl::InvalidArgumentError(absl::StrCat("CpChunks: seq_len is ", seq_len, " (cp ", cp,
                                                   ", rank ", rank, "): it must be at least 0"));
  }
  if (rank < 0 || rank >= cp) {
    return absl::InvalidArgumentError(absl::StrCat("CpChunks: rank is ", rank, " but cp is ", cp,
                                                   ": it must be in [0, ", cp, ")"));
  }
  const auto range = [&](int shards, int index) {
    const ShardExtent e = ShardExtentOf(seq_len, shards, index, ShardRule::kBalanced);
    return PositionRange{e.offset, e.length};
  };
  if (layout == CpLayout::kContiguous) return std::vector<PositionRange>{range(cp, rank)};
  return std::vector<PositionRange>{range(2 * cp, rank), range(2 * cp, 2 * cp - 1 - rank)};
}

absl::StatusOr<int64_t> CpVisiblePairs(int64_t seq_len, int cp, int rank, CpLayout layout,
                                       bool causal) {
  LOOM_ASSIGN_OR_RETURN(const std::vector<PositionRange> chunks,
                        CpChunks(seq_len, cp, rank, layout));
  int64_t pairs = 0;
  for (const PositionRange& c : chunks) {
    // Queries at positions offset .. offset + length - 1 see p + 1 keys each.
    pairs += causal ? c.length * (2 * c.offset + c.length + 1) / 2 : c.length * seq_len;
  }
  return pairs;
}

absl::StatusOr<double> CpWorkImbalance(int64_t seq_len, int cp, CpLayout layout) {
  int64_t most = 0, total = 0;
  for (int rank = 0; rank < std::max(cp, 1); ++rank) {
    LOOM_ASSIGN_OR_RETURN(const int64_t pairs, CpVisiblePairs(seq_len, cp, rank, layout));
    most = std::max(most, pairs);
    total += pairs;
  }
  if (total == 0) return 1.0;
  return static_cast<double>(most) * cp / static_cast<double>(total);
}

absl::Status RingAttentionForward(Communicator& cp, absl::Span<const RingAttentionHead> heads,
                                  int64_t seq_len, const RingAttentionOptions& options,
                                  RingAttentionBuffers* buffers) {
  LOOM_ASSIGN_OR_RETURN(const Ring ring, MakeRing(seq_len, cp.size(), cp.rank(), options.layout));
  if (heads.empty()) return absl::OkStatus();
  const int64_t rows = ring.rows[ring.rank], d = heads[0].q.cols;
  const int64_t h_count = static_cast<int64_t>(heads.size());
  LOOM_RETURN_IF_ERROR(
      CheckHeads(heads, rows, d, CpCall{kName, ring.rank, ring.cp, heads.size()}));
  const FlashAttentionOptions flash = FlashOptionsOf(options);
  const std::vector<RowBlock>& mine = ring.blocks[ring.rank];

  // The visiting keys and values of every head, packed part-major [K of each head |
  // V of each head].
  RingAttentionBuffers own;
  RingAttentionBuffers& b = buffers != nullptr ? *buffers : own;
  using Access = RingAttentionBuffersAccess;
  auto [held, landing] = Access::Start(b, heads, ring.max_rows, rows, d, 2 * h_count);
  // Each head's partial output and log-sum-exp of one key block.
  std::vector<float>& block_out = Fit(Access::block_out(b), Elements(rows, d, h_count));
  std::vector<float>& block_lse = Fit(Access::block_lse(b), Elements(rows, 1, h_count));
  // A query block's first visible key block writes (out, lse); later ones merge into
  // them, so out's initial contents are never read. Every head sees the same blocks.
  std::vector<bool> written(mine.size(), false);
  HopRunner hops(cp, Access::stats(b));

  for (int hop = 0; hop < ring.cp; ++hop) {
    const int source = ring.Source(hop);
    const int64_t n = ring.rows[source];
    const absl::Span<const float> kv(held.data(), Elements(n, d, 2 * h_count));
    // The block in hand goes on, and the next one lands, while this one is computed.
    if (hop + 1 < ring.cp) {
      const absl::Span<float> next = absl::MakeSpan(landing).subspan(
          0, Elements(ring.rows[ring.Source(hop + 1)], d, 2 * h_count));
      hops.Start([&cp, &ring, kv, next] { return Hop(cp, ring, kv, next); });
    }
    const std::vector<bool> written_before = written;
    for (size_t i = 0; i < mine.size(); ++i) {
      for (const RowBlock& kblk : ring.blocks[source]) {
        if (Visible(mine[i], kblk, options.causal)) written[i] = true;
      }
    }
    const absl::Status computed =
        ParallelFor(h_count, GemmThreads(), [&](int64_t first, int64_t end) {
          for (int64_t h = first; h < end; ++h) {
            const RingAttentionHead& head = heads[h];
            const ConstMatrixView kb =
                Dense(kv.subspan(Elements(n, d, h), Elements(n, d, 1)), n, d);
            const ConstMatrixView vb =
                Dense(kv.subspan(Elements(n, d, h_count + h), Elements(n, d, 1)), n, d);
            const absl::Span<float> scratch =
                absl::MakeSpan(block_out).subspan(Elements(rows, d, h), Elements(rows, d, 1));
            const absl::Span<float> scratch_lse =
                absl::MakeSpan(block_lse).subspan(Elements(rows, 1, h), Elements(rows, 1, 1));
            for (size_t i = 0; i < mine.size(); ++i) {
              const RowBlock& qb = mine[i];
              const MatrixView o = Rows(head.out, qb.row, qb.length);
              const absl::Span<float> l =
                  head.lse.subspan(static_cast<size_t>(qb.row), static_cast<size_t>(qb.length));
              bool first_write = !written_before[i];
              for (const RowBlock& kblk : ring.blocks[source]) {
                if (!Visible(qb, kblk, options.causal)) continue;
                const AttentionBlock block{
                    Rows(head.q, qb.row, qb.length), Rows(kb, kblk.row, kblk.length),
                    Rows(vb, kblk.row, kblk.length), qb.position, kblk.position};
                if (first_write) {
                  LOOM_RETURN_IF_ERROR(FlashAttentionForward(block, o, l, flash));
                  first_write = false;
                  continue;
                }
                const MatrixView bo = Dense(scratch, qb.length, d);
                const absl::Span<float> bl = scratch_lse.subspan(0, static_cast<size_t>(qb.length));
                LOOM_RETURN_IF_ERROR(FlashAttentionForward(block, bo, bl, flash));
                LOOM_RETURN_IF_ERROR(
                    MergeAttentionBlocks(o, l, ConstMatrixView{bo.data, bo.rows, d, d}, bl));
              }
            }
          }
          return absl::OkStatus();
        });
    LOOM_RETURN_IF_ERROR(hops.Finish(computed));
    std::swap(held, landing);
  }
  return absl::OkStatus();
}

absl::Status RingAttentionBackward(Communicator& cp, absl::Span<const RingAttentionHeadGrad> heads,
                                   int64_t seq_len, const RingAttentionOptions& options,
                                   RingAttentionBuffers* buffers) {
  LOOM_ASSIGN_OR_RETURN(const Ring ring, MakeRing(seq_len, cp.size(), cp.rank(), options.layout));
  if (heads.empty()) return absl::OkStatus();
  const int64_t rows = ring.rows[ring.rank], d = heads[0].q.cols;
  const int64_t h_count = static_cast<int64_t>(heads.size());
  LOOM_RETURN_IF_ERROR(
      CheckHeads(heads, rows, d, CpCall{kName, ring.rank, ring.cp, heads.size()}));
  const FlashAttentionOptions flash = FlashOptionsOf(options);
  const std::vector<RowBlock>& mine = ring.blocks[ring.rank];

  // The visiting keys and values of every head, packed part-major [K | V], as in the
  // forward; their gradients travel one hop behind, packed [dK | dV]: `grads` takes
  // this rank's share for the block in hand, `grads_in` the earlier ranks' sum for
  // it, and `grads_out` the sum (with this rank's share) of the previous block,
  // going on to the next rank. dK, dV of all heads are one contiguous run.
  RingAttentionBuffers own;
  RingAttentionBuffers& b = buffers != nullptr ? *buffers : own;
  using Access = RingAttentionBuffersAccess;
  auto [held, landing] = Access::Start(b, heads, ring.max_rows, rows, d, 2 * h_count);
  std::vector<float>& grads = Fit(Access::grads(b), Elements(ring.max_rows, d, 2 * h_count));
  std::vector<float>& grads_out =
      Fit(Access::grads_out(b), Elements(ring.max_rows, d, 2 * h_count));
  std::vector<float>& grads_in = Fit(Access::grads_in(b), Elements(ring.max_rows, d, 2 * h_count));
  HopRunner hops(cp, Access::stats(b));

  for (int hop = 0; hop < ring.cp; ++hop) {
    const int source = ring.Source(hop);
    const int64_t n = ring.rows[source];
    const absl::Span<const float> kv(held.data(), Elements(n, d, 2 * h_count));
    // While this block is computed: its keys and values go on and the next block's
    // land; the previous block's gradient sum goes on and this block's arrives.
    if (hop > 0 || hop + 1 < ring.cp) {
      const absl::Span<float> next_kv =
          hop + 1 < ring.cp ? absl::MakeSpan(landing).subspan(
                                  0, Elements(ring.rows[ring.Source(hop + 1)], d, 2 * h_count))
                            : absl::Span<float>();
      const absl::Span<const float> sum_out =
          hop > 0 ? absl::MakeConstSpan(grads_out).subspan(
                        0, Elements(ring.rows[ring.Source(hop - 1)], d, 2 * h_count))
                  : absl::Span<const float>();
      const absl::Span<float> sum_in =
          hop > 0 ? absl::MakeSpan(grads_in).subspan(0, Elements(n, d, 2 * h_count))
                  : absl::Span<float>();
      const bool moves_kv = hop + 1 < ring.cp, moves_sum = hop > 0;
      hops.Start([&cp, &ring, kv, next_kv, sum_out, sum_in, moves_kv, moves_sum]() -> absl::Status {
        if (moves_kv) {
          const absl::Status moved = Hop(cp, ring, kv, next_kv);
          if (!moved.ok()) return moved;
        }
        return moves_sum ? Hop(cp, ring, sum_out, sum_in) : absl::OkStatus();
      });
    }
    const absl::Span<float> share(grads.data(), Elements(n, d, 2 * h_count));
    std::fill(share.begin(), share.end(), 0.0f);
    const absl::Status computed =
        ParallelFor(h_count, GemmThreads(), [&](int64_t first, int64_t end) {
          for (int64_t h = first; h < end; ++h) {
            const RingAttentionHeadGrad& head = heads[h];
            const auto part = [&](absl::Span<float> from, int64_t p) {
              return from.subspan(Elements(n, d, p * h_count + h), Elements(n, d, 1));
            };
            const ConstMatrixView kb =
                Dense(kv.subspan(Elements(n, d, h), Elements(n, d, 1)), n, d);
            const ConstMatrixView vb =
                Dense(kv.subspan(Elements(n, d, h_count + h), Elements(n, d, 1)), n, d);
            const MatrixView dkb = Dense(part(share, 0), n, d), dvb = Dense(part(share, 1), n, d);
            for (const RowBlock& qb : mine) {
              const absl::Span<const float> l =
                  head.lse.subspan(static_cast<size_t>(qb.row), static_cast<size_t>(qb.length));
              for (const RowBlock& kblk : ring.blocks[source]) {
                if (!Visible(qb, kblk, options.causal)) continue;
                const AttentionBlock attention{
                    Rows(head.q, qb.row, qb.length), Rows(kb, kblk.row, kblk.length),
                    Rows(vb, kblk.row, kblk.length), qb.position, kblk.position};
                LOOM_RETURN_IF_ERROR(FlashAttentionBackward(
                    attention, Rows(head.out, qb.row, qb.length),
                    Rows(head.grad_out, qb.row, qb.length), l, Rows(head.grad_q, qb.row, qb.length),
                    Rows(dkb, kblk.row, kblk.length), Rows(dvb, kblk.row, kblk.length), flash));
              }
            }
          }
          return absl::OkStatus();
        });
    LOOM_RETURN_IF_ERROR(hops.Finish(computed));
    if (hop > 0) {
      // The earlier ranks' sum for this block, then this rank's share added.
      for (size_t i = 0; i < share.size(); ++i) share[i] = grads_in[i] + share[i];
    }
    std::swap(grads, grads_out);
    std::swap(held, landing);
  }

  // grads_out holds the sum of every rank's share for the next rank's block: one more
  // hop takes it home.
  const float* home = grads_out.data();
  if (ring.cp > 1) {
    const int64_t n = ring.rows[ring.Next()];
    const absl::Span<const float> sum = absl::MakeConstSpan(grads_out).subspan(
        0, Elements(n, d, 2 * h_count));
    const absl::Span<float> in = absl::MakeSpan(grads_in).subspan(0, Elements(rows, d, 2 * h_count));
    hops.Start([&cp, &ring, sum, in] { return Hop(cp, ring, sum, in); });
    LOOM_RETURN_IF_ERROR(hops.Finish(absl::OkStatus()));
    home = grads_in.data();
  }
  ParallelForEach(h_count, 1, [&](int64_t first, int64_t end) {
    for (int64_t h = first; h < end; ++h) {
      AddInto(home + Elements(rows, d, h), heads[h].grad_k);
      AddInto(home + Elements(rows, d, h_count + h), heads[h].grad_v);
    }
  });
  return absl::OkStatus();
}

absl::Status RingAttentionForward(Communicator& cp, ConstMatrixView q, ConstMatrixView k,
                                  ConstMatrixView v, int64_t seq_len,
                                  const RingAttentionOptions& options, MatrixView out,
                                  absl::Span<float> lse, RingAttentionBuffers* buffers) {
  const RingAttentionHead head{q, k, v, out, lse};
  return RingAttentionForward(cp, absl::MakeConstSpan(&head, 1), seq_len, options, buffers);
}

absl::Status RingAttentionBackward(Communicator& cp, ConstMatrixView q, ConstMatrixView k,
                                   ConstMatrixView v, int64_t seq_len,
                                   const RingAttentionOptions& options, ConstMatrixView out,
                                   ConstMatrixView grad_out, absl::Span<const float> lse,
                                   MatrixView grad_q, MatrixView grad_k, MatrixView grad_v,
                                   RingAttentionBuffers* buffers) {
  const RingAttentionHeadGrad head{q, k, v, out, grad_out, lse, grad_q, grad_k, grad_v};
  return RingAttentionBackward(cp, absl::MakeConstSpan(&head, 1), seq_len, options, buffers);
}

absl::StatusOr<RingAttentionTraffic> RingAttentionSentElements(int64_t seq_len, int cp, int rank,
                                                               CpLayout layout, int64_t d) {
  if (d < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("RingAttentionSentElements: d is ", d, ": it must be at least 0"));
  }
  LOOM_ASSIGN_OR_RETURN(const Ring ring, MakeRing(seq_len, cp, rank, layout));
  RingAttentionTraffic traffic;
  for (int hop = 0; hop + 1 < cp; ++hop) {
    const int64_t n = ring.rows[ring.Source(hop)];
    traffic.forward += 2 * n * d;
    traffic.backward += 4 * n * d;
  }
  if (cp > 1) traffic.backward += 2 * ring.rows[ring.Next()] * d;
  return traffic;
}

}  // namespace loom
