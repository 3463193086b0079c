// flash_attention_kernels.h against a double-precision host reference: the forward's
// output and log-sum-exp, the backward's dq, dk, dv, on a seeded sweep of sequence
// lengths (one row; below, at and above a 64-row tile; many tiles), head_dim 64 and
// 128, one and several sequences and heads, in the head layout and in the model's rows
// (Q, K, V side by side); AttentionDelta against its row sums.
#include "models/gpt/gpu/flash_attention_kernels.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/gpu/cuda_status.h"
#include "core/half.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

constexpr uint64_t kSeed = 5858;

bool HasDevice() {
  absl::StatusOr<int> count = CudaDeviceCountOrZero();
  return count.ok() && *count > 0;
}

// bf16-representable values in [lo, hi).
std::vector<float> RandomBf16(size_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = ToFloat(ToBFloat16(dist(rng)));
  return v;
}

struct Device {
  void* p = nullptr;
  explicit Device(size_t bytes) {
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(bytes, 1)), cudaSuccess);
  }
  ~Device() { cudaFree(p); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
};

void PutBf16(const Device& d, const std::vector<float>& v) {
  std::vector<BFloat16> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = ToBFloat16(v[i]);
  ASSERT_EQ(cudaMemcpy(d.p, b.data(), b.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
}

std::vector<float> GetBf16(const Device& d, size_t n) {
  std::vector<BFloat16> b(n);
  EXPECT_EQ(cudaMemcpy(b.data(), d.p, n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = ToFloat(b[i]);
  return v;
}

std::vector<float> GetF32(const Device& d, size_t n) {
  std::vector<float> v(n);
  EXPECT_EQ(cudaMemcpy(v.data(), d.p, n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

// Every element within rel of the tensor's largest reference element (bf16 outputs:
// each product's operands are rounded to bf16, so the error scales with the largest
// terms, not with each element).
void ExpectClose(const std::vector<float>& got, const std::vector<double>& want, double rel,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double largest = 0, worst = 0;
  for (double w : want) largest = std::max(largest, std::fabs(w));
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    worst = std::max(worst, err / largest);
    if (!(err <= rel * largest)) {
      if (++bad <= 3) ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", want " << want[i];
    }
  }
  std::printf("%s: worst error %.3g of the largest |value| %.3g (bound %.3g)\n", what.c_str(),
              worst, largest, rel);
  EXPECT_EQ(bad, 0) << what;
}

struct Reference {
  std::vector<double> out, lse, dq, dk, dv, delta;
};

// Causal softmax(scale q k^T) v per (sequence, head), and its gradients for dout.
Reference Attend(const std::vector<float>& qf, const std::vector<float>& kf,
                 const std::vector<float>& vf, const std::vector<float>& doutf, int64_t bh,
                 int64_t s, int64_t d, double scale) {
  const std::vector<double> q(qf.begin(), qf.end()), k(kf.begin(), kf.end()),
      v(vf.begin(), vf.end()), dout(doutf.begin(), doutf.end());
  Reference r;
  r.out.assign(bh * s * d, 0);
  r.dq.assign(bh * s * d, 0);
  r.dk.assign(bh * s * d, 0);
  r.dv.assign(bh * s * d, 0);
  r.lse.assign(bh * s, 0);
  r.delta.assign(bh * s, 0);
  std::vector<double> p(s), dp(s);
  for (int64_t h = 0; h < bh; ++h) {
    const int64_t base = h * s * d;
    for (int64_t i = 0; i < s; ++i) {
      double m = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < d; ++e) dot += q[base + i * d + e] * k[base + j * d + e];
        p[j] = dot * scale;
        m = std::max(m, p[j]);
      }
      double sum = 0;
      for (int64_t j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - m));
      r.lse[h * s + i] = m + std::log(sum);
      for (int64_t j = 0; j <= i; ++j) p[j] /= sum;
      double delta = 0;
      for (int64_t e = 0; e < d; ++e) {
        double o = 0;
        for (int64_t j = 0; j <= i; ++j) o += p[j] * v[base + j * d + e];
        r.out[base + i * d + e] = o;
        delta += o * dout[base + i * d + e];
      }
      r.delta[h * s + i] = delta;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < d; ++e) dot += dout[base + i * d + e] * v[base + j * d + e];
        dp[j] = p[j] * (dot - delta) * scale;  // dS
        for (int64_t e = 0; e < d; ++e) {
          r.dv[base + j * d + e] += p[j] * dout[base + i * d + e];
          r.dq[base + i * d + e] += dp[j] * k[base + j * d + e];
          r.dk[base + j * d + e] += dp[j] * q[base + i * d + e];
        }
      }
    }
  }
  return r;
}

struct Case {
  int64_t b, heads, s, d;
  bool rows;  // the model's [s, b, 3h] / [s, b, h] row layout, else the head layout
};

// Where logical element (bh, si, e) of an operand lies: in the head layout, or in
// [s, b, width] rows at column part * h + j * d + e.
struct Placement {
  Case c;
  int64_t width, part;
  int64_t operator()(int64_t bh, int64_t si, int64_t e) const {
    if (!c.rows) return (bh * c.s + si) * c.d + e;
    const int64_t bi = bh / c.heads, j = bh % c.heads, h = c.heads * c.d;
    return (si * c.b + bi) * width + part * h + j * c.d + e;
  }
  gpt_gpu::AttentionStrides strides() const {
    return c.rows ? gpt_gpu::RowLayout(c.b, width, c.d) : gpt_gpu::HeadLayout(c.heads, c.s, c.d);
  }
};

// Logical [bh, s, d] values scattered to where `at` puts them in a buffer of `size`.
std::vector<float> Scatter(const std::vector<float>& logical, const Placement& at, size_t size,
                           std::vector<float> into = {}) {
  if (into.empty()) into.assign(size, 0.0f);
  const Case& c = at.c;
  for (int64_t bh = 0; bh < c.b * c.heads; ++bh) {
    for (int64_t si = 0; si < c.s; ++si) {
      for (int64_t e = 0; e < c.d; ++e) into[at(bh, si, e)] = logical[(bh * c.s + si) * c.d + e];
    }
  }
  return into;
}

std::vector<float> Gather(const std::vector<float>& memory, const Placement& at) {
  const Case& c = at.c;
  std::vector<float> logical(c.b * c.heads * c.s * c.d);
  for (int64_t bh = 0; bh < c.b * c.heads; ++bh) {
    for (int64_t si = 0; si < c.s; ++si) {
      for (int64_t e = 0; e < c.d; ++e) logical[(bh * c.s + si) * c.d + e] = memory[at(bh, si, e)];
    }
  }
  return logical;
}

class FlashAttentionTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (!HasDevice()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(FlashAttentionTest, MatchesTheReference) {
  const Case c = GetParam();
  const int64_t bh = c.b * c.heads;
  const uint64_t seed = kSeed + bh * 100000 + c.s * 1000 + c.d + (c.rows ? 7 : 0);
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const size_t n = bh * c.s * c.d;
  // q wider than k so that some rows' softmax is peaked (the online maximum moves).
  const std::vector<float> q = RandomBf16(n, seed, -3, 3), k = RandomBf16(n, seed + 1, -1, 1),
                           v = RandomBf16(n, seed + 2, -1, 1),
                           dout = RandomBf16(n, seed + 3, -1, 1);
  const double scale = 1 / std::sqrt(static_cast<double>(c.d));
  const Reference want = Attend(q, k, v, dout, bh, c.s, c.d, scale);
  // Q, K, V (and their gradients) side by side in one buffer, as the model keeps them.
  const Placement qp{c, 3 * c.heads * c.d, 0}, kp{c, 3 * c.heads * c.d, 1},
      vp{c, 3 * c.heads * c.d, 2}, op{c, c.heads * c.d, 0};
  const size_t qkv_size = c.rows ? 3 * n : n;  // per operand in the head layout
  std::vector<float> qkv_host;
  if (c.rows) {
    qkv_host = Scatter(v, vp, qkv_size, Scatter(k, kp, qkv_size, Scatter(q, qp, qkv_size)));
  }
  Device qkv(c.rows ? qkv_size * 2 : 1), dq_(n * 2), dk_(n * 2), dv_(n * 2), ddout(n * 2),
      dout_(n * 2), dlse(bh * c.s * 4), ddelta(bh * c.s * 4), grads(c.rows ? qkv_size * 2 : 1),
      gq(n * 2), gk(n * 2), gv(n * 2), accum(n * 4);
  const void *qd = dq_.p, *kd = dk_.p, *vd = dv_.p;
  void *gqd = gq.p, *gkd = gk.p, *gvd = gv.p;
  if (c.rows) {
    PutBf16(qkv, qkv_host);
    const int64_t h = c.heads * c.d;
    qd = qkv.p;
    kd = static_cast<const char*>(qkv.p) + h * 2;
    vd = static_cast<const char*>(qkv.p) + 2 * h * 2;
    gqd = grads.p;
    gkd = static_cast<char*>(grads.p) + h * 2;
    gvd = static_cast<char*>(grads.p) + 2 * h * 2;
  } else {
    PutBf16(dq_, q);
    PutBf16(dk_, k);
    PutBf16(dv_, v);
  }
  PutBf16(ddout, Scatter(dout, op, n));
  std::vector<float> delta(want.delta.begin(), want.delta.end());
  ASSERT_EQ(cudaMemcpy(ddelta.p, delta.data(), delta.size() * 4, cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(gpt_gpu::FlashForward(qd, kd, vd, qp.strides(), dout_.p, op.strides(),
                                  static_cast<float*>(dlse.p), c.b, c.heads, c.s, c.d,
                                  static_cast<float>(scale), nullptr),
            cudaSuccess);
  ASSERT_EQ(gpt_gpu::FlashBackward(qd, kd, vd, qp.strides(), ddout.p, op.strides(),
                                   static_cast<float*>(dlse.p), static_cast<float*>(ddelta.p), gqd,
                                   gkd, gvd, qp.strides(), static_cast<float*>(accum.p), c.b,
                                   c.heads, c.s, c.d, static_cast<float>(scale), nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::string what = absl::StrCat("b=", c.b, " heads=", c.heads, " s=", c.s, " d=", c.d,
                                        c.rows ? " rows" : " heads");
  ExpectClose(Gather(GetBf16(dout_, n), op), want.out, 1e-2, what + " out");
  ExpectClose(GetF32(dlse, bh * c.s), want.lse, 1e-5, what + " lse");
  if (c.rows) {
    const std::vector<float> g = GetBf16(grads, qkv_size);
    ExpectClose(Gather(g, qp), want.dq, 2e-2, what + " dq");
    ExpectClose(Gather(g, kp), want.dk, 2e-2, what + " dk");
    ExpectClose(Gather(g, vp), want.dv, 2e-2, what + " dv");
  } else {
    ExpectClose(GetBf16(gq, n), want.dq, 2e-2, what + " dq");
    ExpectClose(GetBf16(gk, n), want.dk, 2e-2, what + " dk");
    ExpectClose(GetBf16(gv, n), want.dv, 2e-2, what + " dv");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sweep, FlashAttentionTest,
    ::testing::Values(Case{1, 1, 1, 64, false}, Case{3, 1, 17, 64, false},
                      Case{1, 2, 64, 64, false}, Case{2, 1, 65, 128, false},
                      Case{1, 3, 130, 64, true}, Case{1, 1, 200, 128, true},
                      Case{2, 1, 257, 64, false}, Case{2, 2, 100, 64, true},
                      Case{3, 2, 65, 128, true}, Case{1, 1, 256, 128, false},
                      Case{2, 1, 1024, 64, true}),
    [](const ::testing::TestParamInfo<Case>& param_info) {
      const Case& c = param_info.param;
      return absl::StrCat("b", c.b, "_heads", c.heads, "_s", c.s, "_d", c.d,
                          c.rows ? "_rows" : "_heads");
    });

// The kernel's delta against rowsum(dout * out) in the model's [s, b, h] rows.
TEST(AttentionDeltaTest, MatchesTheRowSums) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device";
  for (const Case c : {Case{2, 3, 70, 64, true}, Case{1, 2, 33, 128, true}}) {
    const int64_t n = c.b * c.heads * c.s * c.d;
    const std::vector<float> ctx = RandomBf16(n, kSeed + 11, -1, 1),
                             dctx = RandomBf16(n, kSeed + 12, -1, 1);
    Device dc(n * 2), dd(n * 2), delta(c.b * c.heads * c.s * 4);
    PutBf16(dc, ctx);
    PutBf16(dd, dctx);
    ASSERT_EQ(gpt_gpu::AttentionDelta(dc.p, dd.p, static_cast<float*>(delta.p), c.s, c.b, c.heads,
                                      c.d, nullptr),
              cudaSuccess);
    std::vector<double> want(c.b * c.heads * c.s);
    for (int64_t si = 0; si < c.s; ++si) {
      for (int64_t bi = 0; bi < c.b; ++bi) {
        for (int64_t j = 0; j < c.heads; ++j) {
          double sum = 0;
          const int64_t at = ((si * c.b + bi) * c.heads + j) * c.d;
          for (int64_t e = 0; e < c.d; ++e) sum += double{ctx[at + e]} * double{dctx[at + e]};
          want[(bi * c.heads + j) * c.s + si] = sum;
        }
      }
    }
    ExpectClose(GetF32(delta, want.size()), want, 1e-5,
                absl::StrCat("delta b=", c.b, " heads=", c.heads, " d=", c.d));
  }
}

// Head sizes without a tile are refused, not run.
TEST(FlashAttentionArgsTest, RefusesOtherHeadSizes) {
  if (!HasDevice()) GTEST_SKIP() << "no CUDA device";
  EXPECT_FALSE(gpt_gpu::FlashSupported(32));
  const gpt_gpu::AttentionStrides heads = gpt_gpu::HeadLayout(1, 8, 32);
  EXPECT_EQ(gpt_gpu::FlashForward(nullptr, nullptr, nullptr, heads, nullptr, heads, nullptr, 1, 1,
                                  8, 32, 1.0f, nullptr),
            cudaErrorInvalidValue);
  // Rows whose 16-byte vectors would be misaligned.
  const gpt_gpu::AttentionStrides odd{64, 64, 68};
  EXPECT_EQ(gpt_gpu::FlashForward(nullptr, nullptr, nullptr, odd, nullptr, odd, nullptr, 1, 1, 8,
                                  64, 1.0f, nullptr),
            cudaErrorInvalidValue);
}

}  // namespace
}  // namespace loom
