#include "offload/adamw/blockwise8.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload/adamw/internal/code_map.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

uint32_t Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

int MagnitudeBits(CodeMap map) { return map == CodeMap::kSigned ? 7 : 8; }

// ExactLevel: the construction of internal/code_map.h, in double, written from its
// definition: code 2^l + F -> 16^-z (1/16 + (F + 1) (15/16) / 2^l), z = bits - 1 - l.
double ExactLevel(int bits, uint32_t code) {
  if (code == 0) return 0.0;
  int l = 0;
  while ((code >> (l + 1)) != 0) ++l;
  const int z = bits - 1 - l;
  const double f = static_cast<double>(code - (1u << l));
  return std::pow(16.0, -z) * (1.0 / 16.0 + (f + 1.0) * (15.0 / 16.0) / std::ldexp(1.0, l));
}

// HalfSpacing: the largest distance from r in [0, 1] to its nearest level, relative to the
// absmax: half the level spacing of r's group, and 0.54 x the smallest level below it
// (where r rounds to 0 or to the smallest level).
double HalfSpacing(int bits, double r) {
  const double smallest = std::pow(16.0, -(bits - 1));
  if (r < smallest) return 0.54 * smallest;
  int z = 0;
  while (r < std::pow(16.0, -(z + 1))) ++z;
  return 0.5 * std::pow(16.0, -z) * (15.0 / 16.0) / std::ldexp(1.0, bits - 1 - z);
}

TEST(CodeMapTest, LevelsMatchTheConstruction) {
  for (const CodeMap map : {CodeMap::kSigned, CodeMap::kUnsigned}) {
    const int bits = MagnitudeBits(map);
    for (uint32_t c = 0; c < (1u << bits); ++c) {
      const float level = CodeLevel(map, static_cast<uint8_t>(c));
      ASSERT_EQ(static_cast<double>(level), ExactLevel(bits, c)) << CodeMapName(map) << " " << c;
      if (c > 0) {
        ASSERT_GT(level, CodeLevel(map, static_cast<uint8_t>(c - 1))) << "monotone at " << c;
      }
    }
    EXPECT_EQ(CodeLevel(map, static_cast<uint8_t>((1u << bits) - 1)), 1.0f);
    EXPECT_EQ(CodeLevel(map, 1), std::ldexp(1.0f, -4 * (bits - 1)));
  }
  // The signed map mirrors: 0x80 | c is -level(c); 0x80 itself is -0.
  for (uint32_t c = 0; c < 128; ++c) {
    const float positive = CodeLevel(CodeMap::kSigned, static_cast<uint8_t>(c));
    const float negative = CodeLevel(CodeMap::kSigned, static_cast<uint8_t>(0x80 | c));
    ASSERT_EQ(Bits(negative), Bits(positive) | 0x80000000u) << c;
  }
  EXPECT_EQ(CodeLevel(CodeMap::kUnsigned, 1), std::ldexp(1.0f, -28));
  EXPECT_EQ(CodeLevel(CodeMap::kSigned, 1), std::ldexp(1.0f, -24));
}

TEST(CodeMapTest, EveryLevelEncodesToItsCode) {
  for (uint32_t c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    EXPECT_EQ(adamw_internal::EncodeSigned(CodeLevel(CodeMap::kSigned, code), 1.0f),
              c == 0x80 ? 0x80 : code)
        << c;
    EXPECT_EQ(adamw_internal::EncodeUnsigned(CodeLevel(CodeMap::kUnsigned, code), 1.0f), code) << c;
  }
}

