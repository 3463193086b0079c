#include "offload/codecs/codec.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/half.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "core/crc32c.h"

namespace loom {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Seeded, pairwise distinct values: N(0, 0.02) "weights" with a few larger ones.
std::vector<float> Weights(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = normal(rng);
    if (i % 101 == 7) x[i] *= 50.0f;
  }
  // Make every value distinct (ties are vanishingly rare; this removes them).
  for (size_t i = 0; i < n; ++i) x[i] = x[i] + static_cast<float>(i) * 1e-12f;
  return x;
}

// Weights rounded to bf16 and stored as f32: the lower 16 bits are zero, so lossless
// codecs compress them.
std::vector<float> Bf16Weights(size_t n, uint32_t seed) {
  std::vector<float> x = Weights(n, seed);
  for (float& v : x) v = ToFloat(ToBFloat16(v));
  return x;
}

std::vector<size_t> Counts() { return {0, 1, 3, 255, 256, 257, 100000}; }

CodecOptions Options(CodecKind kind) {
  CodecOptions options;
  options.kind = kind;
  return options;
}

// Every configuration the round-trip tests run.
std::vector<CodecOptions> AllConfigurations() {
  std::vector<CodecOptions> all;
  for (CodecKind kind : AllCodecKinds()) all.push_back(Options(kind));
  for (int64_t block : {32, 64, 4096, 65536}) {
    CodecOptions o = Options(CodecKind::kInt8Blockwise);
    o.block_size = block;
    all.push_back(o);
  }
  for (CodecKind kind : {CodecKind::kLz4, CodecKind::kZstd}) {
    CodecOptions o = Options(kind);
    o.byte_shuffle = false;
    all.push_back(o);
  }
  for (int level : {-5, 3, 19}) {
    CodecOptions o = Options(CodecKind::kZstd);
    o.zstd_level = level;
    all.push_back(o);
  }
  return all;
}

std::string Describe(const CodecOptions& o) {
  return absl::StrCat(CodecKindName(o.kind), " block ", o.block_size, " level ", o.zstd_level,
                      " shuffle ", o.byte_shuffle);
}

// ExpectDecoded checks `y` against `x` as `options` promises.
void ExpectDecoded(const CodecOptions& options, absl::Span<const float> x,
                   absl::Span<const float> y) {
  ASSERT_EQ(x.size(), y.size());
  switch (options.kind) {
    case CodecKind::kRaw:
    case CodecKind::kLz4:
    case CodecKind::kZstd:
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(Bits(x[i]), Bits(y[i])) << Describe(options) << " element " << i;
      }
      break;
    case CodecKind::kFp16:
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(Bits(ToFloat(ToFloat16(x[i]))), Bits(y[i])) << "element " << i << " " << x[i];
      }
      break;
    case CodecKind::kBf16:
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(Bits(ToFloat(ToBFloat16(x[i]))), Bits(y[i])) << "element " << i << " " << x[i];
      }
      break;
    case CodecKind::kInt8Blockwise: {
      // The stated bound: |x - x'| <= scale * (1/2 + 2^-14), scale = max(absmax/127,
      // FLT_MIN) per block; a block of zeros decodes to +0.0 exactly.
      const size_t block = static_cast<size_t>(options.block_size);
      for (size_t begin = 0; begin < x.size(); begin += block) {
        const size_t end = std::min(x.size(), begin + block);
        float absmax = 0.0f;
        for (size_t i = begin; i < end; ++i) absmax = std::max(absmax, std::fabs(x[i]));
        const float scale = absmax == 0.0f ? 0.0f : std::max(absmax / 127.0f, FLT_MIN);
        for (size_t i = begin; i < end; ++i) {
          if (absmax == 0.0f) {
            ASSERT_EQ(Bits(y[i]), 0u) << "zero block, element " << i;
          } else {
            ASSERT_LE(std::fabs(x[i] - y[i]), scale * (0.5f + 0x1p-14f))
                << Describe(options) << " element " << i << ": " << x[i] << " -> " << y[i];
          }
        }
      }
      break;
    }
  }
}

