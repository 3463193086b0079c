// FlashAttentionForward / Backward against a double-precision attention written out
// with plain loops (every score, the whole softmax, the usual backward), for causal and
// full masks, sequence lengths that are and are not multiples of the tiles, tiles of
// one row, blocks at global positions (queries wholly after, before or across the
// keys), strided views, and a sequence split into key blocks merged with
// MergeAttentionBlocks; plus bad input. Bounds are relative to the reference's largest
// magnitude: 2e-5 for outputs and lse, 5e-5 for gradients (f32 products of d <= 64 and
// tiles of <= 64 keys, online rescaling).
#include "tensor_parallel/layers/flash_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

constexpr double kOutputBound = 2e-5;
constexpr double kGradBound = 5e-5;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A row-major matrix [rows, cols] stored with rows `ld` apart (ld >= cols), seeded.
struct Strided {
  int64_t rows = 0, cols = 0, ld = 0;
  std::vector<float> data;
  Strided(int64_t r, int64_t c, int64_t pad, uint32_t seed, float spread)
      : rows(r),
        cols(c),
        ld(c + pad),
        data(static_cast<size_t>(std::max<int64_t>(r * (c + pad), 1))) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-spread, spread);
    for (float& x : data) x = u(rng);
  }
  double at(int64_t i, int64_t j) const {
    return static_cast<double>(data[static_cast<size_t>(i * ld + j)]);
  }
  ConstMatrixView view() const { return ConstMatrixView{data, rows, cols, ld}; }
  MatrixView mutable_view() { return MatrixView{absl::MakeSpan(data), rows, cols, ld}; }
  void Zero() { std::fill(data.begin(), data.end(), 0.0f); }
};

struct Case {
  std::string name;
  int64_t sq, sk, d;
  int64_t tile_q, tile_k;
  bool causal;
  int64_t q_position, k_position;
  int64_t pad;  // extra columns between rows of every view
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

struct Reference {
  std::vector<double> out, lse, dq, dk, dv;  // lse: -inf for a query that sees no key
};

bool Sees(const Case& c, int64_t i, int64_t j) {
  return !c.causal || c.k_position + j <= c.q_position + i;
}

Reference Attention(const Case& c, const Strided& q, const Strided& k, const Strided& v,
                    const Strided& dout) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
  Reference ref;
  ref.out.assign(c.sq * c.d, 0.0);
  ref.lse.assign(c.sq, -std::numeric_limits<double>::infinity());
  ref.dq.assign(c.sq * c.d, 0.0);
  ref.dk.assign(c.sk * c.d, 0.0);
  ref.dv.assign(c.sk * c.d, 0.0);
  for (int64_t i = 0; i < c.sq; ++i) {
    std::vector<double> s(c.sk, 0.0), p(c.sk, 0.0);
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < c.sk; ++j) {
      if (!Sees(c, i, j)) continue;
      double dot = 0;
      for (int64_t e = 0; e < c.d; ++e) dot += q.at(i, e) * k.at(j, e);
      s[j] = dot * scale;
      max = std::max(max, s[j]);
    }
    if (max == -std::numeric_limits<double>::infinity()) continue;  // sees nothing
    double sum = 0;
    for (int64_t j = 0; j < c.sk; ++j) {
      if (Sees(c, i, j)) sum += p[j] = std::exp(s[j] - max);
    }
    ref.lse[i] = max + std::log(sum);
    for (int64_t j = 0; j < c.sk; ++j) p[j] /= sum;
    for (int64_t e = 0; e < c.d; ++e) {
      for (int64_t j = 0; j < c.sk; ++j) ref.out[i * c.d + e] += p[j] * v.at(j, e);
    }
    // dP = dO V^T; dS = P (dP - sum_j P dP); dQ = scale dS K; dK += scale dS^T Q.
    std::vector<double> dp(c.sk, 0.0);
    double correction = 0;
    for (int64_t j = 0; j < c.sk; ++j) {
      for (int64_t e = 0; e < c.d; ++e) dp[j] += dout.at(i, e) * v.at(j, e);
      correction += p[j] * dp[j];
    }
    for (int64_t j = 0; j < c.sk; ++j) {
      const double ds = p[j] * (dp[j] - correction);
      for (int64_t e = 0; e < c.d; ++e) {
        ref.dv[j * c.d + e] += p[j] * dout.at(i, e);
        ref.dq[i * c.d + e] += scale * ds * k.at(j, e);
        ref.dk[j * c.d + e] += scale * ds * q.at(i, e);
      }
    }
  }
  return ref;
}

