#include "core/half_convert.h"

#include <xmmintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/float_bits_testing.h"
#include "core/half.h"
#include "core/internal/half_convert.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using testing_internal::BitsToFloat;
using testing_internal::FloatBits;
using testing_internal::Mismatches;

namespace hci = half_convert_internal;
using ::testing::HasSubstr;

using hci::Kernel;
using hci::Kernels;

const Kernels& kScalarKernels = hci::KernelsFor(CpuIsa::kScalar);

// A Path is what a test holds up against the scalar kernels: a vector ISA's kernels
// called directly, or (no isa) the public functions with their run-time dispatch.
struct Path {
  std::optional<CpuIsa> isa;
};

std::string PathName(Path path) {
  return path.isa.has_value() ? std::string(CpuIsaName(*path.isa)) : "PublicDispatch";
}

void PrintTo(Path path, std::ostream* os) { *os << PathName(path); }

std::vector<Path> VectorIsasAndPublicDispatch() {
  std::vector<Path> paths;
  for (const CpuIsa isa : AllCpuIsas()) {
    if (isa != CpuIsa::kScalar) paths.push_back({isa});
  }
  paths.push_back({std::nullopt});
  return paths;
}

Kernels KernelsFor(Path path) {
  if (path.isa.has_value()) return hci::KernelsFor(*path.isa);
  return {
      [](absl::Span<const float> src, absl::Span<BFloat16> dst) {
        LOOM_EXPECT_OK(ConvertF32ToBF16(src, dst));
      },
      [](absl::Span<const BFloat16> src, absl::Span<float> dst) {
        LOOM_EXPECT_OK(ConvertBF16ToF32(src, dst));
      },
      [](absl::Span<const float> src, absl::Span<Float16> dst) {
        LOOM_EXPECT_OK(ConvertF32ToF16(src, dst));
      },
      [](absl::Span<const Float16> src, absl::Span<float> dst) {
        LOOM_EXPECT_OK(ConvertF16ToF32(src, dst));
      },
  };
}

template <typename T>
uint32_t RawBits(T value) {
  static_assert(sizeof(T) <= sizeof(uint32_t), "RawBits reads 16- and 32-bit types");
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  return bits;
}

// Every 16-bit pattern, in order.
template <typename Half>
std::vector<Half> AllHalfPatterns() {
  std::vector<Half> patterns(0x10000);
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) patterns[bits].bits = static_cast<uint16_t>(bits);
  return patterns;
}

// NarrowingInputs returns the f32 inputs for narrowing, edge cases first so that the
// short spans of the tail tests see them: hand-picked edges; for every 16-bit pattern,
// the f32 it widens to as bf16 and as f16, with the bf16 and f16 rounding ties above it
// and their neighbours; then seeded random patterns, uniform over all 32 bits and
// log-uniform over the f16 range.
std::vector<float> NarrowingInputs() {
  std::vector<uint32_t> bits = {
      // ±0 and ±Inf.
      0x00000000, 0x80000000, 0x7F800000, 0xFF800000,
      // Quiet NaNs, then signalling NaNs with payloads that f16 and bf16 keep or drop.
      0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001, 0xFF800001, 0x7FA00000,
      0x7F802000, 0xFFBFE000, 0x7F810000,
      // 65504 (the largest f16), 65519.99, and 65520 (-> f16 Inf).
      0x477FE000, 0x477FEFFD, 0x477FF000,
      // 2^-24 (the smallest f16 subnormal), ±2^-25 (-> ±0), 3 * 2^-26 (-> 2^-24),
      // 1023 * 2^-24 (the largest f16 subnormal), 2^-14 (the smallest f16 normal).
      0x33800000, 0x33000000, 0xB3000000, 0x33400000, 0x387FC000, 0x38800000,
      // ±f32 max, then f32 subnormals.
      0x7F7FFFFF, 0xFF7FFFFF, 0x00000001, 0x80000001, 0x00008000, 0x00018000, 0x007FFFFF,
      0x807FFFFF,
      // bf16 ties: 1.00390625, 1.01171875, just above the first, and at bf16 max.
      0x3F808000, 0x3F818000, 0x3F808001, 0x7F7F8000};
  for (uint32_t pattern = 0; pattern <= 0xFFFF; ++pattern) {
    const uint32_t from_bf16 = pattern << 16;
    bits.insert(bits.end(),
                {from_bf16, from_bf16 | 0x7FFF, from_bf16 | 0x8000, from_bf16 | 0x8001});
    const uint32_t from_f16 = RawBits(ToFloat(Float16{static_cast<uint16_t>(pattern)}));
    bits.insert(bits.end(), {from_f16, from_f16 + 0x0FFF, from_f16 + 0x1000, from_f16 + 0x1001});
  }
  std::mt19937 rng(2024);
  std::uniform_int_distribution<uint32_t> any_bits;
  std::uniform_int_distribution<uint32_t> near_f16_exponent(127 - 27, 127 + 17);
  for (int i = 0; i < 3'000'000; ++i) bits.push_back(any_bits(rng));
  for (int i = 0; i < 1'000'000; ++i) {
    bits.push_back((any_bits(rng) & 0x807FFFFF) | near_f16_exponent(rng) << 23);
  }
  std::vector<float> values(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) values[i] = BitsToFloat(bits[i]);
  return values;
}

