// The kernels of gpt_kernels.h and the cuBLAS products DeviceGptModel makes, each
// against a double-precision host reference, f32 and bf16, at widths below, at and
// above a row block (64, 256, 320), the layer norm's warp-per-row widths (up to 1024
// and 2048) and past them (2050), and rows above a column-sum chunk.
#include "models/gpt/gpu/gpt_kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/gpu/cuda_status.h"
#include "core/half.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

constexpr uint64_t kSeed = 58;

bool HasDevice() {
  absl::StatusOr<int> count = CudaDeviceCountOrZero();
  return count.ok() && *count > 0;
}

std::vector<float> Random(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

float RoundBf16(float x) { return ToFloat(ToBFloat16(x)); }

// Device memory holding f32 values, or their bf16 rounding.
struct Dev {
  void* p = nullptr;
  size_t n = 0;
  bool bf16 = false;
  Dev(const std::vector<float>& v, bool as_bf16) : n(v.size()), bf16(as_bf16) {
    const size_t bytes = n * (bf16 ? 2 : 4);
    EXPECT_EQ(cudaMalloc(&p, bytes > 0 ? bytes : 1), cudaSuccess);
    if (bf16) {
      std::vector<BFloat16> b(n);
      for (size_t i = 0; i < n; ++i) b[i] = ToBFloat16(v[i]);
      EXPECT_EQ(cudaMemcpy(p, b.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    } else {
      EXPECT_EQ(cudaMemcpy(p, v.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  Dev(size_t count, bool as_bf16) : Dev(std::vector<float>(count, std::nanf("")), as_bf16) {}
  ~Dev() { cudaFree(p); }
  std::vector<float> Get() const {
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> v(n);
    if (bf16) {
      std::vector<BFloat16> b(n);
      EXPECT_EQ(cudaMemcpy(b.data(), p, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      for (size_t i = 0; i < n; ++i) v[i] = ToFloat(b[i]);
    } else {
      EXPECT_EQ(cudaMemcpy(v.data(), p, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return v;
  }
  float* f() const { return static_cast<float*>(p); }
};

// Every element within rel * (|expected| + floor): floor is the size of the terms
// that cancel into it (a layer norm's output sums O(1) terms), so rel applies to
// them; a bf16 output is within 2^-8 of itself.
void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, double rel,
                const std::string& what, double floor = 1e-3) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    worst = std::max(worst, err / (std::fabs(want[i]) + floor));
    if (!(err <= rel * (std::fabs(want[i]) + floor))) {
      if (++bad <= 3) ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", want " << want[i];
    }
  }
  std::printf("%s: worst relative error %.3g (bound %.3g)\n", what.c_str(), worst, rel);
  EXPECT_EQ(bad, 0) << what;
}

class GptKernelsTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (!HasDevice()) GTEST_SKIP() << "no CUDA device";
    std::printf("seed %llu\n", static_cast<unsigned long long>(kSeed));
  }
  bool bf16() const { return GetParam(); }
  double out_rel() const { return bf16() ? 1.0 / 128 : 2e-5; }
};

TEST_P(GptKernelsTest, LayerNormForwardAndBackward) {
  // Up to 1024 and 2048 (a warp a row, two register widths), and 2050 (a block a row).
  for (const int64_t n : {64, 256, 320, 1536, 2050}) {
    const int64_t rows = 160;
    const std::string what = absl::StrCat("n=", n, bf16() ? " bf16" : " f32");
    const std::vector<float> x = Random(rows * n, kSeed + n, -2, 3);
    const std::vector<float> gamma = Random(n, kSeed + 1, 0.5, 1.5), beta = Random(n, kSeed + 2);
    const std::vector<float> dy = Random(rows * n, kSeed + 3), res = Random(rows * n, kSeed + 4);
    Dev dx_(x, false), dg(gamma, false), db(beta, false), ddy(dy, false), dres(res, false);
    Dev y(rows * n, bf16()), mean(rows, false), rstd(rows, false), dx(rows * n, false),
        dx_op(rows * n, bf16());
    ASSERT_EQ(gpt_gpu::LayerNormForward(dx_.f(), dg.f(), db.f(), 1e-5f, y.p, mean.f(), rstd.f(),
                                        rows, n, bf16(), nullptr),
              cudaSuccess);
    ASSERT_EQ(gpt_gpu::LayerNormBackward(dx_.f(), dg.f(), mean.f(), rstd.f(), ddy.f(), dres.f(),
                                         dx.f(), dx_op.p, rows, n, bf16(), nullptr),
              cudaSuccess);
    std::vector<double> want_y(rows * n), want_dx(rows * n);
    const std::vector<double> xd(x.begin(), x.end()), gd(gamma.begin(), gamma.end()),
        bd(beta.begin(), beta.end()), dyd(dy.begin(), dy.end()), rd(res.begin(), res.end());
    for (int64_t r = 0; r < rows; ++r) {
      double mu = 0, var = 0;
      for (int64_t j = 0; j < n; ++j) mu += xd[r * n + j];
      mu /= n;
      for (int64_t j = 0; j < n; ++j) var += (xd[r * n + j] - mu) * (xd[r * n + j] - mu);
      const double rs = 1 / std::sqrt(var / n + 1e-5);
      double mg = 0, mgx = 0;
      for (int64_t j = 0; j < n; ++j) {
        const double xh = (xd[r * n + j] - mu) * rs, g = dyd[r * n + j] * gd[j];
        want_y[r * n + j] = xh * gd[j] + bd[j];
        mg += g;
        mgx += g * xh;
      }
      mg /= n;
      mgx /= n;
      for (int64_t j = 0; j < n; ++j) {
        const double xh = (xd[r * n + j] - mu) * rs, g = dyd[r * n + j] * gd[j];
        want_dx[r * n + j] = rs * (g - mg - xh * mgx) + rd[r * n + j];
      }
    }
    ExpectNear(y.Get(), want_y, out_rel(), what + " layer norm y", bf16() ? 1e-3 : 1.0);
    ExpectNear(dx.Get(), want_dx, 2e-4, what + " layer norm dx");
    ExpectNear(dx_op.Get(), want_dx, out_rel() + 2e-4, what + " layer norm dx operand");
    // In place, as the model calls it: dx is the residual's own memory.
    Dev in_place(res, false);
    ASSERT_EQ(gpt_gpu::LayerNormBackward(dx_.f(), dg.f(), mean.f(), rstd.f(), ddy.f(),
                                         in_place.f(), in_place.f(), nullptr, rows, n, bf16(),
                                         nullptr),
              cudaSuccess);
    ExpectNear(in_place.Get(), want_dx, 2e-4, what + " layer norm dx in place");
  }
}

// The layer norm's backward with its parameter gradients and the column sums of its
// dx, in place (dx is the residual's memory) as the model calls it: widths that take
// the one-pass kernel (64, 320, 1024) and the three kernels (1002, 1536), over 300
// rows (9 blocks of 32 and one of 12: three warps of it with rows, five without).
TEST_P(GptKernelsTest, LayerNormBackwardWithItsGradients) {
  for (const int64_t n : {64, 320, 1024, 1002, 1536}) {
    const int64_t rows = 300;
    const bool with_sum = n != 320;  // 320 leaves dx_sum null
    const std::string what = absl::StrCat("n=", n, bf16() ? " bf16" : " f32");
    const std::vector<float> x = Random(rows * n, kSeed + 31 + n, -2, 3);
    const std::vector<float> gamma = Random(n, kSeed + 32, 0.5, 1.5);
    const std::vector<float> dy = Random(rows * n, kSeed + 33), res = Random(rows * n, kSeed + 34);
    const std::vector<float> mean = Random(rows, kSeed + 35, -0.5, 0.5),
                             rstd = Random(rows, kSeed + 36, 0.5, 2);
    const std::vector<float> start_g = Random(n, kSeed + 37), start_b = Random(n, kSeed + 38),
                             start_s = Random(n, kSeed + 39);
    Dev dx_(x, false), dg(gamma, false), ddy(dy, false), dres(res, false), dmean(mean, false),
        drstd(rstd, false), dgamma(start_g, false), dbeta(start_b, false), dsum(start_s, false),
        dx_op(rows * n, bf16());
    Dev partial(static_cast<size_t>(gpt_gpu::ColumnPartialFloats(rows, n)), false);
    ASSERT_EQ(gpt_gpu::LayerNormBackwardWithGrads(
                  dx_.f(), dg.f(), dmean.f(), drstd.f(), ddy.f(), dres.f(), dres.f(), dx_op.p,
                  dgamma.f(), dbeta.f(), with_sum ? dsum.f() : nullptr, partial.f(), rows, n,
                  bf16(), nullptr),
              cudaSuccess);
    std::vector<double> want_dx(rows * n), want_g(start_g.begin(), start_g.end()),
        want_b(start_b.begin(), start_b.end()), want_s(start_s.begin(), start_s.end());
    std::vector<double> magnitude(3, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const double mu = mean[r], rs = rstd[r];
      double mg = 0, mgx = 0;
      for (int64_t j = 0; j < n; ++j) {
        const double xh = (static_cast<double>(x[r * n + j]) - mu) * rs;
        const double g = static_cast<double>(dy[r * n + j]) * static_cast<double>(gamma[j]);
        mg += g;
        mgx += g * xh;
      }
      mg /= n;
      mgx /= n;
      for (int64_t j = 0; j < n; ++j) {
        const double xh = (static_cast<double>(x[r * n + j]) - mu) * rs;
        const double d = dy[r * n + j], g = d * static_cast<double>(gamma[j]);
        const double out = rs * (g - mg - xh * mgx) + static_cast<double>(res[r * n + j]);
        want_dx[r * n + j] = out;
        want_g[j] += d * xh;
        want_b[j] += d;
        want_s[j] += out;
        magnitude[0] += std::fabs(d * xh);
        magnitude[1] += std::fabs(d);
        magnitude[2] += std::fabs(out);
      }
    }
    ExpectNear(dres.Get(), want_dx, 2e-4, what + " dx in place");
    ExpectNear(dx_op.Get(), want_dx, out_rel() + 2e-4, what + " dx operand");
    // Column sums of 300 rows in f32, stated against the mean column's magnitude.
    ExpectNear(dgamma.Get(), want_g, 1e-4, what + " dgamma", magnitude[0] / n);
    ExpectNear(dbeta.Get(), want_b, 1e-4, what + " dbeta", magnitude[1] / n);
    if (with_sum) {
      ExpectNear(dsum.Get(), want_s, 1e-4, what + " dx column sums", magnitude[2] / n);
    } else {
      ExpectNear(dsum.Get(), std::vector<double>(start_s.begin(), start_s.end()), 0,
                 what + " dx_sum untouched when null", 1.0);
    }
  }
}

// The residual add and the layer norm after it in one pass: out = x + y + bias (into
// y's memory, as the model calls it), and the norm of out. Widths that fit a warp (64
// to 2048, multiples of 4) and two that take the two-kernel path (1002, 2052).
TEST_P(GptKernelsTest, BiasResidualThenLayerNorm) {
  for (const int64_t n : {64, 320, 1024, 1536, 1002, 2052}) {
    const int64_t rows = 136;
    const std::string what = absl::StrCat("n=", n, bf16() ? " bf16" : " f32");
    const std::vector<float> x = Random(rows * n, kSeed + 11 + n, -2, 3);
    const std::vector<float> y = Random(rows * n, kSeed + 12 + n, -1, 2);
    const std::vector<float> bias = Random(n, kSeed + 13), gamma = Random(n, kSeed + 14, 0.5, 1.5),
                             beta = Random(n, kSeed + 15);
    Dev dx(x, false), dy(y, false), dbias(bias, false), dg(gamma, false), db(beta, false);
    Dev ln(rows * n, bf16()), mean(rows, false), rstd(rows, false);
    ASSERT_EQ(gpt_gpu::BiasResidualLayerNorm(dx.f(), dy.f(), dbias.f(), dy.f(), dg.f(), db.f(),
                                             1e-5f, ln.p, mean.f(), rstd.f(), rows, n, bf16(),
                                             nullptr),
              cudaSuccess);
    std::vector<double> want_sum(rows * n), want_ln(rows * n), want_mean(rows), want_rstd(rows);
    for (int64_t r = 0; r < rows; ++r) {
      double mu = 0, var = 0;
      for (int64_t j = 0; j < n; ++j) {
        // The sum as f32 rounds it (x + y, then + bias): the norm is of that.
        const float sum = (x[r * n + j] + y[r * n + j]) + bias[j];
        want_sum[r * n + j] = static_cast<double>(sum);
        mu += static_cast<double>(sum);
      }
      mu /= n;
      for (int64_t j = 0; j < n; ++j) var += (want_sum[r * n + j] - mu) * (want_sum[r * n + j] - mu);
      const double rs = 1 / std::sqrt(var / n + 1e-5);
      for (int64_t j = 0; j < n; ++j) {
        want_ln[r * n + j] =
            (want_sum[r * n + j] - mu) * rs * static_cast<double>(gamma[j]) +
            static_cast<double>(beta[j]);
      }
      want_mean[r] = mu;
      want_rstd[r] = rs;
    }
    ExpectNear(dy.Get(), want_sum, 1e-7, what + " residual sum", 1.0);
    ExpectNear(ln.Get(), want_ln, out_rel(), what + " its layer norm", bf16() ? 1e-3 : 1.0);
    ExpectNear(mean.Get(), want_mean, 1e-5, what + " mean", 1.0);
    ExpectNear(rstd.Get(), want_rstd, 1e-5, what + " rstd");
  }
}

// Column sums (bias gradients) and the layer norm's parameter gradients, added to
// what the outputs held: widths whose rows take 4 columns a thread (320, 1024, 4096)
// and 1 (1002), over 300 rows (two whole 128-row chunks and a partial one).
TEST_P(GptKernelsTest, ColumnSumsAndLayerNormParameterGradients) {
  for (const int64_t n : {320, 1024, 4096, 1002}) {
    const int64_t rows = 300;
    const std::string what = absl::StrCat("n=", n, bf16() ? " bf16" : " f32");
    std::vector<float> v = Random(rows * n, kSeed + 21 + n);
    if (bf16()) {
      for (float& e : v) e = RoundBf16(e);
    }
    const std::vector<float> x = Random(rows * n, kSeed + 22 + n, -2, 3);
    const std::vector<float> mean = Random(rows, kSeed + 23, -0.5, 0.5),
                             rstd = Random(rows, kSeed + 24, 0.5, 2);
    const std::vector<float> start_a = Random(n, kSeed + 25), start_b = Random(n, kSeed + 26);
    Dev dv(v, bf16()), dv32(v, false), dx(x, false), dmean(mean, false), drstd(rstd, false);
    Dev sum(start_a, false), dgamma(start_a, false), dbeta(start_b, false);
    Dev partial(static_cast<size_t>(gpt_gpu::ColumnPartialFloats(rows, n)), false);
    ASSERT_EQ(gpt_gpu::ColumnSumAdd(dv.p, bf16(), sum.f(), partial.f(), rows, n, nullptr),
              cudaSuccess);
    ASSERT_EQ(gpt_gpu::LayerNormParamGrads(dx.f(), dmean.f(), drstd.f(), dv32.f(), dgamma.f(),
                                           dbeta.f(), partial.f(), rows, n, nullptr),
              cudaSuccess);
    std::vector<double> want_sum(start_a.begin(), start_a.end()),
        want_gamma(start_a.begin(), start_a.end()), want_beta(start_b.begin(), start_b.end());
    double scale = 0;  // the largest column's sum of magnitudes: the rounding's scale
    for (int64_t c = 0; c < n; ++c) {
      double magnitude = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const double value = v[r * n + c];
        const double xhat = (static_cast<double>(x[r * n + c]) - static_cast<double>(mean[r])) *
                            static_cast<double>(rstd[r]);
        want_sum[c] += value;
        want_beta[c] += value;
        want_gamma[c] += value * xhat;
        magnitude += std::fabs(value * xhat);
      }
      scale = std::max(scale, magnitude);
    }
    // f32 sums of 300 terms: within 300 * 2^-24 of the magnitudes, stated against the
    // largest (a column may cancel to near zero).
    ExpectNear(sum.Get(), want_sum, 1e-4, what + " column sums", scale);
    ExpectNear(dbeta.Get(), want_beta, 1e-4, what + " dbeta", scale);
    ExpectNear(dgamma.Get(), want_gamma, 1e-4, what + " dgamma", scale);
  }
}

TEST_P(GptKernelsTest, HeadsSplitAndMergeAreInverse) {
  const int64_t s = 80, b = 2;
  for (const int64_t heads : {2, 4, 5}) {
    const int64_t d = heads == 5 ? 64 : 256 / heads, h = heads * d;
    const std::string what = absl::StrCat("heads=", heads, " d=", d, bf16() ? " bf16" : " f32");
    std::vector<float> qkv = Random(s * b * 3 * h, kSeed + heads), bias = Random(3 * h, 9);
    if (bf16()) {
      for (float& v : qkv) v = RoundBf16(v);
      for (float& v : bias) v = 0;  // the sum stays exact in bf16
    }
    Dev dqkv(qkv, false), dbias(bias, false), q(s * b * h, bf16()), k(s * b * h, bf16()),
        v(s * b * h, bf16()), back(s * b * 3 * h, bf16()), ctx(s * b * h, bf16()),
        heads_out(s * b * h, bf16());
    ASSERT_EQ(gpt_gpu::SplitQkv(dqkv.f(), dbias.f(), q.p, k.p, v.p, s, b, heads, d, bf16(), nullptr),
              cudaSuccess);
    ASSERT_EQ(gpt_gpu::MergeQkv(q.p, k.p, v.p, back.p, s, b, heads, d, bf16(), nullptr),
              cudaSuccess);
    std::vector<double> want(qkv.begin(), qkv.end());
    for (size_t i = 0; i < want.size(); ++i) want[i] += static_cast<double>(bias[i % (3 * h)]);
    ExpectNear(back.Get(), want, 1e-7, what + " split then merge");
    // q's layout: [b * heads, s, d] holds qkv[(si * b + bi) * 3h + j * d + e].
    const std::vector<float> qv = q.Get();
    std::vector<double> want_q(s * b * h);
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t j = 0; j < heads; ++j)
        for (int64_t si = 0; si < s; ++si)
          for (int64_t e = 0; e < d; ++e)
            want_q[((bi * heads + j) * s + si) * d + e] =
                want[(si * b + bi) * 3 * h + j * d + e];
    ExpectNear(qv, want_q, 1e-7, what + " q in head layout");
    ASSERT_EQ(gpt_gpu::PermuteHeads(q.p, ctx.p, /*to_heads=*/false, s, b, heads, d, bf16(), nullptr),
              cudaSuccess);
    ASSERT_EQ(gpt_gpu::PermuteHeads(ctx.p, heads_out.p, /*to_heads=*/true, s, b, heads, d, bf16(),
                                    nullptr),
              cudaSuccess);
    ExpectNear(heads_out.Get(), want_q, 1e-7, what + " permute there and back");
  }
}

TEST_P(GptKernelsTest, BiasGeluAndItsGradient) {
  // n = 1024 runs 8 elements a thread; 1000 (not a multiple of 8) one; the fused
  // gradient and bias sum take 4 columns a thread at both, and 1002 the two kernels.
  for (const int64_t n : {1024, 1000, 1002}) {
    const int64_t rows = 160;
    const std::string what = absl::StrCat("n=", n, bf16() ? " bf16" : " f32");
    const std::vector<float> pre = Random(rows * n, kSeed + 5, -4, 4), bias = Random(n, 6);
    const std::vector<float> dg = Random(rows * n, kSeed + 7);
    // The product's output and the incoming gradient come in the operand type.
    Dev dpre(pre, bf16()), dbias(bias, false), g(rows * n, bf16()), ddg(dg, bf16()),
        dout(rows * n, bf16());
    ASSERT_EQ(gpt_gpu::BiasGeluForward(dpre.p, dbias.f(), g.p, rows, n, bf16(), nullptr),
              cudaSuccess);
    ASSERT_EQ(gpt_gpu::GeluBackward(dpre.p, ddg.p, dout.p, rows * n, bf16(), nullptr),
              cudaSuccess);
    const auto as_stored = [&](double x) {
      return bf16() ? double{RoundBf16(static_cast<float>(x))} : x;
    };
    std::vector<double> want_g(rows * n), want_d(rows * n), want_pre(rows * n);
    for (int64_t i = 0; i < rows * n; ++i) {
      const double x = as_stored(as_stored(pre[i]) + static_cast<double>(bias[i % n]));
      const double c = std::sqrt(2 / M_PI), t = std::tanh(c * (x + 0.044715 * x * x * x));
      want_pre[i] = x;
      want_g[i] = 0.5 * x * (1 + t);
      want_d[i] = as_stored(dg[i]) *
                  (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x));
    }
    ExpectNear(dpre.Get(), want_pre, out_rel() + 1e-5, what + " pre + bias", bf16() ? 1e-3 : 1.0);
    ExpectNear(g.Get(), want_g, out_rel() + 1e-5, what + " gelu", bf16() ? 1e-3 : 1.0);
    ExpectNear(dout.Get(), want_d, out_rel() + 1e-5, what + " gelu'", bf16() ? 1e-3 : 1.0);
    // The gradient with the bias's column sums in one pass: the same dpre, bit for bit,
    // and the sums of it as written added to what dbias held.
    const std::vector<float> start = Random(n, kSeed + 8);
    Dev fused(rows * n, bf16()), dbias_grad(start, false);
    Dev partial(static_cast<size_t>(gpt_gpu::ColumnPartialFloats(rows, n)), false);
    ASSERT_EQ(gpt_gpu::GeluBackwardBiasGrad(dpre.p, ddg.p, fused.p, dbias_grad.f(), partial.f(),
                                            rows, n, bf16(), nullptr),
              cudaSuccess);
    const std::vector<float> unfused = dout.Get(), got = fused.Get();
    EXPECT_EQ(std::memcmp(unfused.data(), got.data(), got.size() * sizeof(float)), 0)
        << what << ": the fused gradient differs from GeluBackward's";
    std::vector<double> want_bias(start.begin(), start.end());
    double scale = 0;
    for (int64_t c = 0; c < n; ++c) {
      double magnitude = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const double value = got[r * n + c];
        want_bias[c] += value;
        magnitude += std::fabs(value);
      }
      scale = std::max(scale, magnitude);
    }
    ExpectNear(dbias_grad.Get(), want_bias, 1e-4, what + " fc bias gradient", scale);
  }
}

// The products DeviceGptModel makes (row-major C = op(A) op(B) through cuBLAS's
// column-major interface) at the shapes of a hidden-256 model, 160 rows.
TEST_P(GptKernelsTest, ProductsAtTheModelsShapes) {
  cublasHandle_t handle;
  ASSERT_EQ(cublasCreate(&handle), CUBLAS_STATUS_SUCCESS);
  if (!bf16()) {
    ASSERT_EQ(cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH), CUBLAS_STATUS_SUCCESS);
  }
  struct Shape {
    bool ta, tb;
    int m, n, k;
  };
  for (const Shape& sh : {Shape{false, true, 160, 768, 256}, Shape{false, true, 160, 1024, 256},
                          Shape{false, true, 160, 256, 1024}, Shape{false, true, 160, 96, 256},
                          Shape{false, false, 160, 256, 768}, Shape{true, false, 768, 256, 160},
                          Shape{false, true, 400, 256, 256}, Shape{false, true, 400, 768, 256},
                          Shape{false, true, 400, 1024, 256}, Shape{false, true, 400, 256, 1024},
                          Shape{false, true, 400, 64, 256}, Shape{true, false, 1024, 256, 400},
                          Shape{false, true, 1000, 320, 320}}) {
    const std::string what = absl::StrCat(sh.ta ? "T" : "N", sh.tb ? "T" : "N", " ", sh.m, "x",
                                          sh.n, "x", sh.k, bf16() ? " bf16" : " f32");
    const int a_rows = sh.ta ? sh.k : sh.m, a_cols = sh.ta ? sh.m : sh.k;
    const int b_rows = sh.tb ? sh.n : sh.k, b_cols = sh.tb ? sh.k : sh.n;
    std::vector<float> a = Random(static_cast<size_t>(a_rows) * a_cols, kSeed + sh.m + sh.k);
    std::vector<float> b = Random(static_cast<size_t>(b_rows) * b_cols, kSeed + sh.n);
    if (bf16()) {
      for (float& x : a) x = RoundBf16(x);
      for (float& x : b) x = RoundBf16(x);
    }
    Dev da(a, bf16()), db(b, bf16()), dc(static_cast<size_t>(sh.m) * sh.n, false);
    const float alpha = 1, beta = 0;
    const cudaDataType ab = bf16() ? CUDA_R_16BF : CUDA_R_32F;
    ASSERT_EQ(cublasGemmEx(handle, sh.tb ? CUBLAS_OP_T : CUBLAS_OP_N, sh.ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                           sh.n, sh.m, sh.k, &alpha, db.p, ab, b_cols, da.p, ab, a_cols, &beta, dc.p,
                           CUDA_R_32F, sh.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS)
        << what;
    std::vector<double> want(static_cast<size_t>(sh.m) * sh.n, 0.0);
    for (int i = 0; i < sh.m; ++i)
      for (int j = 0; j < sh.n; ++j) {
        double sum = 0;
        for (int p = 0; p < sh.k; ++p) {
          const double av = static_cast<double>(
              sh.ta ? a[static_cast<size_t>(p) * a_cols + i] : a[static_cast<size_t>(i) * a_cols + p]);
          const double bv = static_cast<double>(
              sh.tb ? b[static_cast<size_t>(j) * b_cols + p] : b[static_cast<size_t>(p) * b_cols + j]);
          sum += av * bv;
        }
        want[static_cast<size_t>(i) * sh.n + j] = sum;
      }
    // f32 accumulation of k exact products: within about k * 2^-24 * sum |a||b|
    // (|a|, |b| <= 1, so sum |a||b| <= k); checked as k * 1e-6 absolute.
    const std::vector<float> got = dc.Get();
    int bad = 0;
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
      worst = std::max(worst, err);
      if (!(err <= 1e-6 * sh.k) && ++bad <= 3) {
        ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", want " << want[i];
      }
    }
    std::printf("%s: worst absolute error %.3g (bound %.3g)\n", what.c_str(), worst, 1e-6 * sh.k);
    EXPECT_EQ(bad, 0) << what;
  }
  cublasDestroy(handle);
}

INSTANTIATE_TEST_SUITE_P(Precisions, GptKernelsTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& param) {
                           return param.param ? "Bf16" : "F32";
                         });

}  // namespace
}  // namespace loom