// The example of README.md and codec.h, as written there.
absl::Status ReadmeExample(const std::vector<float>& exp_avg, const std::vector<float>& grads,
                           absl::Span<std::byte> buffer) {
  CodecOptions options{CodecKind::kInt8Blockwise};  // block_size 256
  LOOM_ASSIGN_OR_RETURN(std::vector<std::byte> frame, EncodeTensor(options, exp_avg));
  const size_t n = exp_avg.size();
  if (frame.size() != 64 + n + 4 * ((n + 255) / 256)) return absl::InternalError("size");

  LOOM_ASSIGN_OR_RETURN(EncodedInfo info, InspectEncodedTensor(frame));
  std::vector<float> restored(info.count);
  LOOM_RETURN_IF_ERROR(DecodeTensor(frame, absl::MakeSpan(restored)));

  LOOM_ASSIGN_OR_RETURN(size_t max_bytes, MaxEncodedBytes({CodecKind::kZstd}, grads.size()));
  LOOM_ASSIGN_OR_RETURN(size_t bytes,
                        EncodeTensor({CodecKind::kZstd}, grads, buffer.first(max_bytes)));
  std::vector<float> back(grads.size());
  LOOM_RETURN_IF_ERROR(DecodeTensor(buffer.first(bytes), absl::MakeSpan(back)));
  if (back != grads) return absl::InternalError("zstd round trip");

  frame[100] ^= std::byte{1};
  return DecodeTensor(frame, absl::MakeSpan(restored));
}

TEST(ExampleTest, ReadmeExampleRuns) {
  std::vector<std::byte> buffer(1 << 20);
  EXPECT_THAT(ReadmeExample(Weights(1 << 18, 20), Weights(5000, 21), absl::MakeSpan(buffer)),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("payload checksum mismatch: header has 0x"),
                             HasSubstr(", payload hashes to 0x"))));
}

// ------------------------------------------------------------------------ names, options

TEST(CodecKindTest, NamesRoundTrip) {
  for (CodecKind kind : AllCodecKinds()) {
    EXPECT_THAT(ParseCodecKind(CodecKindName(kind)), IsOkAndHolds(kind));
  }
  EXPECT_EQ(CodecKindName(CodecKind::kInt8Blockwise), "int8_blockwise");
  EXPECT_THAT(ParseCodecKind("fp8"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("\"fp8\""),
                             HasSubstr("raw, fp16, bf16, int8_blockwise, lz4, zstd"))));
}

TEST(OptionsTest, BlockSizeValidated) {
  CodecOptions o = Options(CodecKind::kInt8Blockwise);
  for (int64_t bad :
       {int64_t{0}, int64_t{3}, int64_t{16}, int64_t{-256}, int64_t{100}, int64_t{131072}}) {
    o.block_size = bad;
    EXPECT_THAT(ValidateOptions(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                             AllOf(HasSubstr(absl::StrCat("block_size ", bad)),
                                                   HasSubstr("power of two in [32, 65536]"))));
    EXPECT_THAT(MaxEncodedBytes(o, 10),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("block_size")));
    EXPECT_THAT(EncodeTensor(o, std::vector<float>(10)),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("block_size")));
  }
  for (int64_t good : {32, 256, 65536}) {
    o.block_size = good;
    LOOM_EXPECT_OK(ValidateOptions(o));
  }
  // Other codecs ignore block_size.
  CodecOptions fp16 = Options(CodecKind::kFp16);
  fp16.block_size = 3;
  LOOM_EXPECT_OK(ValidateOptions(fp16));
}

