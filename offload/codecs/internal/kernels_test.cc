#include "offload/codecs/internal/kernels.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"

namespace loom {
namespace codecs_internal {

void PrintTo(Isa isa, std::ostream* os) { *os << IsaName(isa); }

namespace {

// Inputs that exercise the quantizer: several magnitudes per block, exact zeros,
// negative zeros, subnormals and whole blocks of them.
std::vector<float> MixedInput(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> kind(0, 19);
  std::uniform_int_distribution<int> exponent(-140, 120);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    switch (kind(rng)) {
      case 0:
        x[i] = 0.0f;
        break;
      case 1:
        x[i] = -0.0f;
        break;
      case 2:
        x[i] = std::numeric_limits<float>::denorm_min() * static_cast<float>(rng() % 1000);
        break;
      case 3:
        x[i] = std::ldexp(normal(rng), exponent(rng));
        break;
      default:
        x[i] = 0.02f * normal(rng);
    }
  }
  // Half-way cases: values that land exactly on k + 1/2 quantization steps.
  for (size_t i = 0; i + 4 <= n; i += 97) {
    x[i] = 127.0f;
    x[i + 1] = 0.5f;
    x[i + 2] = -2.5f;
    x[i + 3] = 3.5f;
  }
  return x;
}

std::vector<size_t> Sizes() { return {0, 1, 31, 32, 33, 63, 255, 256, 257, 1000, 4103}; }
std::vector<size_t> BlockSizes() { return {32, 64, 256, 4096, 65536}; }

class KernelsTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!IsaSupported(GetParam())) GTEST_SKIP() << IsaName(GetParam()) << " not supported";
  }
  const Kernels& kernels() const { return KernelsFor(GetParam()); }
};

TEST_P(KernelsTest, QuantizeMatchesScalarBitwise) {
  for (size_t block : BlockSizes()) {
    for (size_t n : Sizes()) {
      const std::vector<float> x = MixedInput(n, static_cast<uint32_t>(n + block));
      std::vector<std::byte> expected(Int8Bytes(n, block));
      std::vector<std::byte> actual(Int8Bytes(n, block), std::byte{0xAB});
      ASSERT_EQ(QuantizeInt8Scalar(x, block, expected.data()), kAllFinite);
      ASSERT_EQ(kernels().quantize_int8(x, block, actual.data()), kAllFinite);
      ASSERT_EQ(expected, actual) << "n " << n << " block " << block;
    }
  }
}

TEST_P(KernelsTest, DequantizeMatchesScalarBitwise) {
  std::mt19937 rng(5);
  for (size_t block : BlockSizes()) {
    for (size_t n : Sizes()) {
      // Arbitrary codes (-128 included) and scales, not only what the quantizer writes.
      std::vector<std::byte> in(Int8Bytes(n, block));
      for (std::byte& b : in) b = static_cast<std::byte>(rng() & 0xFFu);
      for (size_t begin = 0, off = 0; begin < n; begin += block) {
        const float scale =
            std::ldexp(static_cast<float>(rng() % 1000), -static_cast<int>(rng() % 140));
        std::memcpy(in.data() + off, &scale, 4);
        off += 4 + std::min(block, n - begin);
      }
      std::vector<float> expected(n);
      std::vector<float> actual(n, -1.0f);
      DequantizeInt8Scalar(in.data(), block, absl::MakeSpan(expected));
      kernels().dequantize_int8(in.data(), block, absl::MakeSpan(actual));
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(FloatBits(expected[i]), FloatBits(actual[i])) << "n " << n << " block " << block;
      }
    }
  }
}

TEST_P(KernelsTest, RoundTripWithinBound) {
  for (size_t block : {32u, 256u}) {
    const size_t n = 5000;
    const std::vector<float> x = MixedInput(n, 77);
    std::vector<std::byte> enc(Int8Bytes(n, block));
    ASSERT_EQ(kernels().quantize_int8(x, block, enc.data()), kAllFinite);
    std::vector<float> y(n);
    kernels().dequantize_int8(enc.data(), block, absl::MakeSpan(y));
    for (size_t begin = 0, off = 0; begin < n; begin += block) {
      float scale;
      std::memcpy(&scale, enc.data() + off, 4);
      const size_t len = std::min(block, n - begin);
      for (size_t i = begin; i < begin + len; ++i) {
        ASSERT_LE(std::fabs(x[i] - y[i]), scale * (0.5f + 0x1p-14f)) << "element " << i;
      }
      off += 4 + len;
    }
  }
}

