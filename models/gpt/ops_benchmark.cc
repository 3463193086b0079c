// Layer norm forward and backward (ops.h) at the model's widths, beside the sequential
// double loops they replaced (the baseline, kept here only), on one thread. Rows of
// 2048 (a 64 x 32 token batch); bytes per second count x and y (forward) or x, dy and
// dx (backward) once, for comparison with the machine's memory bandwidth.
//
//   ./bazelw run --config=opt //models/gpt:ops_benchmark
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/types/span.h"
#include "benchmark/benchmark.h"
#include "models/gpt/ops.h"

namespace loom {
namespace {

constexpr size_t kRows = 2048;

std::vector<float> Seeded(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The forward as it was before the row sums were vectorized: one double accumulator.
void SequentialForward(const std::vector<float>& x, const std::vector<float>& gamma,
                       const std::vector<float>& beta, float eps, std::vector<float>& y,
                       std::vector<float>& mean, std::vector<float>& rstd) {
  const size_t n = gamma.size();
  for (size_t r = 0; r < x.size() / n; ++r) {
    const float* xr = x.data() + r * n;
    double sum = 0.0;
    for (size_t j = 0; j < n; ++j) sum += static_cast<double>(xr[j]);
    const float row_mean = static_cast<float>(sum / static_cast<double>(n));
    double sq = 0.0;
    for (size_t j = 0; j < n; ++j) {
      const double d = static_cast<double>(xr[j] - row_mean);
      sq += d * d;
    }
    const float row_rstd =
        1.0f / std::sqrt(static_cast<float>(sq / static_cast<double>(n)) + eps);
    mean[r] = row_mean;
    rstd[r] = row_rstd;
    float* yr = y.data() + r * n;
    for (size_t j = 0; j < n; ++j) yr[j] = (xr[j] - row_mean) * row_rstd * gamma[j] + beta[j];
  }
}

// The backward as it was: dx's row sums with one double accumulator; the column sums
// (dgamma, dbeta) as ops.cc still computes them.
void SequentialBackward(const std::vector<float>& x, const std::vector<float>& gamma,
                        const std::vector<float>& mean, const std::vector<float>& rstd,
                        const std::vector<float>& dy, std::vector<float>& dx,
                        std::vector<double>& dgamma, std::vector<double>& dbeta) {
  const size_t n = gamma.size();
  for (size_t r = 0; r < x.size() / n; ++r) {
    const float* xr = x.data() + r * n;
    const float* dyr = dy.data() + r * n;
    double sum_g = 0.0, sum_gx = 0.0;
    for (size_t j = 0; j < n; ++j) {
      const float xhat = (xr[j] - mean[r]) * rstd[r];
      const float g = dyr[j] * gamma[j];
      sum_g += static_cast<double>(g);
      sum_gx += static_cast<double>(g) * static_cast<double>(xhat);
    }
    const float mean_g = static_cast<float>(sum_g / static_cast<double>(n));
    const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(n));
    float* dxr = dx.data() + r * n;
    for (size_t j = 0; j < n; ++j) {
      const float xhat = (xr[j] - mean[r]) * rstd[r];
      dxr[j] = rstd[r] * (dyr[j] * gamma[j] - mean_g - xhat * mean_gx);
    }
  }
  dgamma.assign(n, 0.0);
  dbeta.assign(n, 0.0);
  for (size_t r = 0; r < x.size() / n; ++r) {
    const float* xr = x.data() + r * n;
    const float* dyr = dy.data() + r * n;
    for (size_t j = 0; j < n; ++j) {
      const float xhat = (xr[j] - mean[r]) * rstd[r];
      dgamma[j] += static_cast<double>(dyr[j]) * static_cast<double>(xhat);
      dbeta[j] += static_cast<double>(dyr[j]);
    }
  }
}

struct Inputs {
  explicit Inputs(size_t width)
      : x(Seeded(kRows * width, 1)),
        dy(Seeded(kRows * width, 2)),
        gamma(Seeded(width, 3)),
        beta(Seeded(width, 4)),
        y(kRows * width),
        dx(kRows * width),
        mean(kRows),
        rstd(kRows) {}
  std::vector<float> x, dy, gamma, beta, y, dx, mean, rstd;
};

void BM_LayerNormForward(benchmark::State& state) {
  Inputs in(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    benchmark::DoNotOptimize(LayerNormForward(in.x, in.gamma, in.beta, 1e-5f,
                                              absl::MakeSpan(in.y), absl::MakeSpan(in.mean),
                                              absl::MakeSpan(in.rstd)));
  }
  state.SetBytesProcessed(state.iterations() * 2 * in.x.size() * sizeof(float));
}
BENCHMARK(BM_LayerNormForward)->Arg(256)->Arg(512)->Arg(1024);

void BM_LayerNormForwardSequentialDouble(benchmark::State& state) {
  Inputs in(static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    SequentialForward(in.x, in.gamma, in.beta, 1e-5f, in.y, in.mean, in.rstd);
    benchmark::DoNotOptimize(in.y.data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * in.x.size() * sizeof(float));
}
BENCHMARK(BM_LayerNormForwardSequentialDouble)->Arg(256)->Arg(512)->Arg(1024);

void BM_LayerNormBackward(benchmark::State& state) {
  Inputs in(static_cast<size_t>(state.range(0)));
  SequentialForward(in.x, in.gamma, in.beta, 1e-5f, in.y, in.mean, in.rstd);
  for (auto _ : state) {
    benchmark::DoNotOptimize(LayerNormBackward(in.x, in.gamma, in.mean, in.rstd, in.dy));
  }
  state.SetBytesProcessed(state.iterations() * 3 * in.x.size() * sizeof(float));
}
BENCHMARK(BM_LayerNormBackward)->Arg(256)->Arg(512)->Arg(1024);

void BM_LayerNormBackwardSequentialDouble(benchmark::State& state) {
  Inputs in(static_cast<size_t>(state.range(0)));
  SequentialForward(in.x, in.gamma, in.beta, 1e-5f, in.y, in.mean, in.rstd);
  std::vector<double> dgamma, dbeta;
  for (auto _ : state) {
    SequentialBackward(in.x, in.gamma, in.mean, in.rstd, in.dy, in.dx, dgamma, dbeta);
    benchmark::DoNotOptimize(in.dx.data());
  }
  state.SetBytesProcessed(state.iterations() * 3 * in.x.size() * sizeof(float));
}
BENCHMARK(BM_LayerNormBackwardSequentialDouble)->Arg(256)->Arg(512)->Arg(1024);

}  // namespace
}  // namespace loom