TEST(CodeMapTest, EncodesToTheNearestLevel) {
  // Sweep r over [0, 1] logarithmically and at every midpoint between levels (+-1 ulp); the
  // chosen level must be a nearest one (or, below the smallest level, 0 or it).
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> log_r(-40.0f, 0.0f);
  for (const CodeMap map : {CodeMap::kSigned, CodeMap::kUnsigned}) {
    const int bits = MagnitudeBits(map);
    std::vector<float> probes;
    for (int i = 0; i < 200000; ++i) probes.push_back(std::exp2(log_r(rng)));
    for (uint32_t c = 1; c + 1 < (1u << bits); ++c) {
      const float mid = static_cast<float>((ExactLevel(bits, c) + ExactLevel(bits, c + 1)) / 2);
      probes.push_back(mid);
      probes.push_back(std::nextafter(mid, 0.0f));
      probes.push_back(std::nextafter(mid, 2.0f));
    }
    const double smallest = ExactLevel(bits, 1);
    for (const float r : probes) {
      const uint8_t code = map == CodeMap::kSigned ? adamw_internal::EncodeSigned(r, 1.0f)
                                                   : adamw_internal::EncodeUnsigned(r, 1.0f);
      const double chosen = static_cast<double>(CodeLevel(map, code));
      double nearest = 1e9;
      for (uint32_t c = 0; c < (1u << bits); ++c) {
        nearest = std::min(nearest, std::fabs(ExactLevel(bits, c) - static_cast<double>(r)));
      }
      const double error = std::fabs(chosen - static_cast<double>(r));
      if (static_cast<double>(r) < smallest) {
        ASSERT_LE(error, 0.54 * smallest) << CodeMapName(map) << " r=" << r;
      } else {
        // Within 5e-5 of a spacing from a midpoint the choice may go either way: the
        // encoder computes r's position in units of the spacing with an error of a few
        // 2^-24 relative to up to 128 units.
        ASSERT_LE(error, nearest + 1e-4 * HalfSpacing(bits, static_cast<double>(r)))
            << CodeMapName(map) << " r=" << r;
      }
    }
  }
}

TEST(QuantizeBlockwise8Test, ErrorWithinBoundPerBlock) {
  // Blocks whose values span many decades (as v's do), a tail block, both maps.
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> log_mag(-12.0f, 3.0f);
  for (const CodeMap map : {CodeMap::kSigned, CodeMap::kUnsigned}) {
    for (const int64_t block_size : {256, 320, 2048}) {
      const size_t count = 3 * static_cast<size_t>(block_size) + 77;
      std::vector<float> x(count);
      for (float& value : x) {
        value = std::pow(10.0f, log_mag(rng)) * ((rng() & 1) ? 1.0f : -1.0f);
      }
      std::vector<uint8_t> codes(count);
      std::vector<float> absmax(NumBlocks(count, block_size));
      ASSERT_EQ(absmax.size(), 4u);
      LOOM_ASSERT_OK(
          QuantizeBlockwise8(map, block_size, x, absl::MakeSpan(codes), absl::MakeSpan(absmax)));
      std::vector<float> y(count);
      LOOM_ASSERT_OK(DequantizeBlockwise8(map, block_size, codes, absmax, absl::MakeSpan(y)));
      const int bits = MagnitudeBits(map);
      for (size_t b = 0; b < absmax.size(); ++b) {
        const size_t begin = b * static_cast<size_t>(block_size);
        const size_t end = std::min(count, begin + static_cast<size_t>(block_size));
        float expected_absmax = 0.0f;
        for (size_t i = begin; i < end; ++i)
          expected_absmax = std::max(expected_absmax, std::fabs(x[i]));
        ASSERT_EQ(absmax[b], expected_absmax) << "block " << b;
        for (size_t i = begin; i < end; ++i) {
          const double a = static_cast<double>(absmax[b]);
          const double r = std::fabs(static_cast<double>(x[i])) / a;
          // One more rounding: level * absmax, half an ulp of the result.
          const double bound = a * HalfSpacing(bits, r) * (1 + 1e-4) +
                               std::ldexp(std::fabs(static_cast<double>(y[i])), -24);
          const double target = map == CodeMap::kSigned ? static_cast<double>(x[i])
                                                        : std::fabs(static_cast<double>(x[i]));
          ASSERT_LE(std::fabs(static_cast<double>(y[i]) - target), bound)
              << CodeMapName(map) << " block_size " << block_size << " at " << i << " x=" << x[i];
          if (map == CodeMap::kSigned && y[i] != 0.0f) {
            ASSERT_EQ(std::signbit(y[i]), std::signbit(x[i])) << i;
          }
        }
      }
    }
  }
}

