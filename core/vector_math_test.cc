#include "core/vector_math.h"

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

constexpr double kGeluC = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluA = 0.044715;

double GeluRef(double x) { return 0.5 * x * (1.0 + std::tanh(kGeluC * (x + kGeluA * x * x * x))); }

double GeluGradRef(double x) {
  const double t = std::tanh(kGeluC * (x + kGeluA * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluC * (1.0 + 3.0 * kGeluA * x * x);
}

// Format writes a measured error with three significant digits, for the XML report.
std::string Format(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", v);
  return text;
}

// Seeded, distinct inputs over [-limit, limit], plus the edges that break naive tanh
// forms (0, tiny, huge) and a length that leaves a partial vector at the end.
std::vector<float> Inputs(size_t n, float limit, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-limit, limit);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  const float edges[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-4f, limit, -limit, 30.0f, -30.0f};
  for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]) && i < n; ++i) x[i] = edges[i];
  return x;
}

// Every vector level Highway compiled and this CPU runs, one at a time: the bounds hold
// for each, not only the one dispatch picks.
class VectorMathTest : public ::testing::TestWithParam<int64_t> {
 protected:
  void SetUp() override { hwy::SetSupportedTargetsForTest(GetParam()); }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }
};

TEST_P(VectorMathTest, DispatchesToTheTargetUnderTest) {
  EXPECT_EQ(std::string(VectorMathTarget()), std::string(hwy::TargetName(GetParam())));
}

TEST_P(VectorMathTest, GeluMatchesTheDoubleReference) {
  const std::vector<float> x = Inputs(100003, 12.0f, 7);
  std::vector<float> y(x.size());
  LOOM_ASSERT_OK(GeluTanh(x, absl::MakeSpan(y)));
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double err = std::abs(static_cast<double>(y[i]) - GeluRef(static_cast<double>(x[i])));
    worst = std::max(worst, err / (1.0 + std::abs(static_cast<double>(x[i]))));
  }
  RecordProperty("worst_relative_to_1_plus_abs_x", Format(worst));
  EXPECT_LE(worst, 2e-7) << "worst |error| / (1 + |x|)";
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[7], 30.0f);  // tanh saturates: GELU(x) = x for large x
  EXPECT_EQ(y[8], -0.0f);
}

TEST_P(VectorMathTest, GeluInPlaceEqualsOutOfPlace) {
  const std::vector<float> x = Inputs(37, 5.0f, 8);
  std::vector<float> y(x.size()), z = x;
  LOOM_ASSERT_OK(GeluTanh(x, absl::MakeSpan(y)));
  LOOM_ASSERT_OK(GeluTanh(z, absl::MakeSpan(z)));
  EXPECT_EQ(y, z);
}

TEST_P(VectorMathTest, GeluBackwardMatchesTheDoubleReference) {
  const std::vector<float> x = Inputs(100003, 12.0f, 9);
  const std::vector<float> dy = Inputs(x.size(), 3.0f, 10);
  std::vector<float> dx(x.size());
  LOOM_ASSERT_OK(GeluTanhBackward(x, dy, absl::MakeSpan(dx)));
  double worst = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double ref = static_cast<double>(dy[i]) * GeluGradRef(static_cast<double>(x[i]));
    const double scale = std::abs(static_cast<double>(dy[i])) *
                         (1.0 + std::abs(static_cast<double>(x[i])));
    if (scale > 0.0) worst = std::max(worst, std::abs(static_cast<double>(dx[i]) - ref) / scale);
  }
  RecordProperty("worst_relative_to_dy_1_plus_abs_x", Format(worst));
  EXPECT_LE(worst, 5e-7) << "worst |error| / (|dy| (1 + |x|))";
}

// Units in the last place between a float result and the double reference.
double Ulps(float got, double want) {
  const double ulp = static_cast<double>(std::abs(
      std::nextafter(static_cast<float>(want), std::numeric_limits<float>::infinity()) -
      static_cast<float>(want)));
  return std::abs(static_cast<double>(got) - want) / ulp;
}

TEST_P(VectorMathTest, ExpShiftIsWithinOneUlpAndSumsItsValues) {
  std::vector<float> x = Inputs(4099, 50.0f, 11);
  const std::vector<float> original = x;
  const float shift = MaxValue(x);
  EXPECT_EQ(shift, 50.0f);
  const float sum = ExpShiftInPlace(absl::MakeSpan(x), shift);
  double worst = 0.0, ref_sum = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    // The f32 difference, rounded once as the kernel (and scalar f32 code) rounds it.
    const float diff = original[i] - shift;
    const double want = std::exp(static_cast<double>(diff));
    ref_sum += static_cast<double>(x[i]);
    if (want > 1e-37) worst = std::max(worst, Ulps(x[i], want));  // normal results only
  }
  RecordProperty("worst_ulp", Format(worst));
  EXPECT_LE(worst, 1.0);
  // f32 lanes summing 4099 values in [0, 1]: a relative bound of n * 2^-24.
  EXPECT_NEAR(sum, ref_sum, ref_sum * 4099 * 6e-8);
}

