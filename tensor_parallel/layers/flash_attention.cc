#include "tensor_parallel/layers/flash_attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/vector_math.h"

namespace loom {

namespace {

constexpr char kName[] = "FlashAttention";
constexpr int64_t kMaxTile = 4096;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

std::string Shape(int64_t rows, int64_t cols) { return absl::StrCat("[", rows, ",", cols, "]"); }

// CheckView returns InvalidArgument unless `name` is rows x cols with ld >= cols and
// its span holds every row.
template <typename View>
absl::Status CheckView(const View& view, int64_t rows, int64_t cols, const char* name) {
  if (view.rows != rows || view.cols != cols) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": ", name, " is ",
                                                   Shape(view.rows, view.cols), " but must be ",
                                                   Shape(rows, cols)));
  }
  return CheckMatrixLayout(view, absl::StrCat(kName, ": ", name));
}

absl::Status CheckBlock(const AttentionBlock& block, const FlashAttentionOptions& options) {
  const int64_t d = block.q.cols;
  if (d < 1 || block.k.cols != d || block.v.cols != d) {
    return absl::InvalidArgumentError(absl::StrCat(
        kName, ": q ", Shape(block.q.rows, block.q.cols), ", k ", Shape(block.k.rows, block.k.cols),
        " and v ", Shape(block.v.rows, block.v.cols),
        " must have the same head dimension, at least 1"));
  }
  if (block.k.rows != block.v.rows) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": k is ", Shape(block.k.rows, block.k.cols), " and v ",
                     Shape(block.v.rows, block.v.cols), ": they must have the same rows"));
  }
  if (block.q.rows < 0 || block.k.rows < 0 || block.q_position < 0 || block.k_position < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": q has ", block.q.rows, " rows at position ", block.q_position,
                     ", k ", block.k.rows, " at ", block.k_position, ": none may be negative"));
  }
  LOOM_RETURN_IF_ERROR(CheckView(block.q, block.q.rows, d, "q"));
  LOOM_RETURN_IF_ERROR(CheckView(block.k, block.k.rows, d, "k"));
  LOOM_RETURN_IF_ERROR(CheckView(block.v, block.k.rows, d, "v"));
  if (options.tile_q < 1 || options.tile_q > kMaxTile || options.tile_k < 1 ||
      options.tile_k > kMaxTile) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": tile_q ", options.tile_q,
                                                   " and tile_k ", options.tile_k,
                                                   " must be in [1, ", kMaxTile, "]"));
  }
  if (!std::isfinite(options.scale) || options.scale < 0.0f) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": scale ", options.scale, " must be finite and >= 0 (0: 1/sqrt(d))"));
  }
  return absl::OkStatus();
}

float ScaleOf(const FlashAttentionOptions& options, int64_t d) {
  return options.scale > 0.0f ? options.scale : 1.0f / std::sqrt(static_cast<float>(d));
}

// Rows [first, first + count) of a view.
ConstMatrixView Rows(ConstMatrixView m, int64_t first, int64_t count) {
  if (count == 0) return ConstMatrixView{{}, 0, m.cols, m.ld};
  return ConstMatrixView{m.data.subspan(static_cast<size_t>(first * m.ld),
                                        static_cast<size_t>((count - 1) * m.ld + m.cols)),
                         count, m.cols, m.ld};
}
MatrixView Rows(MatrixView m, int64_t first, int64_t count) {
  if (count == 0) return MatrixView{{}, 0, m.cols, m.ld};
  return MatrixView{m.data.subspan(static_cast<size_t>(first * m.ld),
                                   static_cast<size_t>((count - 1) * m.ld + m.cols)),
                    count, m.cols, m.ld};
}
float* RowPtr(MatrixView m, int64_t row) { return m.data.data() + row * m.ld; }
const float* RowPtr(ConstMatrixView m, int64_t row) { return m.data.data() + row * m.ld; }

// TilePair: a tile of queries [q0, q0 + nq) against a tile of keys [k0, k0 + nk).
struct TilePair {
  int64_t q0, nq, k0, nk;
};

// Visible returns how many of the tile's keys query row r (of the tile) sees: all of
// them without a mask, else those at positions <= its own.
int64_t Visible(const AttentionBlock& block, const TilePair& t, int64_t r, bool causal) {
  if (!causal) return t.nk;
  const int64_t query = block.q_position + t.q0 + r;
  const int64_t first_key = block.k_position + t.k0;
  return std::clamp<int64_t>(query - first_key + 1, 0, t.nk);
}

// AboveDiagonal: every key of the tile comes after every query of the tile.
bool AboveDiagonal(const AttentionBlock& block, const TilePair& t, bool causal) {
  return causal && block.k_position + t.k0 > block.q_position + t.q0 + t.nq - 1;
}