// ExpectNear checks a [rows, cols] view against `expected` within bound * max(1, max|e|).
void ExpectNear(const Strided& got, const std::vector<double>& expected, double bound,
                const std::string& what) {
  double scale = 1.0;
  for (double e : expected) scale = std::max(scale, std::abs(e));
  double worst = 0;
  for (int64_t i = 0; i < got.rows; ++i) {
    for (int64_t j = 0; j < got.cols; ++j) {
      worst = std::max(worst, std::abs(got.at(i, j) - expected[i * got.cols + j]));
    }
  }
  EXPECT_LE(worst, bound * scale) << what;
}

void ExpectLseNear(const std::vector<float>& got, const std::vector<double>& expected,
                   const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(expected[i])) {
      EXPECT_EQ(got[i], kNegInf) << what << " row " << i;
    } else {
      EXPECT_NEAR(got[i], expected[i], kOutputBound * std::max(1.0, std::abs(expected[i])))
          << what << " row " << i;
    }
  }
}

AttentionBlock BlockOf(const Case& c, const Strided& q, const Strided& k, const Strided& v) {
  return AttentionBlock{q.view(), k.view(), v.view(), c.q_position, c.k_position};
}

FlashAttentionOptions OptionsOf(const Case& c) {
  FlashAttentionOptions options;
  options.causal = c.causal;
  options.tile_q = c.tile_q;
  options.tile_k = c.tile_k;
  return options;
}

class FlashAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(FlashAttentionTest, MatchesTheReferenceForwardAndBackward) {
  const Case& c = GetParam();
  const Strided q(c.sq, c.d, c.pad, 1, 1.5f), k(c.sk, c.d, c.pad, 2, 1.5f);
  const Strided v(c.sk, c.d, c.pad, 3, 1.0f), dout(c.sq, c.d, c.pad, 4, 1.0f);
  const Reference ref = Attention(c, q, k, v, dout);

  Strided out(c.sq, c.d, c.pad, 5, 9.0f);  // seeded garbage: Forward must overwrite it
  std::vector<float> lse(static_cast<size_t>(c.sq), 7.0f);
  LOOM_ASSERT_OK(FlashAttentionForward(BlockOf(c, q, k, v), out.mutable_view(), absl::MakeSpan(lse),
                                       OptionsOf(c)));
  ExpectNear(out, ref.out, kOutputBound, "out");
  ExpectLseNear(lse, ref.lse, "lse");

  Strided dq(c.sq, c.d, c.pad, 0, 0.0f), dk(c.sk, c.d, c.pad, 0, 0.0f);
  Strided dv(c.sk, c.d, c.pad, 0, 0.0f);
  LOOM_ASSERT_OK(FlashAttentionBackward(BlockOf(c, q, k, v), out.view(), dout.view(), lse,
                                        dq.mutable_view(), dk.mutable_view(), dv.mutable_view(),
                                        OptionsOf(c)));
  ExpectNear(dq, ref.dq, kGradBound, "dq");
  ExpectNear(dk, ref.dk, kGradBound, "dk");
  ExpectNear(dv, ref.dv, kGradBound, "dv");
}