TEST(QuantizeBlockwise8Test, RelativeErrorNearTheAbsmax) {
  // In the top group (within 16x of the absmax) the error is at most 0.37% (unsigned) or
  // 0.73% (signed) of the absmax: half a spacing of 15/16 / 2^(bits-1).
  std::vector<float> x(256);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.0625f + 0.9375f * static_cast<float>(i) / 255.0f;
  for (const CodeMap map : {CodeMap::kSigned, CodeMap::kUnsigned}) {
    std::vector<uint8_t> codes(256);
    std::vector<float> absmax(1);
    LOOM_ASSERT_OK(QuantizeBlockwise8(map, 256, x, absl::MakeSpan(codes), absl::MakeSpan(absmax)));
    std::vector<float> y(256);
    LOOM_ASSERT_OK(DequantizeBlockwise8(map, 256, codes, absmax, absl::MakeSpan(y)));
    const double limit = map == CodeMap::kSigned ? 0.00733 : 0.00367;  // + 1 ulp slack
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_LE(std::fabs(static_cast<double>(y[i]) - static_cast<double>(x[i])), limit) << i;
    }
  }
}

TEST(QuantizeBlockwise8Test, Zeros) {
  // An all-zero block: absmax 0, codes 0, decodes to +0. Zeros inside a non-zero block
  // decode to exact zeros; -0 keeps its sign in the signed map.
  std::vector<float> x(600, 0.0f);
  x[300] = -0.0f;
  x[400] = 3.0f;
  x[401] = -0.0f;
  std::vector<uint8_t> codes(600, 0xAA);
  std::vector<float> absmax(3, -1.0f);
  LOOM_ASSERT_OK(
      QuantizeBlockwise8(CodeMap::kSigned, 256, x, absl::MakeSpan(codes), absl::MakeSpan(absmax)));
  EXPECT_EQ(absmax[0], 0.0f);
  EXPECT_EQ(absmax[1], 3.0f);
  EXPECT_EQ(absmax[2], 0.0f);
  for (size_t i = 0; i < 600; ++i) {
    if (i == 400) continue;
    EXPECT_EQ(codes[i], std::signbit(x[i]) ? 0x80 : 0x00) << i;
  }
  EXPECT_EQ(codes[400], 0x7F);
  std::vector<float> y(600, 1.0f);
  LOOM_ASSERT_OK(DequantizeBlockwise8(CodeMap::kSigned, 256, codes, absmax, absl::MakeSpan(y)));
  for (size_t i = 0; i < 600; ++i) ASSERT_EQ(Bits(y[i]), Bits(x[i])) << i;
}

TEST(QuantizeBlockwise8Test, TailBlockHasItsOwnScale) {
  // 1000 = 3 x 256 + 232: the last block's absmax comes from its 232 elements only.
  std::vector<float> x(1000, 0.5f);
  x[999] = -8.0f;
  x[767] = 2.0f;
  std::vector<uint8_t> codes(1000);
  std::vector<float> absmax(4);
  LOOM_ASSERT_OK(
      QuantizeBlockwise8(CodeMap::kSigned, 256, x, absl::MakeSpan(codes), absl::MakeSpan(absmax)));
  EXPECT_THAT(absmax, ::testing::ElementsAre(0.5f, 0.5f, 2.0f, 8.0f));
  EXPECT_EQ(codes[999], 0xFF);
  EXPECT_EQ(codes[0], 0x7F);
  std::vector<float> y(1000);
  LOOM_ASSERT_OK(DequantizeBlockwise8(CodeMap::kSigned, 256, codes, absmax, absl::MakeSpan(y)));
  EXPECT_EQ(y[999], -8.0f);
  EXPECT_EQ(y[767], 2.0f);
  EXPECT_EQ(y[0], 0.5f);
  // A count below one block: a single, short block.
  std::vector<float> one = {-0.25f};
  std::vector<uint8_t> one_code(1);
  std::vector<float> one_absmax(1);
  LOOM_ASSERT_OK(QuantizeBlockwise8(CodeMap::kUnsigned, 2048, one, absl::MakeSpan(one_code),
                                    absl::MakeSpan(one_absmax)));
  EXPECT_EQ(one_absmax[0], 0.25f);
  EXPECT_EQ(one_code[0], 0xFF);
  // Zero elements: zero blocks.
  LOOM_EXPECT_OK(QuantizeBlockwise8(CodeMap::kUnsigned, 2048, {}, {}, {}));
  EXPECT_EQ(NumBlocks(0, 256), 0);
  EXPECT_EQ(NumBlocks(1, 256), 1);
  EXPECT_EQ(NumBlocks(256, 256), 1);
  EXPECT_EQ(NumBlocks(257, 256), 2);
}