TEST(OptionsTest, ZstdLevelAndKindValidated) {
  CodecOptions o = Options(CodecKind::kZstd);
  o.zstd_level = 23;
  EXPECT_THAT(ValidateOptions(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zstd_level 23")));
  o.zstd_level = 0;  // zstd's default.
  LOOM_EXPECT_OK(ValidateOptions(o));
  o.kind = static_cast<CodecKind>(9);
  EXPECT_THAT(ValidateOptions(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown codec kind 9")));
}

TEST(OptionsTest, MaxEncodedBytes) {
  EXPECT_THAT(MaxEncodedBytes(Options(CodecKind::kRaw), 10), IsOkAndHolds(64u + 40u));
  EXPECT_THAT(MaxEncodedBytes(Options(CodecKind::kFp16), 10), IsOkAndHolds(64u + 20u));
  EXPECT_THAT(MaxEncodedBytes(Options(CodecKind::kBf16), 0), IsOkAndHolds(64u));
  // 257 elements in blocks of 256: two scales.
  EXPECT_THAT(MaxEncodedBytes(Options(CodecKind::kInt8Blockwise), 257),
              IsOkAndHolds(64u + 257u + 8u));
  // Raw size plus one table entry per 65536-element chunk.
  EXPECT_THAT(MaxEncodedBytes(Options(CodecKind::kLz4), 65537),
              IsOkAndHolds(64u + 4u * 65537u + 8u));
  EXPECT_THAT(MaxEncodedBytes(Options(CodecKind::kZstd), size_t{1} << 62),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("too large")));
}

TEST(EncodeTest, OutputTooSmallNamesBothSizes) {
  const std::vector<float> x = Weights(100, 1);
  std::vector<std::byte> out(263);
  EXPECT_THAT(EncodeTensor(Options(CodecKind::kFp16), x, absl::MakeSpan(out)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("output has 263 bytes"), HasSubstr("100 elements"),
                             HasSubstr("MaxEncodedBytes = 264"))));
  // Lossless codecs need the worst case even when the data would compress.
  const std::vector<float> zeros(1000, 0.0f);
  out.resize(64 + 4 + 3999);
  EXPECT_THAT(EncodeTensor(Options(CodecKind::kZstd), zeros, absl::MakeSpan(out)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("MaxEncodedBytes = 4068")));
}

// ------------------------------------------------------------------------------ round trips

TEST(RoundTripTest, EveryCodecAndCount) {
  for (const CodecOptions& options : AllConfigurations()) {
    for (size_t n : Counts()) {
      for (bool structured : {false, true}) {
        SCOPED_TRACE(absl::StrCat(Describe(options), " n ", n, " structured ", structured));
        const uint32_t seed = static_cast<uint32_t>(n * 7 + static_cast<size_t>(options.kind));
        const std::vector<float> x = structured ? Bf16Weights(n, seed) : Weights(n, seed);
        LOOM_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> frame, EncodeTensor(options, x));
        LOOM_ASSERT_OK_AND_ASSIGN(const size_t max_bytes, MaxEncodedBytes(options, n));
        ASSERT_LE(frame.size(), max_bytes);
        if (!(options.kind == CodecKind::kLz4 || options.kind == CodecKind::kZstd)) {
          ASSERT_EQ(frame.size(), max_bytes);
        }
        LOOM_ASSERT_OK_AND_ASSIGN(EncodedInfo info, InspectEncodedTensor(frame));
        EXPECT_EQ(info.kind, options.kind);
        EXPECT_EQ(info.count, n);
        EXPECT_EQ(info.encoded_bytes, frame.size());
        EXPECT_EQ(info.payload_bytes, frame.size() - kEncodedHeaderBytes);
        EXPECT_EQ(info.payload_crc32c, Crc32c(absl::MakeConstSpan(frame).subspan(64)));
        std::vector<float> y(n, -7.0f);
        LOOM_ASSERT_OK(DecodeTensor(frame, absl::MakeSpan(y)));
        ExpectDecoded(options, x, y);
        LOOM_ASSERT_OK_AND_ASSIGN(std::vector<float> z, DecodeTensor(frame));
        ASSERT_TRUE(std::equal(y.begin(), y.end(), z.begin(), z.end(),
                               [](float a, float b) { return Bits(a) == Bits(b); }));
      }
    }
  }
}

TEST(RoundTripTest, InspectFields) {
  CodecOptions o = Options(CodecKind::kInt8Blockwise);
  o.block_size = 64;
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> frame, EncodeTensor(o, Weights(1000, 2)));
  // The header alone is enough.
  LOOM_ASSERT_OK_AND_ASSIGN(EncodedInfo info,
                            InspectEncodedTensor(absl::MakeConstSpan(frame).first(64)));
  EXPECT_EQ(info.kind, CodecKind::kInt8Blockwise);
  EXPECT_EQ(info.count, 1000u);
  EXPECT_EQ(info.block_size, 64u);
  EXPECT_FALSE(info.byte_shuffle);
  EXPECT_EQ(info.payload_bytes, 1000u + 4u * 16u);
  EXPECT_EQ(info.encoded_bytes, 64u + 1064u);

  LOOM_ASSERT_OK_AND_ASSIGN(frame, EncodeTensor(Options(CodecKind::kZstd), Weights(70000, 3)));
  LOOM_ASSERT_OK_AND_ASSIGN(info, InspectEncodedTensor(frame));
  EXPECT_EQ(info.block_size, 65536u);
  EXPECT_TRUE(info.byte_shuffle);
}