// Scores writes scale * Q_tile K_tile^T into s [nq, nk].
absl::Status Scores(const AttentionBlock& block, const TilePair& t, float scale,
                    std::vector<float>& s) {
  return Gemm(Rows(block.q, t.q0, t.nq), Transpose::kNo, Rows(block.k, t.k0, t.nk), Transpose::kYes,
              Dense(absl::MakeSpan(s.data(), t.nq * t.nk), t.nq, t.nk), scale);
}

}  // namespace

absl::Status FlashAttentionForward(const AttentionBlock& block, MatrixView out,
                                   absl::Span<float> lse, const FlashAttentionOptions& options) {
  LOOM_RETURN_IF_ERROR(CheckBlock(block, options));
  const int64_t sq = block.q.rows, sk = block.k.rows, d = block.q.cols;
  LOOM_RETURN_IF_ERROR(CheckView(out, sq, d, "out"));
  if (static_cast<int64_t>(lse.size()) != sq) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": lse has ", lse.size(), " values for ", sq, " queries"));
  }
  const float scale = ScaleOf(options, d);
  const int64_t tq = std::min(options.tile_q, std::max<int64_t>(sq, 1));
  const int64_t tk = std::min(options.tile_k, std::max<int64_t>(sk, 1));
  std::vector<float> s(static_cast<size_t>(tq * tk)), acc(static_cast<size_t>(tq * d));
  std::vector<float> row_max(static_cast<size_t>(tq)), row_sum(static_cast<size_t>(tq));
  for (int64_t q0 = 0; q0 < sq; q0 += tq) {
    const int64_t nq = std::min(tq, sq - q0);
    std::fill(acc.begin(), acc.end(), 0.0f);
    std::fill(row_max.begin(), row_max.end(), kNegInf);
    std::fill(row_sum.begin(), row_sum.end(), 0.0f);
    for (int64_t k0 = 0; k0 < sk; k0 += tk) {
      const TilePair t{q0, nq, k0, std::min(tk, sk - k0)};
      // Key tiles only move further right, so once one is above the diagonal all are.
      if (AboveDiagonal(block, t, options.causal)) break;
      LOOM_RETURN_IF_ERROR(Scores(block, t, scale, s));
      for (int64_t r = 0; r < nq; ++r) {
        const absl::Span<float> row = absl::MakeSpan(s.data() + r * t.nk, t.nk);
        const int64_t visible = Visible(block, t, r, options.causal);
        std::fill(row.begin() + visible, row.end(), 0.0f);
        if (visible == 0) continue;
        const float new_max = std::max(row_max[r], MaxValue(row.first(visible)));
        const float sum = ExpShiftInPlace(row.first(visible), new_max);
        // exp(-inf) = 0: the first visible tile drops the empty accumulator.
        const float rescale = std::exp(row_max[r] - new_max);
        row_sum[r] = row_sum[r] * rescale + sum;
        row_max[r] = new_max;
        if (rescale != 1.0f) ScaleInPlace(absl::MakeSpan(acc.data() + r * d, d), rescale);
      }
      LOOM_RETURN_IF_ERROR(Gemm(Dense(absl::MakeConstSpan(s.data(), nq * t.nk), nq, t.nk),
                                Transpose::kNo, Rows(block.v, t.k0, t.nk), Transpose::kNo,
                                Dense(absl::MakeSpan(acc.data(), nq * d), nq, d), 1.0f, 1.0f));
    }
    for (int64_t r = 0; r < nq; ++r) {
      float* o = RowPtr(out, q0 + r);
      if (row_sum[r] == 0.0f) {  // no visible key in this block
        std::fill(o, o + d, 0.0f);
        lse[q0 + r] = kNegInf;
        continue;
      }
      const float inv = 1.0f / row_sum[r];
      for (int64_t e = 0; e < d; ++e) o[e] = acc[r * d + e] * inv;
      lse[q0 + r] = row_max[r] + std::log(row_sum[r]);
    }
  }
  return absl::OkStatus();
}