TEST_P(KernelsTest, ReportsFirstNonFiniteBlock) {
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::infinity()}) {
    for (size_t pos : {0u, 31u, 32u, 100u, 255u, 999u}) {
      std::vector<float> x = MixedInput(1000, 3);
      x[pos] = bad;
      std::vector<std::byte> out(Int8Bytes(x.size(), 32));
      EXPECT_EQ(kernels().quantize_int8(x, 32, out.data()), pos / 32) << bad << " at " << pos;
    }
  }
}

TEST_P(KernelsTest, ExtremeScales) {
  // FLT_MAX must not decode to infinity; a subnormal absmax must still meet the bound.
  for (float m : {FLT_MAX, -FLT_MAX, 3.0e38f, FLT_MIN, 1.0e-40f,
                  std::numeric_limits<float>::denorm_min(), 127.0f * FLT_MIN}) {
    std::vector<float> x(64);
    for (size_t i = 0; i < x.size(); ++i) x[i] = m * (static_cast<float>(i) / 63.0f);
    x[5] = m;
    std::vector<std::byte> enc(Int8Bytes(x.size(), 32));
    ASSERT_EQ(kernels().quantize_int8(x, 32, enc.data()), kAllFinite);
    std::vector<float> y(x.size());
    kernels().dequantize_int8(enc.data(), 32, absl::MakeSpan(y));
    for (size_t i = 0; i < x.size(); ++i) {
      float scale;
      std::memcpy(&scale, enc.data() + (i / 32) * 36, 4);
      ASSERT_TRUE(std::isfinite(y[i])) << m << " element " << i;
      ASSERT_LE(std::fabs(x[i] - y[i]), scale * (0.5f + 0x1p-14f)) << m << " element " << i;
    }
  }
}

TEST_P(KernelsTest, ShuffleMatchesScalarAndRoundTrips) {
  std::mt19937 rng(9);
  for (size_t n : {0u, 1u, 31u, 32u, 33u, 64u, 100u, 1000u, 65536u}) {
    std::vector<std::byte> in(4 * n);
    for (std::byte& b : in) b = static_cast<std::byte>(rng() & 0xFFu);
    std::vector<std::byte> expected(4 * n);
    std::vector<std::byte> actual(4 * n);
    Shuffle4Scalar(in.data(), n, expected.data());
    kernels().shuffle4(in.data(), n, actual.data());
    ASSERT_EQ(expected, actual) << n;
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < 4; ++j) ASSERT_EQ(expected[j * n + i], in[4 * i + j]);
    }
    std::vector<std::byte> back(4 * n);
    kernels().unshuffle4(actual.data(), n, back.data());
    ASSERT_EQ(back, in) << n;
  }
}

TEST_P(KernelsTest, FindOverflowMatchesScalar) {
  const float inf = std::numeric_limits<float>::infinity();
  for (uint32_t threshold : {0x477FF000u, 0x7F7F8000u}) {
    const float first = BitsToFloat(threshold);        // Overflows.
    const float last_ok = BitsToFloat(threshold - 1);  // Does not.
    for (size_t n : {0u, 1u, 15u, 16u, 31u, 32u, 33u, 100u, 8192u}) {
      std::vector<float> x = MixedInput(n, static_cast<uint32_t>(n));
      ASSERT_EQ(kernels().find_overflow(x, threshold), FindOverflowScalar(x, threshold));
      for (float& v : x) {
        if (Overflows(v, threshold)) v = 1.0f;
      }
      for (size_t i = 0; i < n; i += 7) x[i] = (i % 2 == 0) ? -last_ok : last_ok;
      for (size_t i = 3; i < n; i += 11) x[i] = (i % 2 == 0) ? inf : -inf;
      for (size_t i = 5; i < n; i += 13) x[i] = std::numeric_limits<float>::quiet_NaN();
      ASSERT_EQ(kernels().find_overflow(x, threshold), n) << "none expected, n " << n;
      for (size_t pos : {n - 1, n / 2, size_t{0}}) {
        if (pos >= n) continue;
        std::vector<float> y = x;
        y[pos] = (pos % 2 == 0) ? first : -FLT_MAX;
        if (pos + 1 < n) y[pos + 1] = first;
        ASSERT_EQ(kernels().find_overflow(y, threshold), pos) << "n " << n;
        ASSERT_EQ(FindOverflowScalar(y, threshold), pos);
        ASSERT_EQ(kernels().find_overflow(absl::MakeConstSpan(y).subspan(pos + 1), threshold), 0u);
      }
    }
  }
}