TEST_P(VectorMathTest, MaxValueSeesEveryLaneAndNaN) {
  for (size_t n : {size_t{1}, size_t{3}, size_t{16}, size_t{17}, size_t{1001}}) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 7) * 0.25f - 1.0f;
    x[n - 1] = 2.0f;  // in the partial vector, when there is one
    EXPECT_EQ(MaxValue(x), 2.0f) << n;
    x[n / 2] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_TRUE(std::isnan(MaxValue(x))) << n;
  }
  EXPECT_EQ(MaxValue({}), -std::numeric_limits<float>::infinity());
}

TEST_P(VectorMathTest, SoftmaxMatchesTheDoubleReference) {
  for (size_t n : {size_t{1}, size_t{5}, size_t{128}, size_t{257}}) {
    std::vector<float> row = Inputs(n, 20.0f, static_cast<uint32_t>(100 + n));
    const std::vector<float> original = row;
    SoftmaxInPlace(absl::MakeSpan(row));
    double max = -1e300, total = 0.0;
    for (float v : original) max = std::max(max, static_cast<double>(v));
    for (float v : original) total += std::exp(static_cast<double>(v) - max);
    for (size_t i = 0; i < n; ++i) {
      const double want = std::exp(static_cast<double>(original[i]) - max) / total;
      // exp within 1 ulp of the rounded difference (which is off by up to 2^-24 * 40
      // absolute, 40 * 6e-8 relative after exp), the f32 sum within n * 2^-24, one reciprocal and one product.
      EXPECT_NEAR(row[i], want, want * (44.0 + static_cast<double>(n)) * 6e-8 + 1e-30)
          << "n=" << n << " i=" << i;
    }
  }
  SoftmaxInPlace({});  // an empty row is fine
}

TEST_P(VectorMathTest, ScaleMultipliesEveryValue) {
  std::vector<float> x = Inputs(19, 4.0f, 12);
  const std::vector<float> original = x;
  ScaleInPlace(absl::MakeSpan(x), 0.25f);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i], original[i] * 0.25f) << i;
}

// Layer norm's row sums against sequential double sums, at lengths around every vector
// width (a tail, one or two whole accumulators, realistic widths). Both are double
// sums of the same f32 terms, so they differ by double roundings only: a relative
// 1e-12 of the sum of magnitudes.
TEST_P(VectorMathTest, RowSumsMatchSequentialDoubleSums) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{8}, size_t{15}, size_t{16},
                   size_t{17}, size_t{33}, size_t{64}, size_t{255}, size_t{768}, size_t{1027}}) {
    const uint32_t seed = static_cast<uint32_t>(300 + n);
    const std::vector<float> x = Inputs(n, 5.0f, seed);
    const std::vector<float> dy = Inputs(n, 2.0f, seed + 1);
    std::vector<float> gamma = Inputs(n, 1.5f, seed + 2);
    const float mean = n == 0 ? 0.0f : 0.3f, rstd = 1.7f;
    double sum = 0.0, magnitude = 0.0, sq = 0.0, sum_g = 0.0, sum_gx = 0.0, g_mag = 0.0;
    for (size_t i = 0; i < n; ++i) {
      sum += static_cast<double>(x[i]);
      magnitude += std::fabs(static_cast<double>(x[i]));
      const double d = static_cast<double>(x[i] - mean);
      sq += d * d;
      const float xhat = (x[i] - mean) * rstd;
      const float g = dy[i] * gamma[i];
      sum_g += static_cast<double>(g);
      sum_gx += static_cast<double>(g) * static_cast<double>(xhat);
      g_mag += std::fabs(static_cast<double>(g)) * (1.0 + std::fabs(static_cast<double>(xhat)));
    }
    const double bound = 1e-12 * (1.0 + magnitude + sq + g_mag);
    EXPECT_NEAR(SumAsDouble(x), sum, bound) << "n " << n << " seed " << seed;
    EXPECT_NEAR(SquaredDeviationSum(x, mean), sq, bound) << "n " << n << " seed " << seed;
    LOOM_ASSERT_OK_AND_ASSIGN(const NormGradientSums sums,
                              LayerNormGradientSums(x, dy, gamma, mean, rstd));
    EXPECT_NEAR(sums.g, sum_g, bound) << "n " << n << " seed " << seed;
    EXPECT_NEAR(sums.g_xhat, sum_gx, bound) << "n " << n << " seed " << seed;
  }
  // Exact where every partial sum is exact: integers.
  std::vector<float> ints(1000);
  for (size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<float>(i % 97) - 40.0f;
  double exact = 0.0;
  for (float v : ints) exact += static_cast<double>(v);
  EXPECT_EQ(SumAsDouble(ints), exact);
}

