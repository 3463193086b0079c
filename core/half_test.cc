#include "core/half.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/float_bits_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using testing_internal::BitsToFloat;
using testing_internal::FloatBits;
using testing_internal::Mismatches;

std::string Hex(uint32_t bits) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08X", bits);
  return text;
}

// The reference decoders compute a 16-bit pattern's value from its fields with ldexp,
// in double, without sharing code or constants with half.h. A NaN decodes to a NaN with
// the pattern's sign.
double DecodeFields(uint32_t sign, uint32_t exponent, uint32_t mantissa, int mantissa_bits,
                    int max_exponent, int bias) {
  const double magnitude = [&] {
    if (exponent == static_cast<uint32_t>(max_exponent)) {
      return mantissa == 0 ? HUGE_VAL : std::nan("");
    }
    if (exponent == 0) return std::ldexp(mantissa, 1 - bias - mantissa_bits);
    return std::ldexp((1u << mantissa_bits) + mantissa,
                      static_cast<int>(exponent) - bias - mantissa_bits);
  }();
  return std::copysign(magnitude, sign != 0 ? -1.0 : 1.0);
}

double DecodeF16(uint16_t bits) {
  return DecodeFields(bits >> 15, (bits >> 10) & 0x1F, bits & 0x3FF, 10, 31, 15);
}

double DecodeBF16(uint16_t bits) {
  return DecodeFields(bits >> 15, (bits >> 7) & 0xFF, bits & 0x7F, 7, 255, 127);
}

// The documented NaN policy, written out field by field: the sign, the quiet bit set,
// and as many leading payload bits as fit.
uint16_t ExpectedF16NaN(uint32_t f32_bits) {
  const uint32_t sign = f32_bits >> 31;
  const uint32_t leading_payload = (f32_bits >> 13) & 0x1FF;  // Bits 21..13 of 22..0.
  return static_cast<uint16_t>(sign << 15 | 0x1Fu << 10 | 1u << 9 | leading_payload);
}

uint16_t ExpectedBF16NaN(uint32_t f32_bits) {
  const uint32_t sign = f32_bits >> 31;
  const uint32_t leading_payload = (f32_bits >> 16) & 0x3F;  // Bits 21..16 of 22..0.
  return static_cast<uint16_t>(sign << 15 | 0xFFu << 7 | 1u << 6 | leading_payload);
}

// F16Reference rounds an f32 to f16 by searching the sorted table of every finite f16
// magnitude for the nearest one, ties to the even pattern; magnitudes from 65520 (the
// midpoint between the largest finite 65504 and 2^16) up round to Inf.
class F16Reference {
 public:
  F16Reference() {
    for (uint16_t bits = 0; bits < 0x7C00; ++bits) magnitudes_.push_back(DecodeF16(bits));
  }

  bool IsSorted() const { return std::is_sorted(magnitudes_.begin(), magnitudes_.end()); }

  // Round expects a non-NaN value.
  uint16_t Round(float value) const {
    const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
    const double magnitude = std::fabs(static_cast<double>(value));
    if (magnitude >= 65520.0) return sign | 0x7C00;
    const size_t above =
        std::lower_bound(magnitudes_.begin(), magnitudes_.end(), magnitude) - magnitudes_.begin();
    if (above == magnitudes_.size()) return static_cast<uint16_t>(sign | (above - 1));
    if (magnitudes_[above] == magnitude) return static_cast<uint16_t>(sign | above);
    const size_t below = above - 1;  // magnitude > 0 here, so above >= 1.
    // Both differences are exact in double: each operand has at most 24 significant bits.
    const double to_below = magnitude - magnitudes_[below];
    const double to_above = magnitudes_[above] - magnitude;
    size_t nearest = to_below < to_above ? below : above;
    if (to_below == to_above) nearest = (below & 1) == 0 ? below : above;
    return static_cast<uint16_t>(sign | nearest);
  }

 private:
  std::vector<double> magnitudes_;  // magnitudes_[bits] is the value of f16 pattern `bits`.
};

// ReferenceBF16 rounds a non-NaN f32 to bf16 by comparing it, in double, with the bf16
// values just below (truncation) and just above; past the largest finite bf16 the value
// above is Inf, which for rounding stands at 2^128.
uint16_t ReferenceBF16(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint16_t below = static_cast<uint16_t>((bits & 0x7FFFFFFF) >> 16);
  if (below == 0x7F80) return sign | 0x7F80;  // ±Inf.
  const uint16_t above = below + 1;
  const double magnitude = std::fabs(static_cast<double>(value));
  const double below_value = DecodeBF16(below);
  const double above_value = above == 0x7F80 ? std::ldexp(1.0, 128) : DecodeBF16(above);
  const double to_below = magnitude - below_value;
  const double to_above = above_value - magnitude;
  uint16_t nearest = to_below < to_above ? below : above;
  if (to_below == to_above) nearest = (below & 1) == 0 ? below : above;
  return sign | nearest;
}