// Dst elements on each side of the output span, which a kernel must leave untouched.
constexpr size_t kGuard = 40;
constexpr unsigned char kGuardByte = 0xA5;

// ExpectBitwiseEqual runs `kernel` and `scalar` on inputs[start, start + length): the
// kernel reads it from a 64-byte-aligned copy at element `offset` (so offset 1 starts
// unaligned) and writes between guard elements, which must keep their bytes.
template <typename Src, typename Dst>
void ExpectBitwiseEqual(Kernel<Src, Dst> kernel, Kernel<Src, Dst> scalar,
                        absl::Span<const Src> inputs, size_t start, size_t length, size_t offset) {
  SCOPED_TRACE(absl::StrCat("start ", start, ", length ", length, ", offset ", offset));
  ASSERT_LE(start + length, inputs.size());
  const absl::Span<const Src> window = inputs.subspan(start, length);
  std::vector<Dst> expected(length);
  scalar(window, absl::MakeSpan(expected));

  LOOM_ASSERT_OK_AND_ASSIGN(AlignedBuffer<Src> src, AlignedBuffer<Src>::Create(offset + length));
  if (length > 0) std::memcpy(src.data() + offset, window.data(), length * sizeof(Src));
  LOOM_ASSERT_OK_AND_ASSIGN(AlignedBuffer<Dst> dst,
                            AlignedBuffer<Dst>::Create(kGuard + offset + length + kGuard));
  std::memset(static_cast<void*>(dst.data()), kGuardByte, dst.size_bytes());
  kernel(src.span().subspan(offset, length), dst.span().subspan(kGuard + offset, length));

  Mismatches mismatches;
  for (size_t i = 0; i < length; ++i) {
    const uint32_t actual = RawBits(dst[kGuard + offset + i]);
    if (actual != RawBits(expected[i])) {
      mismatches.Add(absl::StrCat("input 0x", absl::Hex(RawBits(window[i])), " gave 0x",
                                  absl::Hex(actual), ", scalar 0x",
                                  absl::Hex(RawBits(expected[i]))));
    }
  }
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(dst.data());
  const size_t span_begin = (kGuard + offset) * sizeof(Dst);
  const size_t span_end = span_begin + length * sizeof(Dst);
  for (size_t byte = 0; byte < dst.size_bytes(); ++byte) {
    if ((byte < span_begin || byte >= span_end) && bytes[byte] != kGuardByte) {
      mismatches.Add(absl::StrCat("wrote guard byte ", byte));
    }
  }
  EXPECT_EQ(mismatches.count(), 0) << mismatches.examples();
}