TEST(RoundTripTest, LosslessCompressesStructuredData) {
  const std::vector<float> x = Bf16Weights(200000, 4);
  for (CodecKind kind : {CodecKind::kLz4, CodecKind::kZstd}) {
    for (bool shuffle : {false, true}) {
      CodecOptions o = Options(kind);
      o.byte_shuffle = shuffle;
      LOOM_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> frame, EncodeTensor(o, x));
      // Half of every float is zero bytes.
      EXPECT_LT(frame.size(), 4 * x.size() * 3 / 4) << Describe(o);
    }
  }
}

TEST(RoundTripTest, IncompressibleDataIsStoredNotExpanded) {
  std::mt19937 rng(5);
  std::vector<float> x(200000);
  for (float& v : x) v = FromBits(rng());  // Random bits: NaNs included.
  for (CodecKind kind : {CodecKind::kLz4, CodecKind::kZstd}) {
    LOOM_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> frame, EncodeTensor(Options(kind), x));
    EXPECT_EQ(frame.size(), 64 + 4 * 4 + 4 * x.size());  // Every chunk stored raw.
    LOOM_ASSERT_OK_AND_ASSIGN(std::vector<float> y, DecodeTensor(frame));
    ASSERT_EQ(0, std::memcmp(x.data(), y.data(), 4 * x.size()));
  }
}

// Frames at odd addresses (inside a larger buffer, say) encode and decode the same.
TEST(RoundTripTest, MisalignedBuffers) {
  const std::vector<float> x = Weights(20000, 6);
  for (const CodecOptions& options : AllConfigurations()) {
    LOOM_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> aligned, EncodeTensor(options, x));
    LOOM_ASSERT_OK_AND_ASSIGN(const size_t max_bytes, MaxEncodedBytes(options, x.size()));
    std::vector<std::byte> buffer(max_bytes + 1);
    LOOM_ASSERT_OK_AND_ASSIGN(const size_t bytes,
                              EncodeTensor(options, x, absl::MakeSpan(buffer).subspan(1)));
    const auto frame = absl::MakeConstSpan(buffer).subspan(1, bytes);
    ASSERT_TRUE(std::equal(frame.begin(), frame.end(), aligned.begin(), aligned.end()))
        << Describe(options);
    std::vector<float> y(x.size());
    LOOM_ASSERT_OK(DecodeTensor(frame, absl::MakeSpan(y)));
    ExpectDecoded(options, x, y);
  }
}

