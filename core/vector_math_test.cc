#include "core/vector_math.h"

#include <cmath>
#include <cstdio>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
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
}

}  // namespace
}  // namespace loom