// ExpectBitwiseEqualEverywhere compares `kernel` with the scalar path over all of
// `inputs` (aligned and not), and over short and odd spans that end in every possible
// tail length.
template <typename Src, typename Dst>
void ExpectBitwiseEqualEverywhere(Kernel<Src, Dst> kernel, Kernel<Src, Dst> scalar,
                                  absl::Span<const Src> inputs) {
  for (const size_t offset : {0, 1}) {
    ExpectBitwiseEqual(kernel, scalar, inputs, 0, inputs.size() - offset, offset);
    for (size_t length = 0; length <= 48; ++length) {
      ExpectBitwiseEqual(kernel, scalar, inputs, offset, length, offset);
    }
    for (const size_t length : {1001, 4099}) {
      ExpectBitwiseEqual(kernel, scalar, inputs, offset, length, offset);
    }
  }
}

class HalfConvertPathTest : public ::testing::TestWithParam<Path> {
 protected:
  void SetUp() override {
    const std::optional<CpuIsa> isa = GetParam().isa;
    if (isa.has_value() && !hci::IsaSupported(*isa)) {
      GTEST_SKIP() << "this CPU cannot run the " << CpuIsaName(*isa) << " kernels";
    }
  }

  static void SetUpTestSuite() {
    narrowing_inputs_ = std::make_unique<std::vector<float>>(NarrowingInputs());
  }
  static void TearDownTestSuite() { narrowing_inputs_.reset(); }

  static absl::Span<const float> narrowing_inputs() { return *narrowing_inputs_; }

 private:
  // Built once for the suite: the narrowing tests share a few million inputs.
  static std::unique_ptr<std::vector<float>> narrowing_inputs_;
};

std::unique_ptr<std::vector<float>> HalfConvertPathTest::narrowing_inputs_;

TEST_P(HalfConvertPathTest, BF16ToF32MatchesScalarForEveryPattern) {
  const std::vector<BFloat16> patterns = AllHalfPatterns<BFloat16>();
  ExpectBitwiseEqualEverywhere(KernelsFor(GetParam()).bf16_to_f32, kScalarKernels.bf16_to_f32,
                               absl::Span<const BFloat16>(patterns));
}

TEST_P(HalfConvertPathTest, F16ToF32MatchesScalarForEveryPattern) {
  const std::vector<Float16> patterns = AllHalfPatterns<Float16>();
  ExpectBitwiseEqualEverywhere(KernelsFor(GetParam()).f16_to_f32, kScalarKernels.f16_to_f32,
                               absl::Span<const Float16>(patterns));
}

TEST_P(HalfConvertPathTest, F32ToBF16MatchesScalar) {
  ExpectBitwiseEqualEverywhere(KernelsFor(GetParam()).f32_to_bf16, kScalarKernels.f32_to_bf16,
                               narrowing_inputs());
}

TEST_P(HalfConvertPathTest, F32ToF16MatchesScalar) {
  ExpectBitwiseEqualEverywhere(KernelsFor(GetParam()).f32_to_f16, kScalarKernels.f32_to_f16,
                               narrowing_inputs());
}

// MxcsrOverride sets MXCSR for its lifetime, as code built with -ffast-math (which sets
// FTZ and DAZ at startup) or a caller that changed the rounding mode would.
class MxcsrOverride {
 public:
  explicit MxcsrOverride(unsigned int mxcsr) : saved_(_mm_getcsr()) { _mm_setcsr(mxcsr); }
  ~MxcsrOverride() { _mm_setcsr(saved_); }
  MxcsrOverride(const MxcsrOverride&) = delete;
  MxcsrOverride& operator=(const MxcsrOverride&) = delete;

 private:
  const unsigned int saved_;
};