TEST(RoundTripTest, ConcurrentThreads) {
  std::vector<std::thread> threads;
  std::vector<int> ok(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([t, &ok] {
      CodecOptions o = Options(t % 2 == 0 ? CodecKind::kZstd : CodecKind::kLz4);
      o.zstd_level = 1 + t;
      const std::vector<float> x = Bf16Weights(150000 + 1000 * t, 100 + t);
      for (int rep = 0; rep < 3; ++rep) {
        auto frame = EncodeTensor(o, x);
        if (!frame.ok()) return;
        auto y = DecodeTensor(*frame);
        if (!y.ok() || std::memcmp(y->data(), x.data(), 4 * x.size()) != 0) return;
      }
      ok[t] = 1;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_THAT(ok, ::testing::Each(1));
}

// --------------------------------------------------------------------------- special values

std::vector<float> SpecialValues() {
  return {0.0f,
          -0.0f,
          kInf,
          -kInf,
          kNaN,
          -kNaN,
          FromBits(0x7F800001u),  // Signalling NaN, payload 1.
          FromBits(0xFFC12345u),  // Negative quiet NaN with a payload.
          std::numeric_limits<float>::denorm_min(),
          -1.0e-40f,  // f32 subnormal.
          FLT_MIN,
          5.96e-8f,   // About the smallest f16 subnormal.
          -3.0e-5f,   // f16 subnormal range.
          6.1e-5f,    // Near the smallest f16 normal.
          65504.0f,   // Largest f16.
          -65519.0f,  // Rounds to -65504 in f16.
          1.0f,
          1.00390625f,  // bf16 tie, to even.
          FLT_MAX,
          -FLT_MAX};
}

TEST(SpecialValuesTest, LosslessAndRawAreBitwise) {
  const std::vector<float> x = SpecialValues();
  for (CodecKind kind : {CodecKind::kRaw, CodecKind::kLz4, CodecKind::kZstd}) {
    for (bool shuffle : {false, true}) {
      CodecOptions o = Options(kind);
      o.byte_shuffle = shuffle;
      LOOM_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> frame, EncodeTensor(o, x));
      LOOM_ASSERT_OK_AND_ASSIGN(std::vector<float> y, DecodeTensor(frame));
      for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(Bits(x[i]), Bits(y[i])) << i;
    }
  }
}

TEST(SpecialValuesTest, HalfFormatsFollowCore) {
  // fp16: no finite value here reaches 65520, so all encode; the result is core's.
  std::vector<float> x = SpecialValues();
  x.resize(x.size() - 2);  // Drop ±FLT_MAX (fp16 overflow, tested below).
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> frame,
                            EncodeTensor(Options(CodecKind::kFp16), x));
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<float> y, DecodeTensor(frame));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(Bits(y[i]), Bits(ToFloat(ToFloat16(x[i])))) << i;
  EXPECT_EQ(Bits(y[1]), 0x80000000u);  // -0.0 kept.
  EXPECT_EQ(y[2], kInf);
  EXPECT_EQ(y[3], -kInf);
  EXPECT_TRUE(std::isnan(y[4]) && std::isnan(y[6]) && std::isnan(y[7]));
  EXPECT_TRUE(std::signbit(y[7]));
  EXPECT_EQ(Bits(y[9]), 0x80000000u);  // f32 subnormal -> -0 in f16.
  EXPECT_EQ(y[15], -65504.0f);

  // bf16: FLT_MAX rounds to infinity as well (tested below).
  LOOM_ASSERT_OK_AND_ASSIGN(frame, EncodeTensor(Options(CodecKind::kBf16), x));
  LOOM_ASSERT_OK_AND_ASSIGN(y, DecodeTensor(frame));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(Bits(y[i]), Bits(ToFloat(ToBFloat16(x[i])))) << i;
  EXPECT_EQ(Bits(y[6]), 0x7FC00000u);  // Signalling NaN quieted, payload's top bits kept.
  EXPECT_EQ(Bits(y[7]), 0xFFC10000u);
}

TEST(SpecialValuesTest, Fp16OverflowIsAnErrorByDefault) {
  std::vector<float> x(20000, 1.0f);
  x[12345] = 65520.0f;  // The first value that rounds to infinity.
  x[15000] = -1.0e6f;
  EXPECT_THAT(EncodeTensor(Options(CodecKind::kFp16), x),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("element 12345 is 65520"), HasSubstr("fp16"),
                             HasSubstr("65504"), HasSubstr("kSaturate"))));
  x[12345] = 65519.99f;  // Still rounds to 65504.
  EXPECT_THAT(EncodeTensor(Options(CodecKind::kFp16), x),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("element 15000 is -1000000")));
}

