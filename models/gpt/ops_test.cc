// LayerNorm and GELU against double-precision references: the forward against the
// formula in double, the backward against central finite differences of that double
// forward (step 1e-6, so the difference's own error, ~1e-10, is negligible).
//
// Bound: |f32 - reference| <= 1e-5 * max(1, max |reference|). The f32 kernels round
// once per operation over rows of 7 values (sums in double), a few 2^-24 relative
// errors on O(1) values: ~1e-6, so 1e-5 holds with margin and any wrong term (a
// missing mean(g) or xhat * mean(g xhat), a wrong GELU slope) is off by far more.
#include "models/gpt/ops.h"

#include <cmath>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/gpt/gpt_init.h"
#include "models/gpt/internal/train_testing.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using train_testing::ExpectClose;

constexpr double kRel = 1e-5;
constexpr double kStep = 1e-6;
constexpr int64_t kRows = 3;
constexpr int64_t kWidth = 7;
constexpr double kEps = 1e-5;

std::vector<double> LayerNormReference(const std::vector<double>& x, const std::vector<double>& g,
                                       const std::vector<double>& b) {
  const size_t n = g.size();
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / n; ++r) {
    double mean = 0, var = 0;
    for (size_t j = 0; j < n; ++j) mean += x[r * n + j];
    mean /= static_cast<double>(n);
    for (size_t j = 0; j < n; ++j) var += (x[r * n + j] - mean) * (x[r * n + j] - mean);
    var /= static_cast<double>(n);
    for (size_t j = 0; j < n; ++j) {
      y[r * n + j] = (x[r * n + j] - mean) / std::sqrt(var + kEps) * g[j] + b[j];
    }
  }
  return y;
}