TEST_P(FlashAttentionTest, BackwardAddsToTheGradients) {
  const Case& c = GetParam();
  const Strided q(c.sq, c.d, c.pad, 11, 1.5f), k(c.sk, c.d, c.pad, 12, 1.5f);
  const Strided v(c.sk, c.d, c.pad, 13, 1.0f), dout(c.sq, c.d, c.pad, 14, 1.0f);
  const Reference ref = Attention(c, q, k, v, dout);
  Strided out(c.sq, c.d, c.pad, 0, 0.0f);
  std::vector<float> lse(static_cast<size_t>(c.sq));
  LOOM_ASSERT_OK(FlashAttentionForward(BlockOf(c, q, k, v), out.mutable_view(), absl::MakeSpan(lse),
                                       OptionsOf(c)));
  // Start from seeded gradients: the result must be them plus the reference.
  Strided dq(c.sq, c.d, c.pad, 15, 1.0f), dk(c.sk, c.d, c.pad, 16, 1.0f);
  Strided dv(c.sk, c.d, c.pad, 17, 1.0f);
  std::vector<double> want_dq = ref.dq, want_dk = ref.dk, want_dv = ref.dv;
  for (int64_t i = 0; i < c.sq; ++i) {
    for (int64_t e = 0; e < c.d; ++e) want_dq[i * c.d + e] += dq.at(i, e);
  }
  for (int64_t j = 0; j < c.sk; ++j) {
    for (int64_t e = 0; e < c.d; ++e) {
      want_dk[j * c.d + e] += dk.at(j, e);
      want_dv[j * c.d + e] += dv.at(j, e);
    }
  }
  LOOM_ASSERT_OK(FlashAttentionBackward(BlockOf(c, q, k, v), out.view(), dout.view(), lse,
                                        dq.mutable_view(), dk.mutable_view(), dv.mutable_view(),
                                        OptionsOf(c)));
  ExpectNear(dq, want_dq, kGradBound, "dq");
  ExpectNear(dk, want_dk, kGradBound, "dk");
  ExpectNear(dv, want_dv, kGradBound, "dv");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, FlashAttentionTest,
    ::testing::Values(Case{"one_position", 1, 1, 1, 64, 64, true, 0, 0, 0},
                      Case{"exact_tiles", 128, 128, 32, 64, 64, true, 0, 0, 0},
                      Case{"ragged_tiles", 100, 100, 32, 64, 64, true, 0, 0, 0},
                      Case{"ragged_unequal_tiles", 37, 37, 8, 16, 7, true, 0, 0, 3},
                      Case{"tiles_of_one_row", 6, 6, 4, 1, 1, true, 0, 0, 0},
                      Case{"tile_larger_than_sequence", 9, 9, 64, 64, 64, true, 0, 0, 0},
                      Case{"full_mask_rectangular", 33, 47, 16, 16, 16, false, 0, 0, 2},
                      Case{"queries_after_keys", 20, 30, 8, 8, 8, true, 64, 0, 0},
                      Case{"queries_before_keys", 20, 30, 8, 8, 8, true, 0, 64, 0},
                      Case{"across_the_diagonal", 40, 40, 16, 16, 16, true, 32, 16, 1},
                      Case{"no_keys", 5, 0, 4, 64, 64, true, 0, 0, 0},
                      Case{"no_queries", 0, 5, 4, 64, 64, true, 0, 0, 0}),
    [](const ::testing::TestParamInfo<Case>& param_info) { return param_info.param.name; });

// A sequence of 96 split into key blocks [0, 40) and [40, 96): forward per block, merged,
// equals the whole; backward per block with the merged output and lse sums to the whole.
TEST(FlashAttentionBlocksTest, SplitKeyBlocksMergeToTheWholeSequence) {
  const int64_t s = 96, d = 16, split = 40;
  const Case whole{"whole", s, s, d, 32, 32, true, 0, 0, 0};
  const Strided q(s, d, 0, 21, 1.5f), k(s, d, 0, 22, 1.5f), v(s, d, 0, 23, 1.0f);
  const Strided dout(s, d, 0, 24, 1.0f);
  const Reference ref = Attention(whole, q, k, v, dout);
  auto key_rows = [&](const Strided& m, int64_t first, int64_t count) {
    return ConstMatrixView{absl::MakeConstSpan(m.data).subspan(first * d, count * d), count, d, d};
  };
  const AttentionBlock first{q.view(), key_rows(k, 0, split), key_rows(v, 0, split), 0, 0};
  const AttentionBlock second{q.view(), key_rows(k, split, s - split),
                              key_rows(v, split, s - split), 0, split};
  FlashAttentionOptions options;
  options.tile_q = 32;
  options.tile_k = 24;
  Strided out(s, d, 0, 0, 0.0f), out_b(s, d, 0, 0, 0.0f);
  std::vector<float> lse(s), lse_b(s);
  LOOM_ASSERT_OK(FlashAttentionForward(first, out.mutable_view(), absl::MakeSpan(lse), options));
  LOOM_ASSERT_OK(
      FlashAttentionForward(second, out_b.mutable_view(), absl::MakeSpan(lse_b), options));
  // The queries before position 40 see nothing of the second block.
  EXPECT_EQ(lse_b[0], kNegInf);
  EXPECT_EQ(lse_b[split - 1], kNegInf);
  EXPECT_TRUE(std::isfinite(lse_b[split]));
  LOOM_ASSERT_OK(
      MergeAttentionBlocks(out.mutable_view(), absl::MakeSpan(lse), out_b.view(), lse_b));
  ExpectNear(out, ref.out, kOutputBound, "merged out");
  ExpectLseNear(lse, ref.lse, "merged lse");

  Strided dq(s, d, 0, 0, 0.0f), dk(s, d, 0, 0, 0.0f), dv(s, d, 0, 0, 0.0f);
  auto key_grad = [&](Strided& m, int64_t first_row, int64_t count) {
    return MatrixView{absl::MakeSpan(m.data).subspan(first_row * d, count * d), count, d, d};
  };
  LOOM_ASSERT_OK(FlashAttentionBackward(first, out.view(), dout.view(), lse, dq.mutable_view(),
                                        key_grad(dk, 0, split), key_grad(dv, 0, split), options));
  LOOM_ASSERT_OK(FlashAttentionBackward(second, out.view(), dout.view(), lse, dq.mutable_view(),
                                        key_grad(dk, split, s - split),
                                        key_grad(dv, split, s - split), options));
  ExpectNear(dq, ref.dq, kGradBound, "dq summed over blocks");
  ExpectNear(dk, ref.dk, kGradBound, "dk");
  ExpectNear(dv, ref.dv, kGradBound, "dv");
}

