#include "tensor_parallel/layers/internal/cp_attention_testing.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "tensor_parallel/layers/ring_attention.h"

namespace loom {
namespace tp_layers_testing {

AttentionReference DenseAttention(const std::vector<float>& q, const std::vector<float>& k,
                                  const std::vector<float>& v, const std::vector<float>& dout,
                                  int64_t s, int64_t d, bool causal) {
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  const auto at = [d](const std::vector<float>& m, int64_t i, int64_t e) {
    return static_cast<double>(m[static_cast<size_t>(i * d + e)]);
  };
  AttentionReference ref;
  ref.out.assign(s * d, 0.0);
  ref.lse.assign(s, kNegInf);
  ref.dq.assign(s * d, 0.0);
  ref.dk.assign(s * d, 0.0);
  ref.dv.assign(s * d, 0.0);
  for (int64_t i = 0; i < s; ++i) {
    const int64_t visible = causal ? i + 1 : s;
    std::vector<double> p(visible), dp(visible, 0.0);
    double max = kNegInf;
    for (int64_t j = 0; j < visible; ++j) {
      double dot = 0;
      for (int64_t e = 0; e < d; ++e) dot += at(q, i, e) * at(k, j, e);
      p[j] = dot * scale;
      max = std::max(max, p[j]);
    }
    double sum = 0;
    for (double& x : p) sum += x = std::exp(x - max);
    ref.lse[i] = max + std::log(sum);
    double correction = 0;
    for (int64_t j = 0; j < visible; ++j) {
      p[j] /= sum;
      for (int64_t e = 0; e < d; ++e) {
        ref.out[i * d + e] += p[j] * at(v, j, e);
        dp[j] += at(dout, i, e) * at(v, j, e);
      }
      correction += p[j] * dp[j];
    }
    for (int64_t j = 0; j < visible; ++j) {
      const double ds = p[j] * (dp[j] - correction);
      for (int64_t e = 0; e < d; ++e) {
        ref.dv[j * d + e] += p[j] * at(dout, i, e);
        ref.dq[i * d + e] += scale * ds * at(k, j, e);
        ref.dk[j * d + e] += scale * ds * at(q, i, e);
      }
    }
  }
  return ref;
}

std::vector<float> GatherChunks(const std::vector<float>& m,
                                const std::vector<PositionRange>& chunks, int64_t width) {
  std::vector<float> rows;
  for (const PositionRange& c : chunks) {
    rows.insert(rows.end(), m.begin() + c.offset * width,
                m.begin() + (c.offset + c.length) * width);
  }
  return rows;
}

void ScatterChunks(const std::vector<float>& rows, const std::vector<PositionRange>& chunks,
                   int64_t width, std::vector<float>& m) {
  int64_t row = 0;
  for (const PositionRange& c : chunks) {
    std::copy_n(rows.begin() + row * width, c.length * width, m.begin() + c.offset * width);
    row += c.length;
  }
}

int64_t ChunkRows(const std::vector<PositionRange>& chunks) {
  int64_t rows = 0;
  for (const PositionRange& c : chunks) rows += c.length;
  return rows;
}

}  // namespace tp_layers_testing
}  // namespace loom