double GeluReference(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

std::vector<double> ToDouble(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}
std::vector<float> ToFloat(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

double Dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Gradient of sum(dy * f(v)) with respect to v, by central differences.
template <typename F>
std::vector<double> NumericGradient(std::vector<double> v, const std::vector<double>& dy, F f) {
  std::vector<double> grad(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double saved = v[i];
    v[i] = saved + kStep;
    const double plus = Dot(dy, f(v));
    v[i] = saved - kStep;
    const double minus = Dot(dy, f(v));
    v[i] = saved;
    grad[i] = (plus - minus) / (2 * kStep);
  }
  return grad;
}

TEST(LayerNormTest, ForwardAndBackwardMatchDoubleFiniteDifferences) {
  const std::vector<float> x = SeededValues(1, "x", kRows * kWidth, 1.0f, 0.3f);
  const std::vector<float> gamma = SeededValues(2, "gamma", kWidth, 0.3f, 1.0f);
  const std::vector<float> beta = SeededValues(3, "beta", kWidth, 0.5f);
  const std::vector<float> dy = SeededValues(4, "dy", kRows * kWidth, 1.0f);
  LOOM_ASSERT_OK_AND_ASSIGN(LayerNormOutput out,
                            LayerNormForward(x, gamma, beta, static_cast<float>(kEps)));
  const std::vector<double> xd = ToDouble(x), gd = ToDouble(gamma), bd = ToDouble(beta),
                            dyd = ToDouble(dy);
  ExpectClose(out.y, ToFloat(LayerNormReference(xd, gd, bd)), "y", kRel, 1.0);
  LOOM_ASSERT_OK_AND_ASSIGN(LayerNormGrads grads,
                            LayerNormBackward(x, gamma, out.mean, out.rstd, dy));
  const auto dx = NumericGradient(xd, dyd, [&](const std::vector<double>& v) {
    return LayerNormReference(v, gd, bd);
  });
  const auto dgamma = NumericGradient(gd, dyd, [&](const std::vector<double>& v) {
    return LayerNormReference(xd, v, bd);
  });
  const auto dbeta = NumericGradient(bd, dyd, [&](const std::vector<double>& v) {
    return LayerNormReference(xd, gd, v);
  });
  ExpectClose(grads.dx, ToFloat(dx), "dx", kRel, 1.0);
  ExpectClose(grads.dgamma, ToFloat(dgamma), "dgamma", kRel, 1.0);
  ExpectClose(grads.dbeta, ToFloat(dbeta), "dbeta", kRel, 1.0);
}

TEST(LayerNormTest, RejectsMismatchedSizes) {
  const std::vector<float> x(6, 1.0f), two(2, 1.0f), four(4, 1.0f), three(3, 1.0f);
  EXPECT_THAT(LayerNormForward(x, four, four, 1e-5f),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("6 values are not rows of gamma's width 4")));
  EXPECT_THAT(LayerNormForward(x, two, three, 1e-5f),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("beta has 3 values, gamma 2")));
  EXPECT_THAT(LayerNormForward(x, two, two, 0.0f),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("eps 0 must be > 0")));
  EXPECT_THAT(LayerNormBackward(x, two, three, three, four),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dy 4")));
  // Into the caller's memory: y, mean and rstd must fit x.
  std::vector<float> y(5), rows3(3), rows2(2), y6(6);
  EXPECT_THAT(LayerNormForward(x, two, two, 1e-5f, absl::MakeSpan(y), absl::MakeSpan(rows3),
                               absl::MakeSpan(rows3)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("x has 6 values (3 rows), y 5, mean 3, rstd 3")));
  EXPECT_THAT(LayerNormForward(x, two, two, 1e-5f, absl::MakeSpan(y6), absl::MakeSpan(rows3),
                               absl::MakeSpan(rows2)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rstd 2")));
  std::vector<float> dgamma(2), dbeta3(3);
  EXPECT_THAT(LayerNormBackward(x, two, rows3, rows3, x, absl::MakeSpan(y),
                                absl::MakeSpan(dgamma), absl::MakeSpan(dgamma)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("x has 6 values, dx 5; gamma 2, dgamma 2, dbeta 2")));
  EXPECT_THAT(LayerNormBackward(x, two, rows3, rows3, x, absl::MakeSpan(y6),
                                absl::MakeSpan(dgamma), absl::MakeSpan(dbeta3)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dbeta 3")));
  EXPECT_THAT(GeluForward(x, absl::MakeSpan(y)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("x has 6 values, y 5")));
  EXPECT_THAT(GeluBackward(x, x, absl::MakeSpan(y)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dy 6, dx 5")));
}

// The forms writing into the caller's memory give the bits of the returning ones.
TEST(LayerNormTest, IntoCallersMemoryGivesTheSameBits) {
  std::vector<float> x(4 * kWidth), gamma(kWidth), beta(kWidth);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.7f * static_cast<float>(i)) * 3.0f;
  for (size_t j = 0; j < gamma.size(); ++j) {
    gamma[j] = 1.0f + 0.1f * static_cast<float>(j);
    beta[j] = -0.05f * static_cast<float>(j);
  }
  LOOM_ASSERT_OK_AND_ASSIGN(LayerNormOutput ln, LayerNormForward(x, gamma, beta, 1e-5f));
  std::vector<float> y(x.size()), mean(4), rstd(4);
  LOOM_ASSERT_OK(LayerNormForward(x, gamma, beta, 1e-5f, absl::MakeSpan(y), absl::MakeSpan(mean),
                                  absl::MakeSpan(rstd)));
  EXPECT_EQ(y, ln.y);
  EXPECT_EQ(mean, ln.mean);
  EXPECT_EQ(rstd, ln.rstd);
  const std::vector<float> dy(x.begin(), x.end());
  LOOM_ASSERT_OK_AND_ASSIGN(LayerNormGrads grads,
                            LayerNormBackward(x, gamma, ln.mean, ln.rstd, dy));
  std::vector<float> ln_dx(x.size()), dgamma(kWidth), dbeta(kWidth);
  LOOM_ASSERT_OK(LayerNormBackward(x, gamma, ln.mean, ln.rstd, dy, absl::MakeSpan(ln_dx),
                                   absl::MakeSpan(dgamma), absl::MakeSpan(dbeta)));
  EXPECT_EQ(ln_dx, grads.dx);
  EXPECT_EQ(dgamma, grads.dgamma);
  EXPECT_EQ(dbeta, grads.dbeta);
  std::vector<float> g(x.size()), dx(x.size());
  LOOM_ASSERT_OK(GeluForward(x, absl::MakeSpan(g)));
  EXPECT_EQ(g, GeluForward(x));
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<float> want_dx, GeluBackward(x, y));
  LOOM_ASSERT_OK(GeluBackward(x, y, absl::MakeSpan(dx)));
  EXPECT_EQ(dx, want_dx);
}

TEST(GeluTest, ForwardAndBackwardMatchDoubleFiniteDifferences) {
  // Spans the curve: the negative tail, the bend around 0, the linear part.
  const std::vector<float> x = SeededValues(5, "gelu", 64, 2.5f);
  const std::vector<float> dy = SeededValues(6, "gelu dy", 64, 1.0f);
  const std::vector<double> xd = ToDouble(x), dyd = ToDouble(dy);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = GeluReference(xd[i]);
  ExpectClose(GeluForward(x), ToFloat(y), "gelu", kRel, 1.0);
  const auto dx = NumericGradient(xd, dyd, [](const std::vector<double>& v) {
    std::vector<double> out(v.size());
    for (size_t i = 0; i < v.size(); ++i) out[i] = GeluReference(v[i]);
    return out;
  });
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<float> got, GeluBackward(x, dy));
  ExpectClose(got, ToFloat(dx), "gelu dx", kRel, 1.0);
  EXPECT_THAT(GeluBackward(x, std::vector<float>(3)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("x has 64 values, dy 3")));
}

}  // namespace
}  // namespace loom