TEST(FlashAttentionBlocksTest, MergeKeepsRowsBothBlocksMissed) {
  std::vector<float> out = {0, 0, 1, 2}, out_b = {0, 0, 3, 4};
  std::vector<float> lse = {kNegInf, 0.0f}, lse_b = {kNegInf, 0.0f};
  LOOM_ASSERT_OK(MergeAttentionBlocks(Dense(absl::MakeSpan(out), 2, 2), absl::MakeSpan(lse),
                                      Dense(absl::MakeConstSpan(out_b), 2, 2), lse_b));
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(lse[0], kNegInf);
  // Equal lse: the average, and lse grows by log 2.
  EXPECT_FLOAT_EQ(out[2], 2.0f);
  EXPECT_FLOAT_EQ(out[3], 3.0f);
  EXPECT_FLOAT_EQ(lse[1], std::log(2.0f));
}

TEST(FlashAttentionBadInputTest, NamesTheShapesAndValues) {
  std::vector<float> a(100 * 32), b(90 * 32), o(100 * 32), lse(100);
  const ConstMatrixView q = Dense(absl::MakeConstSpan(a), 100, 32);
  const MatrixView out = Dense(absl::MakeSpan(o), 100, 32);
  const FlashAttentionOptions options;
  EXPECT_THAT(FlashAttentionForward({q, Dense(absl::MakeConstSpan(b), 90, 32), q}, out,
                                    absl::MakeSpan(lse), options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("k is [90,32] and v [100,32]: they must have the same rows")));
  EXPECT_THAT(FlashAttentionForward({q, Dense(absl::MakeConstSpan(b), 100, 28), q}, out,
                                    absl::MakeSpan(lse), options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("k [100,28]")));
  EXPECT_THAT(
      FlashAttentionForward({q, q, q}, out, absl::MakeSpan(lse).first(99), options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lse has 99 values for 100 queries")));
  EXPECT_THAT(FlashAttentionForward({q, q, q}, Dense(absl::MakeSpan(o), 50, 32),
                                    absl::MakeSpan(lse), options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("out is [50,32] but must be [100,32]")));
  // A view whose rows run past its span.
  EXPECT_THAT(FlashAttentionForward({ConstMatrixView{a, 100, 32, 40}, q, q}, out,
                                    absl::MakeSpan(lse), options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("q is [100,32] with ld 40, needing 3992 elements, but its span has 3200")));
  FlashAttentionOptions bad_tile;
  bad_tile.tile_k = 0;
  EXPECT_THAT(FlashAttentionForward({q, q, q}, out, absl::MakeSpan(lse), bad_tile),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tile_q 64 and tile_k 0 must be in [1, 4096]")));
  FlashAttentionOptions bad_scale;
  bad_scale.scale = -1.0f;
  EXPECT_THAT(FlashAttentionForward({q, q, q}, out, absl::MakeSpan(lse), bad_scale),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("scale -1")));
  EXPECT_THAT(FlashAttentionForward({q, q, q, -1, 0}, out, absl::MakeSpan(lse), options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("position -1")));
  std::vector<float> g(100 * 32);
  EXPECT_THAT(FlashAttentionBackward({q, q, q}, q, q, lse, Dense(absl::MakeSpan(g), 100, 32),
                                     Dense(absl::MakeSpan(g), 100, 32),
                                     Dense(absl::MakeSpan(g).first(32 * 99), 99, 32), options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("grad_v is [99,32] but must be [100,32]")));
  EXPECT_THAT(MergeAttentionBlocks(out, absl::MakeSpan(lse), q, absl::MakeConstSpan(lse).first(3)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("lse has 100 values and lse_b 3 for 100 queries")));
}

}  // namespace
}  // namespace loom