// Layer norm's element passes against the same formulas in double, at lengths that
// leave every kind of tail: each output within a few f32 roundings of its own size
// (the kernels round each step to f32; the references do not).
TEST_P(VectorMathTest, NormRowPassesMatchTheFormulas) {
  for (size_t n : {size_t{1}, size_t{5}, size_t{16}, size_t{19}, size_t{64}, size_t{257}}) {
    const uint32_t seed = static_cast<uint32_t>(400 + n);
    const std::vector<float> x = Inputs(n, 5.0f, seed);
    const std::vector<float> dy = Inputs(n, 2.0f, seed + 1);
    const std::vector<float> gamma = Inputs(n, 1.5f, seed + 2);
    const std::vector<float> beta = Inputs(n, 0.5f, seed + 3);
    const float mean = 0.25f, rstd = 0.8f, mean_g = -0.1f, mean_gx = 0.3f;
    std::vector<float> y(n), dx(n);
    std::vector<double> dgamma(n, 1.0), dbeta(n, -1.0);
    LOOM_ASSERT_OK(NormalizeRow(x, mean, rstd, gamma, beta, absl::MakeSpan(y)));
    LOOM_ASSERT_OK(NormRowBackward(x, dy, gamma, mean, rstd, mean_g, mean_gx, absl::MakeSpan(dx)));
    LOOM_ASSERT_OK(
        AccumulateNormParamGrads(x, dy, mean, rstd, absl::MakeSpan(dgamma), absl::MakeSpan(dbeta)));
    constexpr double kUlps = 8 * 6e-8;  // a few f32 roundings, relative
    const double m = static_cast<double>(mean), r = static_cast<double>(rstd);
    const double mg = static_cast<double>(mean_g), mgx = static_cast<double>(mean_gx);
    for (size_t i = 0; i < n; ++i) {
      const double xi = static_cast<double>(x[i]), dyi = static_cast<double>(dy[i]);
      const double gi = static_cast<double>(gamma[i]), bi = static_cast<double>(beta[i]);
      const double xhat = (xi - m) * r;
      const double want_y = xhat * gi + bi;
      const double y_scale = std::fabs(xhat * gi) + std::fabs(bi);
      EXPECT_NEAR(y[i], want_y, kUlps * (1.0 + y_scale)) << "y " << i << " of " << n;
      const double g = dyi * gi;
      const double want_dx = r * (g - mg - xhat * mgx);
      const double dx_scale = r * (std::fabs(g) + std::fabs(mg) + std::fabs(xhat * mgx));
      EXPECT_NEAR(dx[i], want_dx, kUlps * (1.0 + dx_scale)) << "dx " << i << " of " << n;
      // dgamma adds dy * xhat with xhat rounded to f32 once: within one f32 rounding of xhat.
      EXPECT_NEAR(dgamma[i], 1.0 + dyi * xhat, kUlps * (1.0 + std::fabs(dyi * xhat)))
          << "dgamma " << i << " of " << n;
      EXPECT_EQ(dbeta[i], -1.0 + dyi) << "dbeta " << i << " of " << n;
    }
  }
}

