#include "offload/adamw/cpu_adamw.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/cpu_features.h"
#include "core/half.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload/adamw/blockwise8.h"
#include "offload/adamw/internal/isa_for_testing.h"

namespace loom {

void PrintTo(CpuIsa isa, std::ostream* os) { *os << CpuIsaName(isa); }
void PrintTo(StateFormat format, std::ostream* os) { *os << StateFormatName(format); }

namespace {

using ::testing::HasSubstr;

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// Problem: seeded, distinct inputs and initial moments for `count` parameters.
struct Problem {
  std::vector<float> params;
  std::vector<float> grads;
  std::vector<float> m;
  std::vector<float> v;
};

Problem MakeProblem(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-6.0f, 0.0f);
  Problem p;
  for (size_t i = 0; i < count; ++i) {
    p.params.push_back(unit(rng));
    // Gradients spread over six decades, as real ones are.
    p.grads.push_back(unit(rng) * std::pow(10.0f, exponent(rng)));
    p.m.push_back(0.1f * unit(rng) * std::pow(10.0f, exponent(rng)));
    const float root = unit(rng) * std::pow(10.0f, exponent(rng));
    p.v.push_back(root * root);
  }
  return p;
}

AdamWHyper TestHyper(int64_t step) {
  AdamWHyper h;
  h.lr = 0.01f;
  h.beta1 = 0.9f;
  h.beta2 = 0.999f;
  h.eps = 1e-8f;
  h.weight_decay = 0.1f;
  h.step = step;
  h.grad_scale = 0.37f;
  return h;
}

// Run: `steps` steps (step numbers first_step, first_step + 1, ...) from `problem`,
// returning the params, the decoded moments and the half copy.
struct Result {
  std::vector<float> params;
  std::vector<float> m;
  std::vector<float> v;
  std::vector<uint16_t> half;
};

enum class Half { kNone, kBF16, kF16 };

Result RunSteps(const Problem& problem, StateFormat format, int64_t block_size, CpuIsa isa,
                int threads, int64_t tile, Half half, int64_t first_step, int steps) {
  const size_t n = problem.params.size();
  Result r;
  absl::StatusOr<AdamWState> state =
      AdamWState::Create(static_cast<int64_t>(n), format, block_size);
  EXPECT_THAT(state, IsOk());
  if (!state.ok()) return r;
  EXPECT_THAT(state->WriteMoments(problem.m, problem.v), IsOk());
  // The params and the half copies sit between guard elements that must survive.
  constexpr size_t kGuard = 32;
  constexpr float kGuardValue = 12345.0f;
  constexpr uint16_t kGuardBits = 0xA5A5;
  std::vector<float> params(n + 2 * kGuard, kGuardValue);
  std::copy(problem.params.begin(), problem.params.end(), params.begin() + kGuard);
  std::vector<BFloat16> bf16(n + 2 * kGuard, BFloat16{kGuardBits});
  std::vector<Float16> f16(n + 2 * kGuard, Float16{kGuardBits});
  AdamWOptions options;
  options.isa = isa;
  options.threads = threads;
  options.tile = tile;
  for (int s = 0; s < steps; ++s) {
    // Fresh gradients each step: the problem's, rotated.
    std::vector<float> grads(n);
    for (size_t i = 0; i < n; ++i) grads[i] = problem.grads[(i + static_cast<size_t>(s) * 7) % n];
    HalfCopy copy;
    if (half == Half::kBF16) copy = absl::MakeSpan(bf16).subspan(kGuard, n);
    if (half == Half::kF16) copy = absl::MakeSpan(f16).subspan(kGuard, n);
    EXPECT_THAT(AdamWStep(TestHyper(first_step + s), absl::MakeSpan(params).subspan(kGuard, n),
                          grads, *state, options, copy),
                IsOk());
  }
  for (size_t i = 0; i < kGuard; ++i) {
    for (const size_t g : {i, kGuard + n + i}) {
      EXPECT_EQ(params[g], kGuardValue) << "params guard " << g << " overwritten";
      EXPECT_EQ(bf16[g].bits, kGuardBits) << "bf16 guard " << g << " overwritten";
      EXPECT_EQ(f16[g].bits, kGuardBits) << "f16 guard " << g << " overwritten";
    }
  }
  r.params.assign(params.begin() + kGuard, params.begin() + kGuard + static_cast<ptrdiff_t>(n));
  r.m.resize(n);
  r.v.resize(n);
  EXPECT_THAT(state->ReadMoments(absl::MakeSpan(r.m), absl::MakeSpan(r.v)), IsOk());
  for (size_t i = 0; i < n; ++i) {
    if (half == Half::kBF16) r.half.push_back(bf16[kGuard + i].bits);
    if (half == Half::kF16) r.half.push_back(f16[kGuard + i].bits);
  }
  return r;
}

// ExpectBitwiseEqual reports the first few elements whose bits differ.
void ExpectBitwiseEqual(const std::vector<float>& expected, const std::vector<float>& actual,
                        const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  int mismatches = 0;
  std::string examples;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (Bits(expected[i]) != Bits(actual[i])) {
      if (mismatches++ < 5) {
        absl::StrAppend(&examples, "  [", i, "] expected ", expected[i], " (0x",
                        absl::Hex(Bits(expected[i])), ") got ", actual[i], " (0x",
                        absl::Hex(Bits(actual[i])), ")\n");
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << what << ": " << mismatches << " of " << expected.size()
                           << " elements differ\n"
                           << examples;
}

void ExpectSameResult(const Result& expected, const Result& actual, const std::string& what) {
  ExpectBitwiseEqual(expected.params, actual.params, what + " params");
  ExpectBitwiseEqual(expected.m, actual.m, what + " m");
  ExpectBitwiseEqual(expected.v, actual.v, what + " v");
  EXPECT_EQ(expected.half, actual.half) << what << " half copy";
}

// -------------------------------------------------------------------------------------
// Scalar path against a double-precision AdamW.
//
// Bound (u = 2^-24): the float step differs from a double evaluation of AdamW on the same
// float inputs by at most
//   |p - p_ref| <= 16 u (|p decay| + step_size m' / d)      (2^-20)
//   |m - m_ref| <=  8 u m'                                  (2^-21)
//   |v - v_ref| <=  8 u v_ref                               (2^-21)
// with m' = beta1 |m| + (1 - beta1) |g| (a bound on the new |m| made of the magnitudes of
// its terms). m takes 4 roundings (and the rounded 1 - beta1), v 6, p about 15, each at
// most u relative to its own result; measuring against the term magnitudes keeps the bound
// meaningful under cancellation (m's sum, p's final subtraction). Measured worst case for
// p: about 4 u.

struct Reference {
  double p;
  double m;
  double v;
  double p_scale;  // |p decay| + step_size |m'| / d
  double m_scale;  // beta1 |m| + (1 - beta1) |g|
};

Reference DoubleAdamW(const AdamWHyper& h, double p, double grad, double m, double v) {
  const double b1 = static_cast<double>(h.beta1);
  const double b2 = static_cast<double>(h.beta2);
  const double lr = static_cast<double>(h.lr);
  const double eps = static_cast<double>(h.eps);
  const double g = grad * static_cast<double>(h.grad_scale);
  Reference r;
  r.m = b1 * m + (1.0 - b1) * g;
  r.v = b2 * v + (1.0 - b2) * g * g;
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(h.step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(h.step));
  // The eager form: mhat, vhat, denom, update.
  const double mhat = r.m / bc1;
  const double vhat = r.v / bc2;
  const double denom = std::sqrt(vhat) + eps;
  const double decay = 1.0 - lr * static_cast<double>(h.weight_decay);
  r.p = p * decay - lr * (mhat / denom);
  r.m_scale = b1 * std::fabs(m) + (1.0 - b1) * std::fabs(g);
  r.p_scale = std::fabs(p * decay) + lr / bc1 * r.m_scale / (std::sqrt(r.v / bc2) + eps);
  return r;
}

class ScalarVsDoubleTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(ScalarVsDoubleTest, WithinStatedBound) {
  const int64_t step = GetParam();
  const size_t n = 20000;
  const Problem problem = MakeProblem(n, 11);
  const Result r =
      RunSteps(problem, StateFormat::kF32, 2048, CpuIsa::kScalar, 1, 16384, Half::kNone, step, 1);
  const AdamWHyper h = TestHyper(step);
  const double u = std::ldexp(1.0, -24);
  double worst_p = 0;
  double largest_update = 0;
  for (size_t i = 0; i < n; ++i) {
    const Reference ref = DoubleAdamW(
        h, static_cast<double>(problem.params[i]), static_cast<double>(problem.grads[i]),
        static_cast<double>(problem.m[i]), static_cast<double>(problem.v[i]));
    const double p_error = std::fabs(static_cast<double>(r.params[i]) - ref.p);
    ASSERT_LE(p_error, 16 * u * ref.p_scale) << "p at " << i;
    ASSERT_LE(std::fabs(static_cast<double>(r.m[i]) - ref.m), 8 * u * ref.m_scale) << "m at " << i;
    ASSERT_LE(std::fabs(static_cast<double>(r.v[i]) - ref.v), 8 * u * ref.v) << "v at " << i;
    worst_p = std::max(worst_p, p_error / ref.p_scale);
    largest_update =
        std::max(largest_update, std::fabs(ref.p - static_cast<double>(problem.params[i])));
  }
  // The step must be visible: weight decay and the Adam update both move p.
  EXPECT_GT(largest_update, 1e-3);
  RecordProperty("worst_p_error_in_units_of_2^-24", std::to_string(worst_p / u));
}

std::string StepName(const ::testing::TestParamInfo<int64_t>& param) {
  return absl::StrCat("Step", param.param);
}

INSTANTIATE_TEST_SUITE_P(BiasCorrection, ScalarVsDoubleTest, ::testing::Values(1, 2, 1000),
                         StepName);

TEST(ScalarVsDoubleTest, ZeroWeightDecayAndUnitScaleAreExactNoOps) {
  // With weight_decay 0 the decay factor is exactly 1, and grad_scale 1 leaves g as is: the
  // result must equal a float evaluation without those operations.
  const Problem problem = MakeProblem(1000, 12);
  AdamWHyper h = TestHyper(5);
  h.weight_decay = 0.0f;
  h.grad_scale = 1.0f;
  std::vector<float> params = problem.params;
  LOOM_ASSERT_OK_AND_ASSIGN(AdamWState state, AdamWState::Create(1000));
  LOOM_ASSERT_OK(state.WriteMoments(problem.m, problem.v));
  AdamWOptions options;
  options.isa = CpuIsa::kScalar;
  LOOM_ASSERT_OK(AdamWStep(h, absl::MakeSpan(params), problem.grads, state, options));
  const double bc1 = 1.0 - std::pow(static_cast<double>(0.9f), 5.0);
  const double bc2 = 1.0 - std::pow(static_cast<double>(0.999f), 5.0);
  const float step_size = static_cast<float>(static_cast<double>(h.lr) / bc1);
  const float inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  for (size_t i = 0; i < 1000; ++i) {
    const float g = problem.grads[i];
    const float m = 0.9f * problem.m[i] + (1.0f - 0.9f) * g;
    const float v = 0.999f * problem.v[i] + (1.0f - 0.999f) * (g * g);
    const float d = std::sqrt(v) * inv_sqrt_bc2 + h.eps;
    ASSERT_EQ(Bits(params[i]), Bits(problem.params[i] - step_size * (m / d))) << i;
  }
}

// -------------------------------------------------------------------------------------
// Every ISA against the scalar path, bit for bit.

class IsaTest : public ::testing::TestWithParam<std::tuple<CpuIsa, StateFormat>> {
 protected:
  void SetUp() override {
    if (!CpuSupports(isa())) {
      GTEST_SKIP() << "this CPU lacks " << CpuIsaName(isa());
    }
  }
  CpuIsa isa() const { return std::get<0>(GetParam()); }
  StateFormat format() const { return std::get<1>(GetParam()); }
};

TEST_P(IsaTest, BitwiseEqualToScalar) {
  // 845 = 3 blocks of 256 + 77; 65537 is no multiple of 2048 either.
  for (const size_t count : {0, 1, 15, 16, 17, 845, 1000, 65537}) {
    for (const int64_t block_size : {256, 2048}) {
      if (format() != StateFormat::kBlockwise8 && block_size != 2048) continue;
      const Problem problem = MakeProblem(count, static_cast<uint32_t>(count) + 1);
      const std::string what = absl::StrCat(CpuIsaName(isa()), " ", StateFormatName(format()),
                                            " count ", count, " block ", block_size);
      const Result scalar =
          RunSteps(problem, format(), block_size, CpuIsa::kScalar, 1, 16384, Half::kNone, 1, 3);
      const Result vector =
          RunSteps(problem, format(), block_size, isa(), 1, 16384, Half::kNone, 1, 3);
      ExpectSameResult(scalar, vector, what);
    }
  }
}

TEST_P(IsaTest, HalfCopyBitwiseEqualToScalar) {
  for (const size_t count : {1, 17, 1000, 65537}) {
    for (const Half half : {Half::kBF16, Half::kF16}) {
      const Problem problem = MakeProblem(count, static_cast<uint32_t>(count) + 100);
      const std::string what =
          absl::StrCat(CpuIsaName(isa()), " ", StateFormatName(format()), " count ", count,
                       half == Half::kBF16 ? " bf16" : " f16", " copy");
      const Result scalar = RunSteps(problem, format(), 256, CpuIsa::kScalar, 1, 16384, half, 7, 2);
      const Result vector = RunSteps(problem, format(), 256, isa(), 1, 16384, half, 7, 2);
      ExpectSameResult(scalar, vector, what);
      // The copy is the rounded param, as core/half.h rounds it.
      for (size_t i = 0; i < count; ++i) {
        const uint16_t expected = half == Half::kBF16 ? ToBFloat16(vector.params[i]).bits
                                                      : ToFloat16(vector.params[i]).bits;
        ASSERT_EQ(vector.half[i], expected) << what << " at " << i;
      }
    }
  }
}

TEST_P(IsaTest, ThreadCountDoesNotChangeBits) {
  const size_t count = 100003;
  const Problem problem = MakeProblem(count, 5);
  // Tiles of 2048 elements: about 49 of them, handed out dynamically.
  const Result one = RunSteps(problem, format(), 256, isa(), 1, 2048, Half::kBF16, 3, 2);
  for (const int threads : {2, 3}) {
    const Result many = RunSteps(problem, format(), 256, isa(), threads, 2048, Half::kBF16, 3, 2);
    ExpectSameResult(one, many, absl::StrCat(threads, " threads vs 1"));
  }
  // Neither does the tile size.
  const Result big_tiles = RunSteps(problem, format(), 256, isa(), 2, 1 << 20, Half::kBF16, 3, 2);
  ExpectSameResult(one, big_tiles, "one big tile");
  // A tile of 1000 with blocks of 320 is rounded up to 1280 (4 blocks): a tile boundary
  // inside a block would split the block's absmax between two tiles.
  const Result whole = RunSteps(problem, format(), 320, isa(), 1, 1 << 20, Half::kNone, 1, 2);
  const Result odd_tiles = RunSteps(problem, format(), 320, isa(), 3, 1000, Half::kNone, 1, 2);
  ExpectSameResult(whole, odd_tiles, "tile 1000, block 320, 3 threads");
}

TEST_P(IsaTest, NonFiniteGradientGivesNonFiniteParamOnEveryPath) {
  Problem problem = MakeProblem(3000, 9);
  problem.grads[5] = std::numeric_limits<float>::quiet_NaN();
  problem.grads[2900] = std::numeric_limits<float>::infinity();
  const Result r = RunSteps(problem, format(), 256, isa(), 1, 16384, Half::kNone, 1, 1);
  EXPECT_TRUE(std::isnan(r.params[5]));
  EXPECT_TRUE(std::isnan(r.params[2900]));  // inf / inf
  if (format() != StateFormat::kBlockwise8) {
    for (size_t i = 0; i < r.params.size(); ++i) {
      if (i != 5 && i != 2900) {
        ASSERT_TRUE(std::isfinite(r.params[i])) << i;
      }
    }
  } else {
    // A NaN poisons its block's scale, hence the block; other blocks stay finite.
    for (size_t i = 256; i < 2816; ++i) ASSERT_TRUE(std::isfinite(r.params[i])) << i;
  }
}

std::string IsaFormatName(const ::testing::TestParamInfo<std::tuple<CpuIsa, StateFormat>>& param) {
  return absl::StrCat(CpuIsaName(std::get<0>(param.param)), "_",
                      StateFormatName(std::get<1>(param.param)));
}

INSTANTIATE_TEST_SUITE_P(AllPaths, IsaTest,
                         ::testing::Combine(::testing::Values(CpuIsa::kScalar, CpuIsa::kAvx2,
                                                              CpuIsa::kAvx512),
                                            ::testing::Values(StateFormat::kF32, StateFormat::kBF16,
                                                              StateFormat::kBlockwise8)),
                         IsaFormatName);

// -------------------------------------------------------------------------------------
// State formats.

TEST(AdamWStateTest, SizesPerFormat) {
  LOOM_ASSERT_OK_AND_ASSIGN(AdamWState f32, AdamWState::Create(1000, StateFormat::kF32));
  EXPECT_EQ(f32.size_bytes(), 8000u);
  LOOM_ASSERT_OK_AND_ASSIGN(AdamWState bf16, AdamWState::Create(1000, StateFormat::kBF16));
  EXPECT_EQ(bf16.size_bytes(), 4000u);
  LOOM_ASSERT_OK_AND_ASSIGN(AdamWState q8, AdamWState::Create(1000, StateFormat::kBlockwise8, 256));
  EXPECT_EQ(q8.size_bytes(), 2000u + 2 * 4 * 4);  // 4 blocks, two scales each
  EXPECT_EQ(q8.block_size(), 256);
  EXPECT_EQ(q8.count(), 1000);
  EXPECT_EQ(q8.format(), StateFormat::kBlockwise8);
}

TEST(AdamWStateTest, StartsAtZeroAndRoundTripsMoments) {
  for (const StateFormat format :
       {StateFormat::kF32, StateFormat::kBF16, StateFormat::kBlockwise8}) {
    LOOM_ASSERT_OK_AND_ASSIGN(AdamWState state, AdamWState::Create(300, format, 256));
    std::vector<float> m(300, 1.0f);
    std::vector<float> v(300, 1.0f);
    LOOM_ASSERT_OK(state.ReadMoments(absl::MakeSpan(m), absl::MakeSpan(v)));
    for (size_t i = 0; i < 300; ++i) ASSERT_EQ(Bits(m[i]) | Bits(v[i]), 0u) << i;
    // Values the format holds exactly: 8-bit levels (each block holds a +-1, so its absmax
    // is 1); for bf16, those rounded to bf16.
    std::vector<float> m_in(300);
    std::vector<float> v_in(300);
    for (size_t i = 0; i < 300; ++i) {
      const bool top = i == 0 || i == 256;
      m_in[i] = CodeLevel(CodeMap::kSigned, static_cast<uint8_t>(top ? 0xFF : i * 37));
      v_in[i] = CodeLevel(CodeMap::kUnsigned, static_cast<uint8_t>(top ? 0xFF : i * 53));
      if (format == StateFormat::kBF16) {
        m_in[i] = ToFloat(ToBFloat16(m_in[i]));
        v_in[i] = ToFloat(ToBFloat16(v_in[i]));
      }
    }
    LOOM_ASSERT_OK(state.WriteMoments(m_in, v_in));
    LOOM_ASSERT_OK(state.ReadMoments(absl::MakeSpan(m), absl::MakeSpan(v)));
    for (size_t i = 0; i < 300; ++i) {
      ASSERT_EQ(Bits(m[i]), Bits(m_in[i])) << StateFormatName(format) << " m " << i;
      ASSERT_EQ(Bits(v[i]), Bits(v_in[i])) << StateFormatName(format) << " v " << i;
    }
  }
}

// One state reused for several sizes (Resize) steps bitwise as a fresh state of
// each size given the same moments, in every format, and refuses a size above its
// capacity.
TEST(AdamWStateTest, AResizedStateStepsLikeAFreshOne) {
  for (const StateFormat format :
       {StateFormat::kF32, StateFormat::kBF16, StateFormat::kBlockwise8}) {
    LOOM_ASSERT_OK_AND_ASSIGN(AdamWState reused, AdamWState::Create(1000, format, 256));
    EXPECT_EQ(reused.capacity(), 1000);
    for (const int64_t n : {1000, 7, 513, 256, 0, 999}) {
      std::vector<float> m(static_cast<size_t>(n)), v(m.size()), grads(m.size());
      std::vector<float> params(m.size());
      for (size_t i = 0; i < m.size(); ++i) {
        m[i] = 0.01f * static_cast<float>((i * 7) % 13) - 0.05f;
        v[i] = 1e-4f * static_cast<float>((i * 5) % 11);
        grads[i] = 0.1f * static_cast<float>((i * 3 + static_cast<size_t>(n)) % 17) - 0.8f;
        params[i] = 0.5f - 0.01f * static_cast<float>(i % 29);
      }
      LOOM_ASSERT_OK_AND_ASSIGN(AdamWState fresh, AdamWState::Create(n, format, 256));
      LOOM_ASSERT_OK(reused.Resize(n));
      EXPECT_EQ(reused.count(), n);
      LOOM_ASSERT_OK(fresh.WriteMoments(m, v));
      LOOM_ASSERT_OK(reused.WriteMoments(m, v));
      AdamWHyper hyper;
      hyper.step = 3;
      std::vector<float> p_fresh = params, p_reused = params;
      LOOM_ASSERT_OK(AdamWStep(hyper, absl::MakeSpan(p_fresh), grads, fresh));
      LOOM_ASSERT_OK(AdamWStep(hyper, absl::MakeSpan(p_reused), grads, reused));
      std::vector<float> m_fresh(m.size()), v_fresh(m.size()), m_reused(m.size()),
          v_reused(m.size());
      LOOM_ASSERT_OK(fresh.ReadMoments(absl::MakeSpan(m_fresh), absl::MakeSpan(v_fresh)));
      LOOM_ASSERT_OK(reused.ReadMoments(absl::MakeSpan(m_reused), absl::MakeSpan(v_reused)));
      for (size_t i = 0; i < m.size(); ++i) {
        ASSERT_EQ(Bits(p_fresh[i]), Bits(p_reused[i])) << StateFormatName(format) << " n " << n;
        ASSERT_EQ(Bits(m_fresh[i]), Bits(m_reused[i])) << StateFormatName(format) << " n " << n;
        ASSERT_EQ(Bits(v_fresh[i]), Bits(v_reused[i])) << StateFormatName(format) << " n " << n;
      }
    }
    const absl::Status over = reused.Resize(1001);
    EXPECT_EQ(over.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(over.message()), ::testing::HasSubstr("1001 is not in [0, 1000]"));
    EXPECT_EQ(reused.Resize(-1).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(AdamWStateTest, CompressedFormatsRoundOnWrite) {
  const std::vector<float> m_in = {0.1f, -0.3f, 1e-3f};
  const std::vector<float> v_in = {0.01f, 1e-5f, 0.04f};
  std::vector<float> m(3);
  std::vector<float> v(3);
  LOOM_ASSERT_OK_AND_ASSIGN(AdamWState bf16, AdamWState::Create(3, StateFormat::kBF16));
  LOOM_ASSERT_OK(bf16.WriteMoments(m_in, v_in));
  LOOM_ASSERT_OK(bf16.ReadMoments(absl::MakeSpan(m), absl::MakeSpan(v)));
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(m[i], ToFloat(ToBFloat16(m_in[i])));
    EXPECT_EQ(v[i], ToFloat(ToBFloat16(v_in[i])));
  }
  LOOM_ASSERT_OK_AND_ASSIGN(AdamWState q8, AdamWState::Create(3, StateFormat::kBlockwise8, 256));
  LOOM_ASSERT_OK(q8.WriteMoments(m_in, v_in));
  LOOM_ASSERT_OK(q8.ReadMoments(absl::MakeSpan(m), absl::MakeSpan(v)));
  std::vector<uint8_t> codes(3);
  std::vector<float> absmax(1);
  std::vector<float> expected(3);
  LOOM_ASSERT_OK(QuantizeBlockwise8(CodeMap::kSigned, 256, m_in, absl::MakeSpan(codes),
                                    absl::MakeSpan(absmax)));
  LOOM_ASSERT_OK(
      DequantizeBlockwise8(CodeMap::kSigned, 256, codes, absmax, absl::MakeSpan(expected)));
  EXPECT_EQ(m, expected);
  EXPECT_EQ(m[1], -0.3f);  // the absmax is exact
}

// -------------------------------------------------------------------------------------
// Errors: exact codes and messages, and nothing changed.

TEST(ValidateAdamWHyperTest, NamesTheBadField) {
  const auto with = [](auto change) {
    AdamWHyper h;
    change(h);
    return ValidateAdamWHyper(h);
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_THAT(with([](AdamWHyper&) {}), IsOk());
  EXPECT_THAT(with([](AdamWHyper& h) { h.beta1 = 1.5f; }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("AdamWHyper: beta1 is 1.5; it must be in [0, 1)")));
  EXPECT_THAT(with([](AdamWHyper& h) { h.beta2 = 1.0f; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("beta2 is 1;")));
  EXPECT_THAT(with([](AdamWHyper& h) { h.beta1 = -0.5f; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("beta1 is -0.5")));
  EXPECT_THAT(
      with([](AdamWHyper& h) { h.step = 0; }),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("step is 0; it must be at least 1")));
  EXPECT_THAT(with([](AdamWHyper& h) { h.lr = -0.001f; }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("lr is -0.001; it must be finite and >= 0")));
  EXPECT_THAT(with([nan](AdamWHyper& h) { h.lr = nan; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lr is nan")));
  EXPECT_THAT(with([nan](AdamWHyper& h) { h.beta2 = nan; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("beta2 is nan")));
  EXPECT_THAT(with([](AdamWHyper& h) { h.eps = 0.0f; }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("eps is 0; it must be finite and > 0")));
  EXPECT_THAT(with([](AdamWHyper& h) { h.weight_decay = -1.0f; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("weight_decay is -1")));
  EXPECT_THAT(with([](AdamWHyper& h) {
                h.lr = 2.0f;
                h.weight_decay = 0.75f;
              }),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("lr * weight_decay is 2 * 0.75; it must be at most 1")));
  EXPECT_THAT(with([inf](AdamWHyper& h) { h.grad_scale = inf; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("grad_scale is inf")));
  EXPECT_THAT(with([](AdamWHyper& h) { h.grad_scale = -1.0f; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("grad_scale is -1")));
}

class AdamWStepErrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    problem_ = MakeProblem(10, 3);
    params_ = problem_.params;
    LOOM_ASSERT_OK_AND_ASSIGN(state_, AdamWState::Create(10));
  }
  // ExpectUnchanged: a failed step writes nothing.
  void ExpectUnchanged() {
    EXPECT_EQ(params_, problem_.params);
    std::vector<float> m(10);
    std::vector<float> v(10);
    LOOM_ASSERT_OK(state_->ReadMoments(absl::MakeSpan(m), absl::MakeSpan(v)));
    EXPECT_EQ(m, std::vector<float>(10, 0.0f));
  }
  Problem problem_;
  std::vector<float> params_;
  absl::StatusOr<AdamWState> state_ = absl::UnknownError("unset");
};

TEST_F(AdamWStepErrorTest, MismatchedLengths) {
  const std::vector<float> grads9(9);
  EXPECT_THAT(AdamWStep({}, absl::MakeSpan(params_), grads9, *state_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("AdamWStep: params has 10 elements but grads has 9")));
  std::vector<float> params11(11);
  const std::vector<float> grads11(11);
  EXPECT_THAT(AdamWStep({}, absl::MakeSpan(params11), grads11, *state_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("params has 11 elements but the state holds 10")));
  std::vector<BFloat16> copy(12);
  EXPECT_THAT(
      AdamWStep({}, absl::MakeSpan(params_), problem_.grads, *state_, {}, absl::MakeSpan(copy)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("params has 10 elements but the bf16 half copy has 12")));
  std::vector<Float16> f16(3);
  EXPECT_THAT(
      AdamWStep({}, absl::MakeSpan(params_), problem_.grads, *state_, {}, absl::MakeSpan(f16)),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("the f16 half copy has 3")));
  ExpectUnchanged();
}

TEST_F(AdamWStepErrorTest, BadHyperparameters) {
  AdamWHyper h;
  h.step = 0;
  EXPECT_THAT(AdamWStep(h, absl::MakeSpan(params_), problem_.grads, *state_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("step is 0")));
  ExpectUnchanged();
}

TEST_F(AdamWStepErrorTest, BadOptions) {
  AdamWOptions options;
  options.threads = 0;
  EXPECT_THAT(AdamWStep({}, absl::MakeSpan(params_), problem_.grads, *state_, options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("threads is 0; it must be in [1, 256]")));
  options.threads = 257;
  EXPECT_THAT(AdamWStep({}, absl::MakeSpan(params_), problem_.grads, *state_, options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("threads is 257")));
  options.threads = 1;
  options.tile = 0;
  EXPECT_THAT(
      AdamWStep({}, absl::MakeSpan(params_), problem_.grads, *state_, options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tile is 0; it must be at least 1")));
  options.tile = 1;
  options.isa = static_cast<CpuIsa>(7);
  EXPECT_THAT(AdamWStep({}, absl::MakeSpan(params_), problem_.grads, *state_, options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown isa 7")));
  ExpectUnchanged();
}

TEST_F(AdamWStepErrorTest, Overlap) {
  std::vector<float> buffer(20);
  const absl::Span<float> params = absl::MakeSpan(buffer).subspan(0, 10);
  const absl::Span<const float> grads = absl::MakeConstSpan(buffer).subspan(5, 10);
  EXPECT_THAT(AdamWStep({}, params, grads, *state_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("AdamWStep: params and grads overlap")));
  const absl::Span<BFloat16> copy(reinterpret_cast<BFloat16*>(params_.data()), 10);
  EXPECT_THAT(
      AdamWStep({}, absl::MakeSpan(params_), problem_.grads, *state_, {}, copy),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("params and the half copy overlap")));
  ExpectUnchanged();
}

TEST_F(AdamWStepErrorTest, UnsupportedIsaIsFailedPrecondition) {
  // On this CPU, where the ISAs are missing; then, whatever the CPU, with the ceiling.
  for (const CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (CpuSupports(isa)) continue;
    AdamWOptions options;
    options.isa = isa;
    EXPECT_THAT(AdamWStep({}, absl::MakeSpan(params_), problem_.grads, *state_, options),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr(absl::StrCat("AdamWStep: isa ", CpuIsaName(isa),
                                                " is not supported by this CPU"))));
  }
  adamw_internal::SetIsaCeilingForTesting(CpuIsa::kScalar);
  AdamWOptions options;
  options.isa = CpuIsa::kAvx512;
  EXPECT_THAT(AdamWStep({}, absl::MakeSpan(params_), problem_.grads, *state_, options),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("AdamWStep: isa avx512 is not supported by this CPU (the "
                                 "fastest supported is scalar)")));
  options.isa = CpuIsa::kAvx2;
  EXPECT_THAT(AdamWStep({}, absl::MakeSpan(params_), problem_.grads, *state_, options),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("isa avx2")));
  ExpectUnchanged();
  // An unset isa falls back to what is there.
  options.isa.reset();
  EXPECT_THAT(AdamWStep({}, absl::MakeSpan(params_), problem_.grads, *state_, options), IsOk());
  adamw_internal::SetIsaCeilingForTesting(CpuIsa::kAvx512);
}

TEST(AdamWStateErrorTest, CreateAndMomentErrors) {
  EXPECT_THAT(AdamWState::Create(-1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("AdamWState::Create: count is -1; it must be >= 0")));
  EXPECT_THAT(AdamWState::Create(10, StateFormat::kBlockwise8, 100),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("AdamWState::Create: block_size is 100; it must be a "
                                 "multiple of 64 in [256, 2048]")));
  EXPECT_THAT(AdamWState::Create(10, StateFormat::kBlockwise8, 4096),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("block_size is 4096")));
  EXPECT_THAT(AdamWState::Create(10, static_cast<StateFormat>(9)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown format 9")));
  // The block size does not matter to the other formats.
  EXPECT_THAT(AdamWState::Create(10, StateFormat::kBF16, 100), IsOk());
  LOOM_ASSERT_OK_AND_ASSIGN(AdamWState state, AdamWState::Create(10));
  std::vector<float> m(10);
  std::vector<float> v(9);
  EXPECT_THAT(state.ReadMoments(absl::MakeSpan(m), absl::MakeSpan(v)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("AdamWState::ReadMoments: m has 10 and v has 9 elements but "
                                 "the state holds 10")));
  EXPECT_THAT(state.WriteMoments(m, v),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("AdamWState::WriteMoments: m has 10 and v has 9")));
}

}  // namespace
}  // namespace loom