TEST(SpecialValuesTest, Fp16SaturateClampsFiniteValuesOnly) {
  std::vector<float> x = {1.0f, 65520.0f, -1.0e6f, kInf, -kInf, 65519.0f, FLT_MAX, kNaN};
  CodecOptions o = Options(CodecKind::kFp16);
  o.overflow = OverflowPolicy::kSaturate;
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> frame, EncodeTensor(o, x));
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<float> y, DecodeTensor(frame));
  EXPECT_THAT(absl::MakeSpan(y).first(7),
              ::testing::ElementsAre(1.0f, 65504.0f, -65504.0f, kInf, -kInf, 65504.0f, 65504.0f));
  EXPECT_TRUE(std::isnan(y[7]));
}

TEST(SpecialValuesTest, Bf16Overflow) {
  const float max_bf16 = ToFloat(BFloat16{0x7F7F});
  std::vector<float> x = {1.0f, max_bf16, FromBits(0x7F7F7FFFu), -FLT_MAX};
  EXPECT_THAT(EncodeTensor(Options(CodecKind::kBf16), x),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("element 3 is -3.40282347e+38"), HasSubstr("bf16"))));
  CodecOptions o = Options(CodecKind::kBf16);
  o.overflow = OverflowPolicy::kSaturate;
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> frame, EncodeTensor(o, x));
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<float> y, DecodeTensor(frame));
  EXPECT_THAT(y, ::testing::ElementsAre(1.0f, max_bf16, max_bf16, -max_bf16));
}

TEST(SpecialValuesTest, Int8RejectsNonFiniteNamingTheIndex) {
  std::vector<float> x = Weights(5000, 8);
  x[4321] = kNaN;
  EXPECT_THAT(EncodeTensor(Options(CodecKind::kInt8Blockwise), x),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("element 4321 is nan"), HasSubstr("finite values only"))));
  x[4321] = 0.0f;
  x[17] = -kInf;
  EXPECT_THAT(EncodeTensor(Options(CodecKind::kInt8Blockwise), x),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("element 17 is -inf")));
}

TEST(SpecialValuesTest, Int8ZerosAndSubnormals) {
  std::vector<float> x(96, -0.0f);               // Block 0: negative zeros.
  for (size_t i = 32; i < 64; ++i) x[i] = 0.0f;  // Block 1: zeros.
  for (size_t i = 64; i < 96; ++i)
    x[i] = std::numeric_limits<float>::denorm_min() * static_cast<float>(i);
  CodecOptions o = Options(CodecKind::kInt8Blockwise);
  o.block_size = 32;
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> frame, EncodeTensor(o, x));
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<float> y, DecodeTensor(frame));
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(Bits(y[i]), 0u) << i;  // +0.0 exactly.
  ExpectDecoded(o, x, y);
}

// ------------------------------------------------------------------------------ corruption

// Header layout (README.md): offsets of the fields the tests forge.
constexpr size_t kVersionAt = 4;
constexpr size_t kCodecAt = 6;
constexpr size_t kFlagsAt = 7;
constexpr size_t kCountAt = 8;
constexpr size_t kPayloadBytesAt = 16;
constexpr size_t kBlockSizeAt = 24;
constexpr size_t kPayloadCrcAt = 28;
constexpr size_t kHeaderCrcAt = 60;

template <typename T>
void Poke(std::vector<std::byte>& frame, size_t at, T value) {
  std::memcpy(frame.data() + at, &value, sizeof(T));
}

// Reseal recomputes both checksums, as a forger (or a buggy writer) would.
void Reseal(std::vector<std::byte>& frame) {
  Poke<uint32_t>(frame, kPayloadCrcAt, Crc32c(absl::MakeConstSpan(frame).subspan(64)));
  Poke<uint32_t>(frame, kHeaderCrcAt, Crc32c(absl::MakeConstSpan(frame).first(60)));
}

std::vector<std::byte> Frame(CodecKind kind, size_t n = 1000) {
  auto frame = EncodeTensor(Options(kind), Bf16Weights(n, 9));
  EXPECT_TRUE(frame.ok()) << frame.status();
  return *std::move(frame);
}