TEST(QuantizeBlockwise8Test, NonFiniteValuesPoisonOnlyTheirBlock) {
  std::vector<float> x(512, 1.0f);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint8_t> codes(512);
  std::vector<float> absmax(2);
  LOOM_ASSERT_OK(QuantizeBlockwise8(CodeMap::kUnsigned, 256, x, absl::MakeSpan(codes),
                                    absl::MakeSpan(absmax)));
  EXPECT_TRUE(std::isnan(absmax[0]));
  EXPECT_EQ(absmax[1], 1.0f);
  std::vector<float> y(512);
  LOOM_ASSERT_OK(DequantizeBlockwise8(CodeMap::kUnsigned, 256, codes, absmax, absl::MakeSpan(y)));
  for (size_t i = 0; i < 256; ++i) ASSERT_TRUE(std::isnan(y[i])) << i;
  for (size_t i = 256; i < 512; ++i) ASSERT_EQ(y[i], 1.0f) << i;
}

TEST(QuantizeBlockwise8Test, HeaderExample) {
  const std::vector<float> x = {0.5f, -1.0f, 0.001f, 0.0f};
  std::vector<uint8_t> codes(4);
  std::vector<float> absmax(NumBlocks(4, 256));
  LOOM_ASSERT_OK(
      QuantizeBlockwise8(CodeMap::kSigned, 256, x, absl::MakeSpan(codes), absl::MakeSpan(absmax)));
  EXPECT_THAT(absmax, ::testing::ElementsAre(1.0f));
  EXPECT_EQ(codes[1], 0xFF);
  EXPECT_EQ(codes[3], 0x00);
  std::vector<float> y(4);
  LOOM_ASSERT_OK(DequantizeBlockwise8(CodeMap::kSigned, 256, codes, absmax, absl::MakeSpan(y)));
  EXPECT_THAT(y, ::testing::ElementsAre(0.501953125f, -1.0f, 0.000930786133f, 0.0f));
}

TEST(ValidateBlockSizeTest, MultiplesOf64From256To2048) {
  for (const int64_t ok : {256, 320, 1024, 2048}) {
    EXPECT_THAT(ValidateBlockSize(ok), IsOk()) << ok;
  }
  for (const int64_t bad : {-256, 0, 64, 255, 300, 2047, 2112, 4096}) {
    EXPECT_THAT(ValidateBlockSize(bad),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("block_size is ", bad,
                                                "; it must be a multiple of 64 in [256, 2048]"))));
  }
}

TEST(QuantizeBlockwise8Test, Errors) {
  std::vector<float> x(300);
  std::vector<uint8_t> codes(300);
  std::vector<float> absmax(2);
  EXPECT_THAT(
      QuantizeBlockwise8(CodeMap::kSigned, 100, x, absl::MakeSpan(codes), absl::MakeSpan(absmax)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("QuantizeBlockwise8: block_size is 100")));
  std::vector<uint8_t> short_codes(299);
  EXPECT_THAT(QuantizeBlockwise8(CodeMap::kSigned, 256, x, absl::MakeSpan(short_codes),
                                 absl::MakeSpan(absmax)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("values has 300 elements but codes has 299")));
  std::vector<float> one_scale(1, 7.0f);
  EXPECT_THAT(QuantizeBlockwise8(CodeMap::kSigned, 256, x, absl::MakeSpan(codes),
                                 absl::MakeSpan(one_scale)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("absmax has 1 elements but 300 values in blocks of 256 need 2")));
  EXPECT_EQ(one_scale[0], 7.0f);  // nothing written
  EXPECT_THAT(DequantizeBlockwise8(CodeMap::kUnsigned, 256, codes, one_scale, absl::MakeSpan(x)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("DequantizeBlockwise8: absmax has 1 elements")));
}

}  // namespace
}  // namespace loom