absl::Status FlashAttentionBackward(const AttentionBlock& block, ConstMatrixView out,
                                    ConstMatrixView grad_out, absl::Span<const float> lse,
                                    MatrixView grad_q, MatrixView grad_k, MatrixView grad_v,
                                    const FlashAttentionOptions& options) {
  LOOM_RETURN_IF_ERROR(CheckBlock(block, options));
  const int64_t sq = block.q.rows, sk = block.k.rows, d = block.q.cols;
  LOOM_RETURN_IF_ERROR(CheckView(out, sq, d, "out"));
  LOOM_RETURN_IF_ERROR(CheckView(grad_out, sq, d, "grad_out"));
  LOOM_RETURN_IF_ERROR(CheckView(grad_q, sq, d, "grad_q"));
  LOOM_RETURN_IF_ERROR(CheckView(grad_k, sk, d, "grad_k"));
  LOOM_RETURN_IF_ERROR(CheckView(grad_v, sk, d, "grad_v"));
  if (static_cast<int64_t>(lse.size()) != sq) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": lse has ", lse.size(), " values for ", sq, " queries"));
  }
  const float scale = ScaleOf(options, d);
  // delta_i = rowsum(dO_i * O_i), the softmax backward's correction, once per query.
  std::vector<float> delta(static_cast<size_t>(sq));
  for (int64_t i = 0; i < sq; ++i) {
    const float* o = RowPtr(out, i);
    const float* g = RowPtr(grad_out, i);
    float dot = 0.0f;
    for (int64_t e = 0; e < d; ++e) dot += o[e] * g[e];
    delta[i] = dot;
  }
  const int64_t tq = std::min(options.tile_q, std::max<int64_t>(sq, 1));
  const int64_t tk = std::min(options.tile_k, std::max<int64_t>(sk, 1));
  std::vector<float> p(static_cast<size_t>(tq * tk)), dp(static_cast<size_t>(tq * tk));
  // Keys outside, queries inside: each key tile's dK and dV are finished before the
  // next, and dQ collects every key tile's share.
  for (int64_t k0 = 0; k0 < sk; k0 += tk) {
    const int64_t nk = std::min(tk, sk - k0);
    for (int64_t q0 = 0; q0 < sq; q0 += tq) {
      const TilePair t{q0, std::min(tq, sq - q0), k0, nk};
      if (AboveDiagonal(block, t, options.causal)) continue;
      LOOM_RETURN_IF_ERROR(Scores(block, t, scale, p));
      for (int64_t r = 0; r < t.nq; ++r) {
        const absl::Span<float> row = absl::MakeSpan(p.data() + r * nk, nk);
        const int64_t visible = lse[q0 + r] == kNegInf ? 0 : Visible(block, t, r, options.causal);
        ExpShiftInPlace(row.first(visible), lse[q0 + r]);
        std::fill(row.begin() + visible, row.end(), 0.0f);
      }
      const ConstMatrixView p_view = Dense(absl::MakeConstSpan(p.data(), t.nq * nk), t.nq, nk);
      const ConstMatrixView dout_tile = Rows(grad_out, q0, t.nq);
      // dV += P^T dO; dP = dO V^T.
      LOOM_RETURN_IF_ERROR(Gemm(p_view, Transpose::kYes, dout_tile, Transpose::kNo,
                                Rows(grad_v, k0, nk), 1.0f, 1.0f));
      LOOM_RETURN_IF_ERROR(Gemm(dout_tile, Transpose::kNo, Rows(block.v, k0, nk), Transpose::kYes,
                                Dense(absl::MakeSpan(dp.data(), t.nq * nk), t.nq, nk)));
      // dS = P * (dP - delta), in place of dP (masked entries have P = 0).
      for (int64_t r = 0; r < t.nq; ++r) {
        const float dr = delta[q0 + r];
        float* dpr = dp.data() + r * nk;
        const float* pr = p.data() + r * nk;
        for (int64_t c = 0; c < nk; ++c) dpr[c] = pr[c] * (dpr[c] - dr);
      }
      const ConstMatrixView ds = Dense(absl::MakeConstSpan(dp.data(), t.nq * nk), t.nq, nk);
      // dQ += scale dS K; dK += scale dS^T Q.
      LOOM_RETURN_IF_ERROR(Gemm(ds, Transpose::kNo, Rows(block.k, k0, nk), Transpose::kNo,
                                Rows(grad_q, q0, t.nq), scale, 1.0f));
      LOOM_RETURN_IF_ERROR(Gemm(ds, Transpose::kYes, Rows(block.q, q0, t.nq), Transpose::kNo,
                                Rows(grad_k, k0, nk), scale, 1.0f));
    }
  }
  return absl::OkStatus();
}

absl::Status MergeAttentionBlocks(MatrixView out, absl::Span<float> lse, ConstMatrixView out_b,
                                  absl::Span<const float> lse_b) {
  const int64_t sq = out.rows, d = out.cols;
  LOOM_RETURN_IF_ERROR(CheckView(out, sq, d, "out"));
  LOOM_RETURN_IF_ERROR(CheckView(out_b, sq, d, "out_b"));
  if (static_cast<int64_t>(lse.size()) != sq || static_cast<int64_t>(lse_b.size()) != sq) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": lse has ", lse.size(),
                                                   " values and lse_b ", lse_b.size(), " for ", sq,
                                                   " queries"));
  }
  for (int64_t i = 0; i < sq; ++i) {
    const float a = lse[i], b = lse_b[i];
    if (b == kNegInf) continue;  // the other block saw nothing: keep (out, lse)
    const float hi = std::max(a, b);
    // Shifted by the larger so neither exp overflows; exp(-inf - hi) = 0.
    const float wa = std::exp(a - hi), wb = std::exp(b - hi);
    const float total = wa + wb;
    float* o = RowPtr(out, i);
    const float* ob = RowPtr(out_b, i);
    const float ca = wa / total, cb = wb / total;
    for (int64_t e = 0; e < d; ++e) o[e] = o[e] * ca + ob[e] * cb;
    lse[i] = hi + std::log(total);
  }
  return absl::OkStatus();
}

}  // namespace loom
