// One head's causal attention, forward and backward, on one thread: the fused blockwise
// kernel (flash_attention.h) against the unfused one it replaced in
// ParallelSelfAttention (the whole s x s score matrix through Gemm, a row softmax, the
// probabilities kept for the backward), at the GPT job's head sizes.
//
// Counters: GFLOP/s counts the causal half of the six s x s x d products of a forward
// and backward (2 s^2 d FLOPs each, 6 s^2 d for the half), not the flash backward's
// recomputed scores; x_unfused is the fused kernel's speed over the unfused one at the
// same shape (time ratio); saved_KiB is what each keeps for the backward beside Q, K, V
// and the output (s^2 probabilities, or s log-sum-exps). Tiles of 32, 64 and 128 rows
// show the choice of the default (64). BM_FmaPeakPerCore (core:fma_peak_row) is the
// core's measured f32 FMA peak.
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "core/status_macros.h"
#include "core/vector_math.h"
#include "tensor_parallel/layers/flash_attention.h"
#include "tensor_parallel/layers/gemm.h"

namespace loom {
namespace {

struct Head {
  int64_t s, d;
  std::vector<float> q, k, v, out, dout, dq, dk, dv;
  Head(int64_t seq, int64_t dim) : s(seq), d(dim) {
    std::mt19937 rng(static_cast<uint32_t>(seq * 131 + dim));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (std::vector<float>* m : {&q, &k, &v, &out, &dout, &dq, &dk, &dv}) {
      m->resize(static_cast<size_t>(s * d));
      for (float& x : *m) x = u(rng);
    }
  }
  ConstMatrixView In(const std::vector<float>& m) const { return Dense(m, s, d); }
  MatrixView Out(std::vector<float>& m) const { return Dense(absl::MakeSpan(m), s, d); }
};

// Unfused: the algorithm ParallelSelfAttention used before the fused kernel.
absl::Status UnfusedStep(Head& h, std::vector<float>& probs, std::vector<float>& dp) {
  const int64_t s = h.s;
  const float scale = 1.0f / std::sqrt(static_cast<float>(h.d));
  LOOM_RETURN_IF_ERROR(Gemm(h.In(h.q), Transpose::kNo, h.In(h.k), Transpose::kYes,
                            Dense(absl::MakeSpan(probs), s, s), scale));
  for (int64_t i = 0; i < s; ++i) {
    const absl::Span<float> row = absl::MakeSpan(probs).subspan(i * s, s);
    SoftmaxInPlace(row.first(i + 1));
    std::fill(row.begin() + i + 1, row.end(), 0.0f);
  }
  const ConstMatrixView p = Dense(absl::MakeConstSpan(probs), s, s);
  LOOM_RETURN_IF_ERROR(Gemm(p, Transpose::kNo, h.In(h.v), Transpose::kNo, h.Out(h.out)));
  LOOM_RETURN_IF_ERROR(Gemm(p, Transpose::kYes, h.In(h.dout), Transpose::kNo, h.Out(h.dv)));
  LOOM_RETURN_IF_ERROR(Gemm(h.In(h.dout), Transpose::kNo, h.In(h.v), Transpose::kYes,
                            Dense(absl::MakeSpan(dp), s, s)));
  for (int64_t i = 0; i < s; ++i) {
    float dot = 0.0f;
    for (int64_t c = 0; c < s; ++c) dot += dp[i * s + c] * probs[i * s + c];
    for (int64_t c = 0; c < s; ++c) dp[i * s + c] = probs[i * s + c] * (dp[i * s + c] - dot);
  }
  const ConstMatrixView ds = Dense(absl::MakeConstSpan(dp), s, s);
  LOOM_RETURN_IF_ERROR(Gemm(ds, Transpose::kNo, h.In(h.k), Transpose::kNo, h.Out(h.dq), scale));
  return Gemm(ds, Transpose::kYes, h.In(h.q), Transpose::kNo, h.Out(h.dk), scale);
}

absl::Status FusedStep(Head& h, std::vector<float>& lse, int64_t tile) {
  const AttentionBlock block{h.In(h.q), h.In(h.k), h.In(h.v)};
  FlashAttentionOptions options;
  options.tile_q = options.tile_k = tile;
  LOOM_RETURN_IF_ERROR(FlashAttentionForward(block, h.Out(h.out), absl::MakeSpan(lse), options));
  return FlashAttentionBackward(block, h.In(h.out), h.In(h.dout), lse, h.Out(h.dq), h.Out(h.dk),
                                h.Out(h.dv), options);
}

std::map<std::pair<int64_t, int64_t>, double>& UnfusedSeconds() {
  static auto* m = new std::map<std::pair<int64_t, int64_t>, double>();
  return *m;
}

// Arguments: s, d and the fused kernel's tile rows (0: the unfused kernel).
void BM_Attention(benchmark::State& state) {
  const int64_t s = state.range(0), d = state.range(1), tile = state.range(2);
  const bool fused = tile > 0;
  Head h(s, d);
  std::vector<float> probs, dp, lse(static_cast<size_t>(s));
  if (!fused) {
    probs.resize(static_cast<size_t>(s * s));
    dp.resize(static_cast<size_t>(s * s));
  }
  absl::Status status;
  const absl::Time start = absl::Now();
  for (auto _ : state) {
    status = fused ? FusedStep(h, lse, tile) : UnfusedStep(h, probs, dp);
    if (!status.ok()) break;
    benchmark::DoNotOptimize(h.dq.data());
  }
  if (!status.ok()) {
    state.SkipWithError(status.ToString().c_str());
    return;
  }
  const double seconds =
      absl::ToDoubleSeconds(absl::Now() - start) / static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] = 6.0 * static_cast<double>(s * s * d) / seconds / 1e9;
  state.counters["saved_KiB"] =
      (fused ? static_cast<double>(s) : static_cast<double>(s * s)) * sizeof(float) / 1024.0;
  if (!fused) {
    UnfusedSeconds()[{s, d}] = seconds;
  } else if (auto it = UnfusedSeconds().find({s, d}); it != UnfusedSeconds().end()) {
    state.counters["x_unfused"] = it->second / seconds;
  }
}

// Shape by shape, the unfused first, so each fused row has its baseline.
void Shapes(benchmark::internal::Benchmark* b) {
  for (int64_t d : {32, 64}) {
    for (int64_t s : {128, 256, 512, 1024, 2048}) {
      for (int64_t tile : {0, 32, 64, 128}) b->Args({s, d, tile});
    }
  }
}
BENCHMARK(BM_Attention)->Apply(Shapes)->ArgNames({"s", "d", "tile"})->UseRealTime();

}  // namespace
}  // namespace loom