// SampleF32Bits returns seeded f32 patterns: `count` uniform over all 32-bit patterns
// (NaNs included), `count` with magnitudes log-uniform over [2^-27, 2^18) (f16
// subnormals, normals and the overflow edge), and `count` exact f16 and bf16 rounding
// ties, plus their neighbours one f32 ulp away.
std::vector<uint32_t> SampleF32Bits(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::uniform_int_distribution<uint32_t> near_f16_exponent(127 - 27, 127 + 17);
  std::vector<uint32_t> samples;
  samples.reserve(5 * count);
  for (size_t i = 0; i < count; ++i) samples.push_back(any_bits(rng));
  for (size_t i = 0; i < count; ++i) {
    const uint32_t random = any_bits(rng);
    samples.push_back((random & 0x807FFFFF) | near_f16_exponent(rng) << 23);
  }
  for (size_t i = 0; i < count; ++i) {
    const uint32_t random = any_bits(rng);
    uint32_t tie;
    switch (i % 3) {
      case 0:  // f16 normal tie: the 13 dropped mantissa bits are exactly one half.
        tie = ((random & 0x807FE000) | near_f16_exponent(rng) << 23) | 0x1000;
        break;
      case 1:  // f16 subnormal tie: (2k + 1) * 2^-25.
        tie = FloatBits(std::ldexp(static_cast<float>(2 * (random & 0x3FF) + 1), -25)) |
              (random & 0x80000000);
        break;
      default:  // bf16 tie: the 16 dropped bits are exactly one half.
        tie = (random & 0xFFFF0000) | 0x8000;
        break;
    }
    samples.push_back(tie);
    samples.push_back(i % 2 == 0 ? tie + 1 : tie - 1);
  }
  return samples;
}

struct NarrowingCase {
  const char* what;
  float value;
  uint16_t f16;
  uint16_t bf16;
};

// Hand-picked edges, each with both expected patterns worked out by hand.
std::vector<NarrowingCase> EdgeCases() {
  return {
      {"+0", 0.0f, 0x0000, 0x0000},
      {"-0", -0.0f, 0x8000, 0x8000},
      {"+Inf", BitsToFloat(0x7F800000), 0x7C00, 0x7F80},
      {"-Inf", BitsToFloat(0xFF800000), 0xFC00, 0xFF80},
      {"1", 1.0f, 0x3C00, 0x3F80},
      {"0.1", 0.1f, 0x2E66, 0x3DCD},
      {"65504, largest f16", 65504.0f, 0x7BFF, 0x4780},
      {"65519.99", 65519.99f, 0x7BFF, 0x4780},
      {"65520, f16 tie with 2^16 -> Inf", 65520.0f, 0x7C00, 0x4780},
      {"-65520", -65520.0f, 0xFC00, 0xC780},
      {"2^16", 65536.0f, 0x7C00, 0x4780},
      {"2^-24, smallest f16 subnormal", std::ldexp(1.0f, -24), 0x0001, 0x3380},
      {"2^-25, tie to 0", std::ldexp(1.0f, -25), 0x0000, 0x3300},
      {"-2^-25, tie to -0", -std::ldexp(1.0f, -25), 0x8000, 0xB300},
      {"just above 2^-25", BitsToFloat(0x33000001), 0x0001, 0x3300},
      {"3 * 2^-26", 3.0f * std::ldexp(1.0f, -26), 0x0001, 0x3340},
      {"1.5 * 2^-24, tie to 2", 1.5f * std::ldexp(1.0f, -24), 0x0002, 0x33C0},
      {"2.5 * 2^-24, tie to 2", 2.5f * std::ldexp(1.0f, -24), 0x0002, 0x3420},
      {"1023 * 2^-24, largest f16 subnormal", 1023.0f * std::ldexp(1.0f, -24), 0x03FF, 0x3880},
      {"1023.5 * 2^-24, tie to smallest normal", 1023.5f * std::ldexp(1.0f, -24), 0x0400, 0x3880},
      {"2^-14, smallest f16 normal", std::ldexp(1.0f, -14), 0x0400, 0x3880},
      {"1 + 2^-11, f16 tie to even", 1.0f + std::ldexp(1.0f, -11), 0x3C00, 0x3F80},
      {"1 + 3 * 2^-11, f16 tie to even", 1.0f + 3.0f * std::ldexp(1.0f, -11), 0x3C02, 0x3F80},
      {"1.00390625, bf16 tie to even", 1.00390625f, 0x3C04, 0x3F80},
      {"1.01171875, bf16 tie to even", 1.01171875f, 0x3C0C, 0x3F82},
      {"just above 1.00390625", BitsToFloat(0x3F808001), 0x3C04, 0x3F81},
      {"f32 max", BitsToFloat(0x7F7FFFFF), 0x7C00, 0x7F80},
      {"-f32 max", BitsToFloat(0xFF7FFFFF), 0xFC00, 0xFF80},
      {"below bf16 tie at bf16 max", BitsToFloat(0x7F7F7FFF), 0x7C00, 0x7F7F},
      {"bf16 max tie -> Inf", BitsToFloat(0x7F7F8000), 0x7C00, 0x7F80},
      {"f32 smallest subnormal", BitsToFloat(0x00000001), 0x0000, 0x0000},
      {"-f32 smallest subnormal", BitsToFloat(0x80000001), 0x8000, 0x8000},
      {"f32 subnormal, bf16 tie to 0", BitsToFloat(0x00008000), 0x0000, 0x0000},
      {"f32 subnormal, bf16 tie to 2", BitsToFloat(0x00018000), 0x0000, 0x0002},
      {"f32 subnormal above bf16 tie", BitsToFloat(0x00008001), 0x0000, 0x0001},
      {"largest f32 subnormal", BitsToFloat(0x007FFFFF), 0x0000, 0x0080},
      {"-largest f32 subnormal", BitsToFloat(0x807FFFFF), 0x8000, 0x8080},
      {"f32 subnormal, bf16 tie to smallest normal", BitsToFloat(0x007F8000), 0x0000, 0x0080},
  };
}