TEST_P(HalfConvertPathTest, IgnoresMxcsrFlushAndRoundingModes) {
  // All exceptions masked, flush-to-zero, denormals-are-zero, round toward zero.
  constexpr unsigned int kFastMathTowardZero = 0x1F80 | 0x8000 | 0x0040 | 0x6000;
  const std::vector<BFloat16> bf16 = AllHalfPatterns<BFloat16>();
  const std::vector<Float16> f16 = AllHalfPatterns<Float16>();
  const Kernels kernels = KernelsFor(GetParam());
  const MxcsrOverride mxcsr(kFastMathTowardZero);
  ExpectBitwiseEqual(kernels.bf16_to_f32, kScalarKernels.bf16_to_f32,
                     absl::Span<const BFloat16>(bf16), 0, bf16.size(), 0);
  ExpectBitwiseEqual(kernels.f16_to_f32, kScalarKernels.f16_to_f32, absl::Span<const Float16>(f16),
                     0, f16.size(), 0);
  ExpectBitwiseEqual(kernels.f32_to_bf16, kScalarKernels.f32_to_bf16, narrowing_inputs(), 0,
                     narrowing_inputs().size(), 0);
  ExpectBitwiseEqual(kernels.f32_to_f16, kScalarKernels.f32_to_f16, narrowing_inputs(), 0,
                     narrowing_inputs().size(), 0);
}

INSTANTIATE_TEST_SUITE_P(Paths, HalfConvertPathTest,
                         ::testing::ValuesIn(VectorIsasAndPublicDispatch()),
                         [](const ::testing::TestParamInfo<Path>& path_info) {
                           return PathName(path_info.param);
                         });

TEST(HalfConvertTest, ActiveIsaIsTheFastestSupported) {
  const CpuIsa active = hci::ActiveIsa();
  EXPECT_TRUE(hci::IsaSupported(active));
  EXPECT_TRUE(hci::IsaSupported(CpuIsa::kScalar));
  for (const CpuIsa isa : AllCpuIsas()) {
    SCOPED_TRACE(CpuIsaName(isa));
    if (isa > active) {
      EXPECT_FALSE(hci::IsaSupported(isa));
    }
    // Highway's targets may need more than CpuSupports checks (AVX3: VL, DQ), never less.
    if (hci::IsaSupported(isa)) {
      EXPECT_TRUE(CpuSupports(isa));
    }
  }
}

TEST(HalfConvertTest, ConvertsTheHeaderExample) {
  const std::vector<float> grads = {1.0f, 1.00390625f, 65520.0f};
  std::vector<BFloat16> packed(grads.size());
  LOOM_ASSERT_OK(ConvertF32ToBF16(grads, absl::MakeSpan(packed)));
  EXPECT_THAT(packed, ::testing::ElementsAre(BFloat16{0x3F80}, BFloat16{0x3F80}, BFloat16{0x4780}));
  std::vector<Float16> halves(grads.size());
  LOOM_ASSERT_OK(ConvertF32ToF16(grads, absl::MakeSpan(halves)));
  EXPECT_THAT(halves, ::testing::ElementsAre(Float16{0x3C00}, Float16{0x3C04}, Float16{0x7C00}));
}

TEST(HalfConvertTest, SizeMismatchIsInvalidArgumentAndWritesNothing) {
  const std::vector<float> f32(3, 1.0f);
  std::vector<float> f32_out(4, 7.0f);
  std::vector<BFloat16> bf16(4, BFloat16{0x1234});
  std::vector<Float16> f16(2, Float16{0x1234});

  EXPECT_THAT(ConvertF32ToBF16(f32, absl::MakeSpan(bf16)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ConvertF32ToBF16: src has 3 elements but dst has 4")));
  EXPECT_THAT(ConvertBF16ToF32(bf16, absl::MakeSpan(f32_out).first(3)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ConvertBF16ToF32: src has 4 elements but dst has 3")));
  EXPECT_THAT(ConvertF32ToF16(f32, absl::MakeSpan(f16)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ConvertF32ToF16: src has 3 elements but dst has 2")));
  EXPECT_THAT(ConvertF16ToF32(f16, absl::MakeSpan(f32_out)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ConvertF16ToF32: src has 2 elements but dst has 4")));

  EXPECT_THAT(bf16, ::testing::Each(BFloat16{0x1234}));
  EXPECT_THAT(f16, ::testing::Each(Float16{0x1234}));
  EXPECT_THAT(f32_out, ::testing::Each(7.0f));
}

}  // namespace
}  // namespace loom