// Guarded is an output span of `count` elements, `offset` elements into a buffer, with
// guard bytes on both sides that a kernel must leave as they are.
template <typename T>
class Guarded {
 public:
  Guarded(size_t count, size_t offset) : count_(count), begin_(kGuard + offset) {
    buffer_.resize(begin_ + count + kGuard);
    std::memset(static_cast<void*>(buffer_.data()), kGuardByte, buffer_.size() * sizeof(T));
  }
  absl::Span<T> span() { return absl::MakeSpan(buffer_).subspan(begin_, count_); }
  // GuardsIntact returns whether every byte outside span() still holds kGuardByte.
  bool GuardsIntact() const {
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(buffer_.data());
    for (size_t i = 0; i < buffer_.size() * sizeof(T); ++i) {
      const bool inside = i >= begin_ * sizeof(T) && i < (begin_ + count_) * sizeof(T);
      if (!inside && bytes[i] != kGuardByte) return false;
    }
    return true;
  }

 private:
  static constexpr size_t kGuard = 64;
  static constexpr unsigned char kGuardByte = 0xA5;
  size_t count_;
  size_t begin_;
  std::vector<T> buffer_;
};

TEST_P(KernelsTest, WritesNothingOutsideTheOutputSpan) {
  // Inputs are exact-size vectors and subspans, so a read past them is a heap overflow
  // that --config=asan reports; this test checks the writes.
  for (size_t offset : {0u, 1u}) {
    for (size_t n : Sizes()) {
      SCOPED_TRACE(absl::StrCat("n ", n, " offset ", offset));
      const std::vector<float> x = MixedInput(n, 11);
      for (size_t block : {32u, 256u}) {
        Guarded<std::byte> enc(Int8Bytes(n, block), offset);
        ASSERT_EQ(kernels().quantize_int8(x, block, enc.span().data()), kAllFinite);
        EXPECT_TRUE(enc.GuardsIntact()) << "quantize_int8, block " << block;
        Guarded<float> dec(n, offset);
        kernels().dequantize_int8(enc.span().data(), block, dec.span());
        EXPECT_TRUE(dec.GuardsIntact()) << "dequantize_int8, block " << block;
      }
      const auto bytes = absl::MakeConstSpan(reinterpret_cast<const std::byte*>(x.data()), 4 * n);
      Guarded<std::byte> shuffled(4 * n, offset);
      kernels().shuffle4(bytes.data(), n, shuffled.span().data());
      EXPECT_TRUE(shuffled.GuardsIntact()) << "shuffle4";
      Guarded<std::byte> unshuffled(4 * n, offset);
      kernels().unshuffle4(shuffled.span().data(), n, unshuffled.span().data());
      EXPECT_TRUE(unshuffled.GuardsIntact()) << "unshuffle4";
      EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), unshuffled.span().begin()));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllIsas, KernelsTest, ::testing::ValuesIn(AllIsas()),
                         [](const ::testing::TestParamInfo<Isa>& param_info) {
                           return std::string(IsaName(param_info.param));
                         });

TEST(Int8ScaleTest, KeepsEveryCodeWithin127) {
  // The vector quantizers leave out QuantizeOne's clamp because absmax * inv, the largest
  // |x * inv| of a block, stays below 127.5 (kernels.cc).
  std::vector<float> absmaxes = {FLT_MAX, std::nextafter(FLT_MAX, 0.0f), 3.0e38f, FLT_MIN,
                                 127.0f * FLT_MIN, std::nextafter(127.0f * FLT_MIN, 0.0f),
                                 std::numeric_limits<float>::denorm_min(), 1.0f, 127.0f};
  std::mt19937 rng(21);
  for (int i = 0; i < 1'000'000; ++i) absmaxes.push_back(BitsToFloat(1 + rng() % 0x7F7FFFFFu));
  for (float absmax : absmaxes) {
    float scale;
    float inv;
    Int8Scale(absmax, &scale, &inv);
    ASSERT_LT(absmax * inv, 127.5f) << "absmax " << absmax << " scale " << scale;
  }
}

TEST(IsaTest, ActiveIsaIsSupported) {
  EXPECT_TRUE(IsaSupported(ActiveIsa()));
  EXPECT_TRUE(IsaSupported(Isa::kScalar));
}

}  // namespace
}  // namespace codecs_internal
}  // namespace loom