struct NaNCase {
  uint32_t f32;
  uint16_t f16;
  uint16_t bf16;
};

std::vector<NaNCase> NaNCases() {
  return {
      {0x7FC00000, 0x7E00, 0x7FC0},  // Default quiet NaN.
      {0xFFC00000, 0xFE00, 0xFFC0},  // Negative quiet NaN.
      {0x7F800001, 0x7E00, 0x7FC0},  // Signalling, payload only in bits lost to both.
      {0xFF800001, 0xFE00, 0xFFC0},
      {0x7FA00000, 0x7F00, 0x7FE0},  // Signalling, leading payload bit kept.
      {0x7F810000, 0x7E08, 0x7FC1},  // Signalling, lowest bf16 payload bit.
      {0x7F802000, 0x7E01, 0x7FC0},  // Signalling, lowest f16 payload bit.
      {0xFFBFE000, 0xFFFF, 0xFFFF},  // Signalling, every f16 payload bit set.
      {0x7FFFFFFF, 0x7FFF, 0x7FFF},  // Quiet, all payload bits set.
  };
}

TEST(Float16Test, WideningMatchesTheFieldDecodeForEveryPattern) {
  Mismatches mismatches;
  for (uint32_t pattern = 0; pattern <= 0xFFFF; ++pattern) {
    const uint16_t bits = static_cast<uint16_t>(pattern);
    const float wide = ToFloat(Float16{bits});
    const double expected = DecodeF16(bits);
    const bool ok =
        std::isnan(expected)
            ? std::isnan(wide) && std::signbit(wide) == std::signbit(expected)
            : static_cast<double>(wide) == expected && std::signbit(wide) == std::signbit(expected);
    if (!ok) mismatches.Add(Hex(bits) + " widened to " + Hex(FloatBits(wide)));
  }
  EXPECT_EQ(mismatches.count(), 0) << mismatches.examples();
}

TEST(Float16Test, WideningQuietsNaNAndKeepsItsPayload) {
  for (uint32_t payload = 1; payload <= 0x3FF; ++payload) {
    for (const uint32_t sign : {0u, 1u}) {
      const uint16_t bits = static_cast<uint16_t>(sign << 15 | 0x7C00 | payload);
      EXPECT_EQ(FloatBits(ToFloat(Float16{bits})), sign << 31 | 0x7FC00000 | payload << 13)
          << Hex(bits);
    }
  }
}

TEST(Float16Test, NarrowingTheWidenedValueGivesThePatternBack) {
  Mismatches mismatches;
  for (uint32_t pattern = 0; pattern <= 0xFFFF; ++pattern) {
    const uint16_t bits = static_cast<uint16_t>(pattern);
    const float wide = ToFloat(Float16{bits});
    const uint16_t back = ToFloat16(wide).bits;
    // A NaN comes back quiet with its sign (and, widening having kept it, its payload).
    const uint16_t expected = std::isnan(wide) ? bits | 0x0200 : bits;
    if (back != expected) mismatches.Add(Hex(bits) + " came back as " + Hex(back));
  }
  EXPECT_EQ(mismatches.count(), 0) << mismatches.examples();
}