TEST(CorruptionTest, FlippedPayloadByteIsDataLoss) {
  for (CodecKind kind : AllCodecKinds()) {
    const std::vector<std::byte> good = Frame(kind, 100000);
    for (size_t at : {size_t{64}, size_t{65}, good.size() / 2, good.size() - 1}) {
      std::vector<std::byte> bad = good;
      bad[at] ^= std::byte{0x10};
      std::vector<float> y(100000);
      EXPECT_THAT(
          DecodeTensor(bad, absl::MakeSpan(y)),
          StatusIs(absl::StatusCode::kDataLoss,
                   AllOf(HasSubstr("payload checksum mismatch"), HasSubstr("header has 0x"))))
          << CodecKindName(kind) << " byte " << at;
    }
  }
}

TEST(CorruptionTest, TruncatedOrPaddedIsDataLoss) {
  for (CodecKind kind : AllCodecKinds()) {
    const std::vector<std::byte> good = Frame(kind);
    std::vector<float> y(1000);
    const auto frame = absl::MakeConstSpan(good);
    EXPECT_THAT(DecodeTensor(frame.first(good.size() - 1), absl::MakeSpan(y)),
                StatusIs(absl::StatusCode::kDataLoss,
                         AllOf(HasSubstr("truncated frame"),
                               HasSubstr(absl::StrCat("= ", good.size(), " bytes")),
                               HasSubstr(absl::StrCat("buffer has ", good.size() - 1)))));
    EXPECT_THAT(DecodeTensor(frame.first(70), absl::MakeSpan(y)),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated frame")));
    EXPECT_THAT(DecodeTensor(frame.first(63), absl::MakeSpan(y)),
                StatusIs(absl::StatusCode::kDataLoss,
                         HasSubstr("63 bytes, shorter than the 64-byte header")));
    EXPECT_THAT(InspectEncodedTensor(frame.first(0)),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated frame: 0 bytes")));
    EXPECT_THAT(DecodeTensor(frame.first(good.size() - 1)),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated frame")));
    std::vector<std::byte> padded = good;
    padded.push_back(std::byte{0});
    EXPECT_THAT(DecodeTensor(padded, absl::MakeSpan(y)),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("1 trailing bytes")));
  }
}

TEST(CorruptionTest, BadMagicVersionAndHeaderChecksum) {
  std::vector<float> y(1000);
  std::vector<std::byte> bad = Frame(CodecKind::kFp16);
  bad[0] = std::byte{'X'};
  EXPECT_THAT(DecodeTensor(bad, absl::MakeSpan(y)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("bad magic \"XMCD\" (expected \"LMCD\"): not an encoded tensor")));
  bad = Frame(CodecKind::kFp16);
  Poke<uint16_t>(bad, kVersionAt, 2);
  EXPECT_THAT(DecodeTensor(bad, absl::MakeSpan(y)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("unsupported format version 2 (this build reads 1)")));
  EXPECT_THAT(InspectEncodedTensor(bad),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("unsupported format version 2")));
  // Any other header byte: the header checksum.
  for (size_t at : {kCodecAt, kFlagsAt, kCountAt, kPayloadBytesAt + 1, kBlockSizeAt, kPayloadCrcAt,
                    size_t{40}, kHeaderCrcAt + 3}) {
    bad = Frame(CodecKind::kFp16);
    bad[at] ^= std::byte{0x01};
    EXPECT_THAT(DecodeTensor(bad, absl::MakeSpan(y)),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("header checksum mismatch")))
        << "byte " << at;
  }
}