// Spans at any float offset and of any length (rows of a matrix whose width is not a
// multiple of the vector, shards of a vocabulary): the same bits as on a fresh,
// aligned copy, and (under AddressSanitizer, where the spans end exactly at their
// allocation) no access past either end.
TEST_P(VectorMathTest, UnalignedSpansAndTailsGiveTheSameBits) {
  for (size_t n : {size_t{1}, size_t{7}, size_t{17}, size_t{37}}) {
    const std::vector<float> base = Inputs(n + 1, 6.0f, static_cast<uint32_t>(200 + n));
    const absl::Span<const float> shifted = absl::MakeConstSpan(base).subspan(1);
    const std::vector<float> aligned(shifted.begin(), shifted.end());
    std::vector<float> y1(n), y2(n);
    LOOM_ASSERT_OK(GeluTanh(shifted, absl::MakeSpan(y1)));
    LOOM_ASSERT_OK(GeluTanh(aligned, absl::MakeSpan(y2)));
    EXPECT_EQ(y1, y2) << n;
    EXPECT_EQ(MaxValue(shifted), MaxValue(aligned)) << n;
    std::vector<float> e1 = base, e2 = aligned;
    const float s1 = ExpShiftInPlace(absl::MakeSpan(e1).subspan(1), 6.0f);
    const float s2 = ExpShiftInPlace(absl::MakeSpan(e2), 6.0f);
    EXPECT_EQ(s1, s2) << n;
    EXPECT_EQ(e1[0], base[0]) << "the value before the span changed";
    EXPECT_EQ(std::vector<float>(e1.begin() + 1, e1.end()), e2) << n;
    EXPECT_EQ(SumAsDouble(shifted), SumAsDouble(aligned)) << n;
    EXPECT_EQ(SquaredDeviationSum(shifted, 0.5f), SquaredDeviationSum(aligned, 0.5f)) << n;
    std::vector<float> n1(n), n2(n);
    LOOM_ASSERT_OK(NormalizeRow(shifted, 0.5f, 2.0f, aligned, aligned, absl::MakeSpan(n1)));
    LOOM_ASSERT_OK(NormalizeRow(aligned, 0.5f, 2.0f, aligned, aligned, absl::MakeSpan(n2)));
    EXPECT_EQ(n1, n2) << n;
  }
}

// The column sums of a row-major matrix, against the plain loop bit for bit: widths
// below, at and above four vectors of every target, a column range inside the row,
// rows from none to many, starting sums that are not zero.
TEST_P(VectorMathTest, AddRowsIntoIsThePlainLoopBitForBit) {
  uint32_t seed = 500;
  for (size_t stride : {size_t{1}, size_t{5}, size_t{16}, size_t{67}, size_t{256}, size_t{1031}}) {
    for (size_t rows : {size_t{0}, size_t{1}, size_t{3}, size_t{64}}) {
      const std::vector<float> g = Inputs(rows * stride, 4.0f, ++seed);
      for (const auto& [column, n] : {std::pair<size_t, size_t>{0, stride},
                                     {stride / 3, stride - stride / 3 - stride / 5}}) {
        std::vector<float> want = Inputs(n, 1.0f, seed + 7);
        std::vector<float> got = want;
        for (size_t r = 0; r < rows; ++r) {
          for (size_t j = 0; j < n; ++j) want[j] += g[r * stride + column + j];
        }
        LOOM_ASSERT_OK(AddRowsInto(g, stride, column, absl::MakeSpan(got)));
        EXPECT_EQ(got, want) << "stride " << stride << " rows " << rows << " columns " << column
                             << ".." << column + n << " seed " << seed;
      }
    }
  }
}

std::string TargetName(const ::testing::TestParamInfo<int64_t>& info) {
  std::string name = hwy::TargetName(info.param);
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(EveryTarget, VectorMathTest,
                         ::testing::ValuesIn(hwy::SupportedAndGeneratedTargets()), TargetName);

TEST(VectorMathErrorsTest, SizeMismatchesNameTheSizes) {
  std::vector<float> x(3), y(2);
  EXPECT_THAT(GeluTanh(x, absl::MakeSpan(y)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("x has 3 values, y 2")));
  EXPECT_THAT(GeluTanhBackward(x, y, absl::MakeSpan(x)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("x has 3 values, dy 2, dx 3")));
  std::vector<double> d3(3);
  EXPECT_THAT(NormalizeRow(x, 0.0f, 1.0f, x, y, absl::MakeSpan(x)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("NormalizeRow: x has 3 values, gamma 3, beta 2, y 3")));
  EXPECT_THAT(NormRowBackward(x, x, x, 0.0f, 1.0f, 0.0f, 0.0f, absl::MakeSpan(y)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("NormRowBackward: x has 3 values, dy 3, gamma 3, dx 2")));
  EXPECT_THAT(AccumulateNormParamGrads(x, y, 0.0f, 1.0f, absl::MakeSpan(d3), absl::MakeSpan(d3)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("AccumulateNormParamGrads: x has 3 values, dy 2, dgamma 3")));
  std::vector<float> sums(2);
  EXPECT_THAT(AddRowsInto(x, 2, 0, absl::MakeSpan(sums)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("AddRowsInto: 3 values in rows of 2 have no columns 0..2")));
  EXPECT_THAT(AddRowsInto(x, 3, 2, absl::MakeSpan(sums)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no columns 2..4")));
  EXPECT_THAT(AddRowsInto(x, 0, 0, absl::MakeSpan(sums)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rows of 0")));
  EXPECT_THAT(LayerNormGradientSums(x, y, x, 0.0f, 1.0f),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("LayerNormGradientSums: x has 3 values, dy 2, gamma 3")));
}

}  // namespace
}  // namespace loom