TEST(BFloat16Test, WideningMatchesTheFieldDecodeForEveryPattern) {
  Mismatches mismatches;
  for (uint32_t pattern = 0; pattern <= 0xFFFF; ++pattern) {
    const uint16_t bits = static_cast<uint16_t>(pattern);
    const float wide = ToFloat(BFloat16{bits});
    const double expected = DecodeBF16(bits);
    const bool ok =
        std::isnan(expected)
            ? std::isnan(wide) && std::signbit(wide) == std::signbit(expected)
            : static_cast<double>(wide) == expected && std::signbit(wide) == std::signbit(expected);
    if (!ok) mismatches.Add(Hex(bits) + " widened to " + Hex(FloatBits(wide)));
  }
  EXPECT_EQ(mismatches.count(), 0) << mismatches.examples();
}

TEST(BFloat16Test, NarrowingTheWidenedValueGivesThePatternBack) {
  Mismatches mismatches;
  for (uint32_t pattern = 0; pattern <= 0xFFFF; ++pattern) {
    const uint16_t bits = static_cast<uint16_t>(pattern);
    const float wide = ToFloat(BFloat16{bits});
    const uint16_t back = ToBFloat16(wide).bits;
    // Widening a bf16 keeps a signalling NaN signalling; narrowing quiets it.
    const uint16_t expected = std::isnan(wide) ? bits | 0x0040 : bits;
    if (back != expected) mismatches.Add(Hex(bits) + " came back as " + Hex(back));
  }
  EXPECT_EQ(mismatches.count(), 0) << mismatches.examples();
}

TEST(HalfReferenceTest, ReferencesAgreeWithTheHandWorkedEdges) {
  const F16Reference f16_reference;
  ASSERT_TRUE(f16_reference.IsSorted());
  for (const NarrowingCase& edge : EdgeCases()) {
    EXPECT_EQ(f16_reference.Round(edge.value), edge.f16) << edge.what;
    EXPECT_EQ(ReferenceBF16(edge.value), edge.bf16) << edge.what;
  }
}

TEST(Float16Test, NarrowsHandPickedEdges) {
  for (const NarrowingCase& edge : EdgeCases()) {
    EXPECT_EQ(ToFloat16(edge.value).bits, edge.f16) << edge.what;
  }
  for (const NaNCase& nan : NaNCases()) {
    EXPECT_EQ(ToFloat16(BitsToFloat(nan.f32)).bits, nan.f16) << Hex(nan.f32);
    EXPECT_EQ(ExpectedF16NaN(nan.f32), nan.f16) << Hex(nan.f32);
  }
}

TEST(BFloat16Test, NarrowsHandPickedEdges) {
  for (const NarrowingCase& edge : EdgeCases()) {
    EXPECT_EQ(ToBFloat16(edge.value).bits, edge.bf16) << edge.what;
  }
  for (const NaNCase& nan : NaNCases()) {
    EXPECT_EQ(ToBFloat16(BitsToFloat(nan.f32)).bits, nan.bf16) << Hex(nan.f32);
    EXPECT_EQ(ExpectedBF16NaN(nan.f32), nan.bf16) << Hex(nan.f32);
  }
}

TEST(Float16Test, NarrowingMatchesTheNearestValueSearch) {
  const F16Reference reference;
  Mismatches mismatches;
  for (const uint32_t bits : SampleF32Bits(/*count=*/600'000, /*seed=*/16)) {
    const float value = BitsToFloat(bits);
    const uint16_t expected = std::isnan(value) ? ExpectedF16NaN(bits) : reference.Round(value);
    const uint16_t actual = ToFloat16(value).bits;
    if (actual != expected) {
      mismatches.Add(Hex(bits) + " gave " + Hex(actual) + ", expected " + Hex(expected));
    }
  }
  EXPECT_EQ(mismatches.count(), 0) << mismatches.examples();
}

TEST(BFloat16Test, NarrowingMatchesTheNeighbourComparison) {
  Mismatches mismatches;
  for (const uint32_t bits : SampleF32Bits(/*count=*/600'000, /*seed=*/17)) {
    const float value = BitsToFloat(bits);
    const uint16_t expected = std::isnan(value) ? ExpectedBF16NaN(bits) : ReferenceBF16(value);
    const uint16_t actual = ToBFloat16(value).bits;
    if (actual != expected) {
      mismatches.Add(Hex(bits) + " gave " + Hex(actual) + ", expected " + Hex(expected));
    }
  }
  EXPECT_EQ(mismatches.count(), 0) << mismatches.examples();
}

}  // namespace
}  // namespace loom