// Headers with valid checksums but impossible fields: the decoder must refuse them
// before they steer it out of bounds.
TEST(CorruptionTest, ForgedHeaderFields) {
  std::vector<float> y(1000);
  auto expect_forged = [&](CodecKind kind, auto edit, const std::string& message) {
    std::vector<std::byte> bad = Frame(kind);
    edit(bad);
    Reseal(bad);
    EXPECT_THAT(DecodeTensor(bad, absl::MakeSpan(y)),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr(message)))
        << message;
  };
  expect_forged(
      CodecKind::kRaw, [](auto& f) { Poke<uint8_t>(f, kCodecAt, 6); }, "unknown codec id 6");
  expect_forged(
      CodecKind::kRaw, [](auto& f) { Poke<uint8_t>(f, kFlagsAt, 1); }, "unknown flags 0x1 for raw");
  expect_forged(
      CodecKind::kZstd, [](auto& f) { Poke<uint8_t>(f, kFlagsAt, 3); },
      "unknown flags 0x2 for zstd");
  expect_forged(
      CodecKind::kRaw, [](auto& f) { Poke<uint8_t>(f, 33, 1); },
      "reserved header byte 33 is not zero");
  expect_forged(
      CodecKind::kInt8Blockwise, [](auto& f) { Poke<uint32_t>(f, kBlockSizeAt, 48); },
      "block size 48 is invalid for int8_blockwise");
  expect_forged(
      CodecKind::kFp16, [](auto& f) { Poke<uint32_t>(f, kBlockSizeAt, 256); },
      "block size 256 is invalid for fp16");
  expect_forged(
      CodecKind::kLz4, [](auto& f) { Poke<uint32_t>(f, kBlockSizeAt, 0); },
      "block size 0 is invalid for lz4");
  expect_forged(
      CodecKind::kFp16, [](auto& f) { Poke<uint64_t>(f, kCountAt, 999); },
      "payload size 2000 does not match 999 elements of fp16 (expected 1998)");
  expect_forged(
      CodecKind::kRaw, [](auto& f) { Poke<uint64_t>(f, kCountAt, uint64_t{1} << 61); },
      "element count 2305843009213693952 is too large");
  expect_forged(
      CodecKind::kZstd, [](auto& f) { Poke<uint64_t>(f, kCountAt, 10); },
      "is outside [4, 44] for 10 elements of zstd");
}

TEST(CorruptionTest, ForgedChunkTable) {
  std::vector<float> y(1000);
  // The table entry claims one more byte than the chunk has (and the last byte of the
  // payload is dropped to keep the total consistent... so the sum check fires).
  std::vector<std::byte> bad = Frame(CodecKind::kLz4);
  uint32_t entry;
  std::memcpy(&entry, bad.data() + 64, 4);
  ASSERT_EQ(entry & 0x80000000u, 0u) << "expected a compressed chunk";
  Poke<uint32_t>(bad, 64, entry + 1);
  Reseal(bad);
  EXPECT_THAT(DecodeTensor(bad, absl::MakeSpan(y)),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("lz4 chunk table adds up to")));
  // A stored chunk must have exactly its raw size.
  bad = Frame(CodecKind::kLz4);
  Poke<uint32_t>(bad, 64, 0x80000000u | 3999u);
  Reseal(bad);
  EXPECT_THAT(DecodeTensor(bad, absl::MakeSpan(y)),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("chunk 0 of 1 of the lz4 payload has size entry 0x80000f9f, "
                                 "invalid for a chunk of 4000 bytes")));
}

TEST(CorruptionTest, ForgedChunkThatDoesNotDecompress) {
  for (CodecKind kind : {CodecKind::kLz4, CodecKind::kZstd}) {
    std::vector<float> y(1000);
    std::vector<std::byte> bad = Frame(kind);
    for (size_t i = 68 + 8; i < bad.size(); ++i) bad[i] = std::byte{0xEE};
    Reseal(bad);
    EXPECT_THAT(DecodeTensor(bad, absl::MakeSpan(y)),
                StatusIs(absl::StatusCode::kDataLoss,
                         AllOf(HasSubstr("chunk 0 of 1"),
                               HasSubstr("does not decompress to its 4000 bytes"))))
        << CodecKindName(kind);
  }
}

TEST(DecodeTest, WrongOutputSizeIsInvalidArgument) {
  for (CodecKind kind : AllCodecKinds()) {
    const std::vector<std::byte> frame = Frame(kind);
    std::vector<float> y(999);
    EXPECT_THAT(DecodeTensor(frame, absl::MakeSpan(y)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("the frame holds 1000 elements but output has 999")));
  }
}

}  // namespace
}  // namespace loom
