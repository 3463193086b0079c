#include "collectives/reduce/reduce_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "collectives/reduce/internal/reduce_kernels.h"
#include "core/aligned_buffer.h"
#include "core/buffer_view.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/reduce_op.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace reduce_internal {

void PrintTo(Isa isa, std::ostream* os) { *os << IsaName(isa); }

}  // namespace reduce_internal

namespace {

namespace ri = reduce_internal;
using ri::Isa;
using ::testing::AllOf;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------------
// Element bits, and an exact decoding of every floating-point type that does not use
// the code under test or core/half.h.

template <typename T>
uint64_t Bits(T value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  return bits;
}

template <typename T>
T FromBits(uint64_t bits) {
  T value{};
  std::memcpy(static_cast<void*>(&value), &bits, sizeof(T));
  return value;
}

template <typename T>
constexpr bool kIsHalf = std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;
template <typename T>
constexpr bool kIsFloat = std::is_floating_point_v<T> || kIsHalf<T>;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Decode returns the exact value of a floating-point element (NaN for any NaN).
template <typename T>
double Decode(T value) {
  if constexpr (std::is_same_v<T, Float16>) {
    const int exponent = (value.bits >> 10) & 0x1F;
    const int mantissa = value.bits & 0x3FF;
    double magnitude;
    if (exponent == 0x1F) {
      magnitude = mantissa == 0 ? kInf : kNaN;
    } else if (exponent == 0) {
      magnitude = std::ldexp(mantissa, -24);
    } else {
      magnitude = std::ldexp(mantissa + 1024, exponent - 25);
    }
    return (value.bits & 0x8000) != 0 ? -magnitude : magnitude;
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return static_cast<double>(FromBits<float>(uint64_t{value.bits} << 16));
  } else {
    return static_cast<double>(value);
  }
}

// The 16-bit formats: significand bits after the point, smallest normal exponent, and
// largest finite value.
struct HalfFormat {
  int mantissa_bits;
  int min_exponent;
  double max_finite;
};

template <typename T>
HalfFormat FormatOf() {
  if constexpr (std::is_same_v<T, Float16>) {
    return {10, -14, 65504.0};
  } else {
    return {7, -126, std::ldexp(255.0, 120)};
  }
}

// RoundToHalf rounds a double to the nearest value of the 16-bit format T, ties to
// even, overflowing to ±Inf: the quantum at x's binade divides x exactly (a power of
// two), and nearbyint rounds to nearest even in the default rounding mode.
template <typename T>
double RoundToHalf(double x) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  const HalfFormat format = FormatOf<T>();
  const int exponent = std::max(std::ilogb(x), format.min_exponent);
  const double quantum = std::ldexp(1.0, exponent - format.mantissa_bits);
  const double rounded = std::nearbyint(x / quantum) * quantum;
  if (std::fabs(rounded) > format.max_finite) return std::copysign(kInf, x);
  return std::copysign(rounded, x);
}

// EncodeExact returns the bits of T holding `value`, which T represents exactly.
template <typename T>
uint64_t EncodeExact(double value) {
  if constexpr (std::is_same_v<T, double>) {
    return Bits(value);
  } else if constexpr (std::is_same_v<T, float>) {
    return Bits(static_cast<float>(value));
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return Bits(static_cast<float>(value)) >> 16;
  } else {
    const uint64_t sign = std::signbit(value) ? 0x8000 : 0;
    const double magnitude = std::fabs(value);
    if (std::isinf(magnitude)) return sign | 0x7C00;
    if (magnitude == 0) return sign;
    const int exponent = std::ilogb(magnitude);
    if (exponent < -14) return sign | static_cast<uint64_t>(std::ldexp(magnitude, 24));
    const uint64_t mantissa = static_cast<uint64_t>(std::ldexp(magnitude, 10 - exponent)) - 1024;
    return sign | static_cast<uint64_t>(exponent + 15) << 10 | mantissa;
  }
}

// The canonical NaN the header promises for every NaN a reduction produces.
template <typename T>
uint64_t CanonicalNaN() {
  if constexpr (std::is_same_v<T, float>) {
    return 0x7FC00000;
  } else if constexpr (std::is_same_v<T, double>) {
    return 0x7FF8000000000000;
  } else if constexpr (std::is_same_v<T, Float16>) {
    return 0x7E00;
  } else {
    return 0x7FC0;
  }
}

// QuietNaN sets the quiet bit of a NaN of type T, as a division or f32 round trip does.
template <typename T>
uint64_t QuietNaN(uint64_t bits) {
  if constexpr (std::is_same_v<T, float>) {
    return bits | 0x00400000;
  } else if constexpr (std::is_same_v<T, double>) {
    return bits | 0x0008000000000000;
  } else if constexpr (std::is_same_v<T, Float16>) {
    return bits | 0x0200;
  } else {
    return bits | 0x0040;
  }
}

// NarrowNaN: the bits of T that an f32 NaN narrows to (sign and leading payload bits
// kept, quiet bit set), as documented in core/half.h.
template <typename T>
uint64_t NarrowNaN(uint64_t f32_bits) {
  if constexpr (std::is_same_v<T, float>) {
    return f32_bits;
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return (f32_bits >> 16) | 0x0040;
  } else {
    return ((f32_bits >> 16) & 0x8000) | 0x7E00 | ((f32_bits >> 13) & 0x3FF);
  }
}

// ---------------------------------------------------------------------------------
// The reference: each result computed on its own, per element, in double or __int128.

// IEEE 754-2019 minimum / maximum: NaN if either is NaN, -0 < +0.
double ReferenceMin(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return kNaN;
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

double ReferenceMax(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return kNaN;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}

double ReferenceOp(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return a + b;
    case ReduceOp::kProd:
      return a * b;
    case ReduceOp::kMin:
      return ReferenceMin(a, b);
    case ReduceOp::kMax:
      return ReferenceMax(a, b);
  }
  return kNaN;
}

// ExpectedFloat: the bits a reduction of type T must produce, given the result of the
// operation on the (widened) inputs in double. For f32 and the 16-bit types that is the
// f32 operation correctly rounded (rounding the double result to f32 is exact for
// products of two f32 and innocuous double rounding for sums, as double carries more
// than 2 * 24 + 2 bits), then for the 16-bit types rounded to nearest even. f64 is the
// double operation itself. Every NaN is the canonical one.
template <typename T>
uint64_t ExpectedFloat(double result) {
  if (std::isnan(result)) return CanonicalNaN<T>();
  if constexpr (std::is_same_v<T, double>) {
    return Bits(result);
  } else {
    const float f32 = static_cast<float>(result);
    if constexpr (std::is_same_v<T, float>) {
      return Bits(f32);
    } else {
      return EncodeExact<T>(RoundToHalf<T>(static_cast<double>(f32)));
    }
  }
}

// ExpectedInt: integer reductions wrap modulo 2^bits.
template <typename T>
T ExpectedInt(ReduceOp op, T a, T b) {
  const __int128 x = a;
  const __int128 y = b;
  __int128 result = 0;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      result = x + y;
      break;
    case ReduceOp::kProd:
      result = x * y;
      break;
    case ReduceOp::kMin:
      result = std::min(x, y);
      break;
    case ReduceOp::kMax:
      result = std::max(x, y);
      break;
  }
  return static_cast<T>(
      static_cast<std::make_unsigned_t<T>>(static_cast<unsigned __int128>(result)));
}

template <typename T>
uint64_t ExpectedReduce(ReduceOp op, T dst, T src) {
  if constexpr (kIsFloat<T>) {
    return ExpectedFloat<T>(ReferenceOp(op, Decode(dst), Decode(src)));
  } else {
    return Bits(ExpectedInt(op, dst, src));
  }
}

// ExpectedAverage: buf[i] / num_ranks.
template <typename T>
uint64_t ExpectedAverage(T value, int64_t num_ranks) {
  if (num_ranks == 1) return Bits(value);
  if constexpr (kIsFloat<T>) {
    const double x = Decode(value);
    if (std::isnan(x)) return QuietNaN<T>(Bits(value));
    const double quotient = x / static_cast<double>(num_ranks);
    if constexpr (std::is_same_v<T, double>) {
      return Bits(quotient);
    } else {
      // An f32 quotient (double rounding is innocuous for division too), then 16 bits.
      return ExpectedFloat<T>(quotient);
    }
  } else {
    return Bits(static_cast<T>(static_cast<int64_t>(value) / num_ranks));
  }
}

// ExpectedStore: acc / divisor (skipped for 1) rounded to T.
template <typename T>
uint64_t ExpectedStore(float acc, int64_t divisor) {
  if (std::isnan(acc)) {
    const uint64_t bits = divisor == 1 ? Bits(acc) : QuietNaN<float>(Bits(acc));
    return NarrowNaN<T>(bits);
  }
  const double quotient = static_cast<double>(acc) / static_cast<double>(divisor);
  return ExpectedFloat<T>(quotient);
}

// ExpectedLoad: the exact f32 of src; NaNs keep sign and payload (f16 ones come back
// quiet, as F16C does; bf16 and f32 ones are copied).
template <typename T>
uint64_t ExpectedLoad(T src) {
  const double value = Decode(src);
  if (!std::isnan(value)) return Bits(static_cast<float>(value));
  if constexpr (std::is_same_v<T, Float16>) {
    return uint64_t{src.bits & 0x8000u} << 16 | 0x7FC00000 | uint64_t{src.bits & 0x3FFu} << 13;
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return uint64_t{src.bits} << 16;
  } else {
    return Bits(src);
  }
}

// ---------------------------------------------------------------------------------
// Inputs.

template <typename T>
std::vector<T> Specials() {
  if constexpr (std::is_same_v<T, float>) {
    std::vector<T> values;
    for (const uint32_t bits : {
             0x00000000u, 0x80000000u, 0x7F800000u, 0xFF800000u,  // ±0, ±Inf
             0x7FC00000u, 0xFFC00000u, 0x7FC12345u,               // quiet NaNs
             0x7F800001u, 0xFFA00000u,                            // signalling NaNs
             0x00000001u, 0x80000001u, 0x007FFFFFu,               // subnormals
             0x00800000u, 0x80800000u, 0x7F7FFFFFu, 0xFF7FFFFFu,  // ±min normal, ±max
             0x3F800000u, 0xBF800000u, 0x3F800001u,               // 1, -1, 1 + ulp
             0x33800000u, 0x34000000u,                            // 2^-24 (1 + it ties), 2^-23
             0x5F800000u, 0x1F800000u,  // 2^64 (squares overflow), 2^-64 (underflow)
         }) {
      values.push_back(FromBits<float>(bits));
    }
    return values;
  } else if constexpr (std::is_same_v<T, double>) {
    std::vector<T> values;
    for (const uint64_t bits : std::initializer_list<uint64_t>{
             0x0000000000000000u, 0x8000000000000000u, 0x7FF0000000000000u, 0xFFF0000000000000u,
             0x7FF8000000000000u, 0xFFF8000000000000u, 0x7FF8000000012345u, 0x7FF0000000000001u,
             0xFFF4000000000000u, 0x0000000000000001u, 0x8000000000000001u, 0x000FFFFFFFFFFFFFu,
             0x0010000000000000u, 0x7FEFFFFFFFFFFFFFu, 0xFFEFFFFFFFFFFFFFu, 0x3FF0000000000000u,
             0xBFF0000000000000u, 0x3FF0000000000001u, 0x3CA0000000000000u, 0x5FF0000000000000u,
             0x1FF0000000000000u,
         }) {
      values.push_back(FromBits<double>(bits));
    }
    return values;
  } else if constexpr (std::is_same_v<T, Float16>) {
    std::vector<T> values;
    for (const uint16_t bits : {
             0x0000, 0x8000, 0x7C00, 0xFC00,          // ±0, ±Inf
             0x7E00, 0xFE00, 0x7E55, 0x7C01, 0xFD00,  // quiet and signalling NaNs
             0x0001, 0x8001, 0x03FF,                  // subnormals
             0x0400, 0x8400, 0x7BFF, 0xFBFF,          // ±min normal, ±65504
             0x3C00, 0xBC00, 0x3C01,                  // 1, -1, 1 + ulp
             0x1000, 0x1400,                          // 2^-11 (1 + it ties), 2^-10
             0x5C00, 0x2000, 0x1C00,                  // 256, 2^-7, 2^-8 (squares)
         }) {
      values.push_back(Float16{bits});
    }
    return values;
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    std::vector<T> values;
    for (const uint16_t bits : {
             0x0000, 0x8000, 0x7F80, 0xFF80,          // ±0, ±Inf
             0x7FC0, 0xFFC0, 0x7FD5, 0x7F81, 0xFFA0,  // quiet and signalling NaNs
             0x0001, 0x8001, 0x007F,                  // subnormals
             0x0080, 0x8080, 0x7F7F, 0xFF7F,          // ±min normal, ±max
             0x3F80, 0xBF80, 0x3F81,                  // 1, -1, 1 + ulp
             0x3B80, 0x3C00,                          // 2^-8 (1 + it ties), 2^-7
             0x5F80, 0x1F80,                          // 2^64, 2^-64
         }) {
      values.push_back(BFloat16{bits});
    }
    return values;
  } else {
    using Limits = std::numeric_limits<T>;
    std::vector<T> values = {Limits::min(),
                             static_cast<T>(Limits::min() + 1),
                             0,
                             1,
                             2,
                             3,
                             static_cast<T>(Limits::max() - 1),
                             Limits::max(),
                             static_cast<T>(Limits::max() / 3),
                             static_cast<T>(Limits::min() / 3)};
    if constexpr (std::is_signed_v<T>) values.push_back(-1);
    return values;
  }
}

// RandomValue: mostly values of moderate magnitude (so sums and products round), with
// specials, subnormals and arbitrary bit patterns mixed in.
template <typename T>
T RandomValue(std::mt19937_64& rng, absl::Span<const T> specials) {
  const uint64_t choice = rng() % 16;
  if (choice == 0) return specials[rng() % specials.size()];
  if constexpr (std::is_same_v<T, float>) {
    const uint64_t bits = rng();
    if (choice == 1) return FromBits<float>(bits & 0x807FFFFFu);  // subnormal or zero
    if (choice <= 3) return FromBits<float>(bits & 0xFFFFFFFFu);
    const uint64_t exponent = 127 - 12 + (bits >> 40) % 25;  // 2^-12 .. 2^12
    return FromBits<float>((bits & 0x807FFFFFu) | exponent << 23);
  } else if constexpr (std::is_same_v<T, double>) {
    const uint64_t bits = rng();
    if (choice == 1) return FromBits<double>(bits & 0x800FFFFFFFFFFFFFu);
    if (choice <= 3) return FromBits<double>(bits);
    const uint64_t exponent = 1023 - 30 + rng() % 61;  // 2^-30 .. 2^30
    return FromBits<double>((bits & 0x800FFFFFFFFFFFFFu) | exponent << 52);
  } else if constexpr (kIsHalf<T>) {
    return T{static_cast<uint16_t>(rng())};  // every pattern: NaNs, Infs, subnormals
  } else {
    return static_cast<T>(rng());
  }
}

template <typename T>
T Negate(T value) {
  if constexpr (kIsHalf<T>) {
    return T{static_cast<uint16_t>(value.bits ^ 0x8000)};
  } else if constexpr (std::is_floating_point_v<T>) {
    return -value;
  } else {
    return static_cast<T>(0 - static_cast<std::make_unsigned_t<T>>(value));
  }
}

// RandomPair returns (src, dst) of `size` seeded elements each; some positions hold
// equal or opposite values so that ties, exact cancellation and ±0 results show up.
template <typename T>
std::pair<std::vector<T>, std::vector<T>> RandomPair(size_t size, std::mt19937_64& rng) {
  const std::vector<T> specials = Specials<T>();
  std::vector<T> src(size);
  std::vector<T> dst(size);
  for (size_t i = 0; i < size; ++i) {
    dst[i] = RandomValue<T>(rng, specials);
    switch (rng() % 16) {
      case 0:
        src[i] = dst[i];
        break;
      case 1:
        src[i] = Negate(dst[i]);
        break;
      default:
        src[i] = RandomValue<T>(rng, specials);
        break;
    }
  }
  return {std::move(src), std::move(dst)};
}

// SpecialPairs returns (src, dst) holding every ordered pair of specials.
template <typename T>
std::pair<std::vector<T>, std::vector<T>> SpecialPairs() {
  const std::vector<T> specials = Specials<T>();
  std::vector<T> src;
  std::vector<T> dst;
  for (const T& a : specials) {
    for (const T& b : specials) {
      dst.push_back(a);
      src.push_back(b);
    }
  }
  return {std::move(src), std::move(dst)};
}

// ---------------------------------------------------------------------------------
// Running a kernel on a window between guard elements.

constexpr size_t kLengths[] = {0, 1, 3, 15, 16, 17, 31, 33, 1000, 65537};
constexpr size_t kOffsets[] = {0, 1};  // elements past a 64-byte boundary

// Elements on each side of a window, which no kernel may touch.
constexpr size_t kGuard = 64;
constexpr unsigned char kGuardByte = 0xA5;

// Mismatches gathers failures over a sweep: a count and the first few examples.
class Mismatches {
 public:
  void Add(const std::string& what) {
    if (count_++ < 8) examples_ += what + "\n";
  }
  int count() const { return count_; }
  const std::string& examples() const { return examples_; }

 private:
  int count_ = 0;
  std::string examples_;
};

// A Window is `values` copied into a 64-byte-aligned buffer at element kGuard + offset,
// with guard bytes all around.
template <typename T>
class Window {
 public:
  static Window Create(absl::Span<const T> values, size_t offset) {
    Window window;
    auto buffer = AlignedBuffer<T>::Create(kGuard + offset + values.size() + kGuard);
    EXPECT_THAT(buffer, IsOk());
    if (!buffer.ok()) return window;
    window.buffer_ = std::move(buffer).value();
    std::memset(static_cast<void*>(window.buffer_.data()), kGuardByte, window.buffer_.size_bytes());
    window.begin_ = kGuard + offset;
    window.size_ = values.size();
    if (!values.empty()) {
      std::memcpy(static_cast<void*>(window.buffer_.data() + window.begin_), values.data(),
                  values.size() * sizeof(T));
    }
    return window;
  }

  absl::Span<T> span() { return buffer_.span().subspan(begin_, size_); }

  // CheckGuards reports every byte outside the window that no longer holds kGuardByte.
  void CheckGuards(const char* name, Mismatches* mismatches) const {
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(buffer_.data());
    const size_t window_begin = begin_ * sizeof(T);
    const size_t window_end = (begin_ + size_) * sizeof(T);
    for (size_t byte = 0; byte < buffer_.size_bytes(); ++byte) {
      if ((byte < window_begin || byte >= window_end) && bytes[byte] != kGuardByte) {
        mismatches->Add(absl::StrCat(name, ": wrote guard byte ", byte));
      }
    }
  }

 private:
  AlignedBuffer<T> buffer_;
  size_t begin_ = 0;
  size_t size_ = 0;
};

std::string Hex(uint64_t bits) { return absl::StrCat("0x", absl::Hex(bits)); }

// CheckReduceInto runs `isa`'s ReduceInto and the scalar one on (src, dst) and holds each
// result to the reference and, bit for bit, to the scalar result.
template <typename T>
void CheckReduceInto(Isa isa, ReduceOp op, absl::Span<const T> src, absl::Span<const T> dst,
                     size_t offset) {
  SCOPED_TRACE(absl::StrCat("length ", dst.size(), ", offset ", offset));
  Window<T> src_window = Window<T>::Create(src, offset);
  Window<T> dst_window = Window<T>::Create(dst, offset);
  ri::KernelsFor(isa).reduce_into(op, ConstBufferView::Of(src_window.span()),
                                  BufferView::Of(dst_window.span()));
  std::vector<T> scalar(dst.begin(), dst.end());
  ri::ReduceIntoScalar(op, ConstBufferView::Of(src), BufferView::Of(absl::MakeSpan(scalar)));

  Mismatches mismatches;
  for (size_t i = 0; i < dst.size(); ++i) {
    const uint64_t actual = Bits(dst_window.span()[i]);
    const uint64_t expected = ExpectedReduce(op, dst[i], src[i]);
    if (actual != expected || Bits(scalar[i]) != expected) {
      mismatches.Add(absl::StrCat("[", i, "] dst ", Hex(Bits(dst[i])), " src ", Hex(Bits(src[i])),
                                  ": got ", Hex(actual), ", scalar ", Hex(Bits(scalar[i])),
                                  ", expected ", Hex(expected)));
    }
    if (Bits(src_window.span()[i]) != Bits(src[i])) {
      mismatches.Add(absl::StrCat("[", i, "] src changed"));
    }
  }
  src_window.CheckGuards("src", &mismatches);
  dst_window.CheckGuards("dst", &mismatches);
  EXPECT_EQ(mismatches.count(), 0) << mismatches.examples();
}

template <typename T>
void CheckAccumulateInto(Isa isa, ReduceOp op, absl::Span<const T> src, absl::Span<const float> acc,
                         size_t offset) {
  SCOPED_TRACE(absl::StrCat("length ", acc.size(), ", offset ", offset));
  Window<T> src_window = Window<T>::Create(src, offset);
  Window<float> acc_window = Window<float>::Create(acc, offset);
  ri::KernelsFor(isa).accumulate_into(op, ConstBufferView::Of(src_window.span()),
                                      acc_window.span());
  std::vector<float> scalar(acc.begin(), acc.end());
  ri::AccumulateIntoScalar(op, ConstBufferView::Of(src), absl::MakeSpan(scalar));

  Mismatches mismatches;
  for (size_t i = 0; i < acc.size(); ++i) {
    const uint64_t actual = Bits(acc_window.span()[i]);
    const uint64_t expected = ExpectedFloat<float>(ReferenceOp(op, Decode(acc[i]), Decode(src[i])));
    if (actual != expected || Bits(scalar[i]) != expected) {
      mismatches.Add(absl::StrCat("[", i, "] acc ", Hex(Bits(acc[i])), " src ", Hex(Bits(src[i])),
                                  ": got ", Hex(actual), ", scalar ", Hex(Bits(scalar[i])),
                                  ", expected ", Hex(expected)));
    }
  }
  src_window.CheckGuards("src", &mismatches);
  acc_window.CheckGuards("acc", &mismatches);
  EXPECT_EQ(mismatches.count(), 0) << mismatches.examples();
}

template <typename T>
void CheckLoadAccumulator(Isa isa, absl::Span<const T> src, size_t offset) {
  SCOPED_TRACE(absl::StrCat("length ", src.size(), ", offset ", offset));
  Window<T> src_window = Window<T>::Create(src, offset);
  const std::vector<float> poison(src.size(), 12345.0f);
  Window<float> acc_window = Window<float>::Create(poison, offset);
  ri::KernelsFor(isa).load_accumulator(ConstBufferView::Of(src_window.span()), acc_window.span());
  std::vector<float> scalar(src.size());
  ri::LoadAccumulatorScalar(ConstBufferView::Of(src), absl::MakeSpan(scalar));

  Mismatches mismatches;
  for (size_t i = 0; i < src.size(); ++i) {
    const uint64_t actual = Bits(acc_window.span()[i]);
    const uint64_t expected = ExpectedLoad(src[i]);
    if (actual != expected || Bits(scalar[i]) != expected) {
      mismatches.Add(absl::StrCat("[", i, "] src ", Hex(Bits(src[i])), ": got ", Hex(actual),
                                  ", scalar ", Hex(Bits(scalar[i])), ", expected ", Hex(expected)));
    }
  }
  acc_window.CheckGuards("acc", &mismatches);
  EXPECT_EQ(mismatches.count(), 0) << mismatches.examples();
}

template <typename T>
void CheckStoreAccumulator(Isa isa, absl::Span<const float> acc, int64_t divisor, size_t offset) {
  SCOPED_TRACE(absl::StrCat("length ", acc.size(), ", offset ", offset));
  Window<float> acc_window = Window<float>::Create(acc, offset);
  const std::vector<T> poison(acc.size(), FromBits<T>(0x5A5A5A5A5A5A5A5Au));
  Window<T> dst_window = Window<T>::Create(poison, offset);
  ri::KernelsFor(isa).store_accumulator(acc_window.span(), divisor,
                                        BufferView::Of(dst_window.span()));
  std::vector<T> scalar(acc.size());
  ri::StoreAccumulatorScalar(acc, divisor, BufferView::Of(absl::MakeSpan(scalar)));

  Mismatches mismatches;
  for (size_t i = 0; i < acc.size(); ++i) {
    const uint64_t actual = Bits(dst_window.span()[i]);
    const uint64_t expected = ExpectedStore<T>(acc[i], divisor);
    if (actual != expected || Bits(scalar[i]) != expected) {
      mismatches.Add(absl::StrCat("[", i, "] acc ", Hex(Bits(acc[i])), ": got ", Hex(actual),
                                  ", scalar ", Hex(Bits(scalar[i])), ", expected ", Hex(expected)));
    }
  }
  dst_window.CheckGuards("dst", &mismatches);
  EXPECT_EQ(mismatches.count(), 0) << mismatches.examples();
}

template <typename T>
void CheckFinishAverage(Isa isa, absl::Span<const T> values, int64_t num_ranks, size_t offset) {
  SCOPED_TRACE(absl::StrCat("length ", values.size(), ", offset ", offset));
  Window<T> window = Window<T>::Create(values, offset);
  ri::KernelsFor(isa).finish_average(BufferView::Of(window.span()), num_ranks);
  std::vector<T> scalar(values.begin(), values.end());
  ri::FinishAverageScalar(BufferView::Of(absl::MakeSpan(scalar)), num_ranks);

  Mismatches mismatches;
  for (size_t i = 0; i < values.size(); ++i) {
    const uint64_t actual = Bits(window.span()[i]);
    const uint64_t expected = ExpectedAverage(values[i], num_ranks);
    if (actual != expected || Bits(scalar[i]) != expected) {
      mismatches.Add(absl::StrCat("[", i, "] value ", Hex(Bits(values[i])), ": got ", Hex(actual),
                                  ", scalar ", Hex(Bits(scalar[i])), ", expected ", Hex(expected)));
    }
  }
  window.CheckGuards("buf", &mismatches);
  EXPECT_EQ(mismatches.count(), 0) << mismatches.examples();
}

// Seed gives every parametrized case its own reproducible input.
uint64_t Seed(DType dtype, int64_t variant) {
  return 1000 * static_cast<uint64_t>(dtype) + static_cast<uint64_t>(variant);
}

// LOOM_SKIP_IF_UNSUPPORTED starts every per-ISA test: an ISA this CPU lacks is
// reported as SKIPPED, never as a pass.
#define LOOM_SKIP_IF_UNSUPPORTED(isa)                      \
  if (!ri::IsaSupported(isa)) {                            \
    GTEST_SKIP() << "this CPU lacks " << ri::IsaName(isa); \
  }

// ---------------------------------------------------------------------------------
// ReduceInto: every dtype x op x ISA.

using ReduceParam = std::tuple<DType, ReduceOp, Isa>;

class ReduceIntoTest : public ::testing::TestWithParam<ReduceParam> {
 protected:
  DType dtype() const { return std::get<0>(GetParam()); }
  ReduceOp op() const { return std::get<1>(GetParam()); }
  Isa isa() const { return std::get<2>(GetParam()); }
};

TEST_P(ReduceIntoTest, MatchesReferenceAndScalarAtEveryLengthAndOffset) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    std::mt19937_64 rng(Seed(dtype(), static_cast<int64_t>(op())));
    for (const size_t length : kLengths) {
      const auto [src, dst] = RandomPair<T>(length, rng);
      for (const size_t offset : kOffsets) {
        CheckReduceInto<T>(isa(), op(), src, dst, offset);
      }
    }
  });
}

TEST_P(ReduceIntoTest, MatchesReferenceOnEveryPairOfSpecialValues) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    const auto [src, dst] = SpecialPairs<T>();
    for (const size_t offset : kOffsets) CheckReduceInto<T>(isa(), op(), src, dst, offset);
  });
}

std::string ReduceParamName(const ::testing::TestParamInfo<ReduceParam>& info) {
  return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                      ReduceOpName(std::get<1>(info.param)), "_",
                      ri::IsaName(std::get<2>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(AllDTypesOpsIsas, ReduceIntoTest,
                         ::testing::Combine(::testing::ValuesIn(AllDTypes()),
                                            ::testing::ValuesIn(AllReduceOps()),
                                            ::testing::ValuesIn(ri::AllIsas())),
                         ReduceParamName);

// ---------------------------------------------------------------------------------
// ReduceTo (three operands): every dtype x op x ISA, out of place and with dst = b.

// CheckReduceTo runs `isa`'s reduce_to on (a, b) into a fresh window and, in place,
// into a copy of b, and holds both to the reference bit for bit.
template <typename T>
void CheckReduceTo(Isa isa, ReduceOp op, absl::Span<const T> a, absl::Span<const T> b,
                   size_t offset) {
  SCOPED_TRACE(absl::StrCat("length ", a.size(), ", offset ", offset));
  Window<T> a_window = Window<T>::Create(a, offset);
  Window<T> b_window = Window<T>::Create(b, offset);
  const std::vector<T> zeros(a.size());
  Window<T> out_window = Window<T>::Create(zeros, offset);
  ri::KernelsFor(isa).reduce_to(op, ConstBufferView::Of(a_window.span()),
                                ConstBufferView::Of(b_window.span()),
                                BufferView::Of(out_window.span()));
  Window<T> in_place = Window<T>::Create(b, offset);
  ri::KernelsFor(isa).reduce_to(op, ConstBufferView::Of(a_window.span()),
                                ConstBufferView::Of(in_place.span()),
                                BufferView::Of(in_place.span()));
  Mismatches mismatches;
  for (size_t i = 0; i < a.size(); ++i) {
    const uint64_t expected = ExpectedReduce(op, a[i], b[i]);
    if (Bits(out_window.span()[i]) != expected || Bits(in_place.span()[i]) != expected) {
      mismatches.Add(absl::StrCat("[", i, "] a ", Hex(Bits(a[i])), " b ", Hex(Bits(b[i])),
                                  ": got ", Hex(Bits(out_window.span()[i])), ", in place ",
                                  Hex(Bits(in_place.span()[i])), ", expected ", Hex(expected)));
    }
    if (Bits(a_window.span()[i]) != Bits(a[i]) || Bits(b_window.span()[i]) != Bits(b[i])) {
      mismatches.Add(absl::StrCat("[", i, "] an operand changed"));
    }
  }
  out_window.CheckGuards("dst", &mismatches);
  in_place.CheckGuards("in place", &mismatches);
  EXPECT_EQ(mismatches.count(), 0) << mismatches.examples();
}

class ReduceToTest : public ReduceIntoTest {};

TEST_P(ReduceToTest, MatchesReferenceAtEveryLengthAndOffsetOutOfPlaceAndInPlace) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    std::mt19937_64 rng(Seed(dtype(), 50 + static_cast<int64_t>(op())));
    for (const size_t length : kLengths) {
      const auto [a, b] = RandomPair<T>(length, rng);
      for (const size_t offset : kOffsets) CheckReduceTo<T>(isa(), op(), a, b, offset);
    }
  });
}

TEST_P(ReduceToTest, MatchesReferenceOnEveryPairOfSpecialValues) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    const auto [a, b] = SpecialPairs<T>();
    for (const size_t offset : kOffsets) CheckReduceTo<T>(isa(), op(), a, b, offset);
  });
}

INSTANTIATE_TEST_SUITE_P(AllDTypesOpsIsas, ReduceToTest,
                         ::testing::Combine(::testing::ValuesIn(AllDTypes()),
                                            ::testing::ValuesIn(AllReduceOps()),
                                            ::testing::ValuesIn(ri::AllIsas())),
                         ReduceParamName);

// ---------------------------------------------------------------------------------
// AccumulateInto: f32 / f16 / bf16 sources x op x ISA.

constexpr DType kAccumulatorDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

class AccumulateIntoTest : public ReduceIntoTest {};

TEST_P(AccumulateIntoTest, MatchesReferenceAndScalarAtEveryLengthAndOffset) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    if constexpr (kIsFloat<T> && !std::is_same_v<T, double>) {
      std::mt19937_64 rng(Seed(dtype(), 100 + static_cast<int64_t>(op())));
      for (const size_t length : kLengths) {
        const std::vector<T> src = RandomPair<T>(length, rng).first;
        const std::vector<float> acc = RandomPair<float>(length, rng).second;
        for (const size_t offset : kOffsets) {
          CheckAccumulateInto<T>(isa(), op(), src, acc, offset);
        }
      }
    }
  });
}

TEST_P(AccumulateIntoTest, MatchesReferenceOnEveryPairOfSpecialValues) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    if constexpr (kIsFloat<T> && !std::is_same_v<T, double>) {
      std::vector<T> src;
      std::vector<float> acc;
      for (const float a : Specials<float>()) {
        for (const T& b : Specials<T>()) {
          acc.push_back(a);
          src.push_back(b);
        }
      }
      for (const size_t offset : kOffsets) CheckAccumulateInto<T>(isa(), op(), src, acc, offset);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(AccumulatorDTypesOpsIsas, AccumulateIntoTest,
                         ::testing::Combine(::testing::ValuesIn(kAccumulatorDTypes),
                                            ::testing::ValuesIn(AllReduceOps()),
                                            ::testing::ValuesIn(ri::AllIsas())),
                         ReduceParamName);

// ---------------------------------------------------------------------------------
// LoadAccumulator: f32 / f16 / bf16 x ISA.

using DTypeIsaParam = std::tuple<DType, Isa>;

class LoadAccumulatorTest : public ::testing::TestWithParam<DTypeIsaParam> {
 protected:
  DType dtype() const { return std::get<0>(GetParam()); }
  Isa isa() const { return std::get<1>(GetParam()); }
};

TEST_P(LoadAccumulatorTest, MatchesReferenceAndScalarAtEveryLengthAndOffset) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    if constexpr (kIsFloat<T> && !std::is_same_v<T, double>) {
      std::mt19937_64 rng(Seed(dtype(), 200));
      for (const size_t length : kLengths) {
        const std::vector<T> src = RandomPair<T>(length, rng).first;
        for (const size_t offset : kOffsets) CheckLoadAccumulator<T>(isa(), src, offset);
      }
    }
  });
}

TEST_P(LoadAccumulatorTest, WidensSpecialValuesAndEvery16BitPattern) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    if constexpr (kIsFloat<T> && !std::is_same_v<T, double>) {
      std::vector<T> src = Specials<T>();
      if constexpr (kIsHalf<T>) {
        for (uint32_t bits = 0; bits <= 0xFFFF; ++bits)
          src.push_back(T{static_cast<uint16_t>(bits)});
      }
      for (const size_t offset : kOffsets) CheckLoadAccumulator<T>(isa(), src, offset);
    }
  });
}

std::string DTypeIsaName(const ::testing::TestParamInfo<DTypeIsaParam>& info) {
  return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                      ri::IsaName(std::get<1>(info.param)));
}

INSTANTIATE_TEST_SUITE_P(AccumulatorDTypesIsas, LoadAccumulatorTest,
                         ::testing::Combine(::testing::ValuesIn(kAccumulatorDTypes),
                                            ::testing::ValuesIn(ri::AllIsas())),
                         DTypeIsaName);

// ---------------------------------------------------------------------------------
// StoreAccumulator and FinishAverage: dtype x divisor (rank count) x ISA.

using DivideParam = std::tuple<DType, int64_t, Isa>;

class DivideTest : public ::testing::TestWithParam<DivideParam> {
 protected:
  DType dtype() const { return std::get<0>(GetParam()); }
  int64_t divisor() const { return std::get<1>(GetParam()); }
  Isa isa() const { return std::get<2>(GetParam()); }
};

std::string DivideParamName(const ::testing::TestParamInfo<DivideParam>& info) {
  return absl::StrCat(DTypeName(std::get<0>(info.param)), "_by", std::get<1>(info.param), "_",
                      ri::IsaName(std::get<2>(info.param)));
}

// 1 skips the division; 3 rounds; 8 is exact except where the quotient is subnormal.
constexpr int64_t kDivisors[] = {1, 3, 8};

class StoreAccumulatorTest : public DivideTest {};

TEST_P(StoreAccumulatorTest, MatchesReferenceAndScalarAtEveryLengthAndOffset) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    if constexpr (kIsFloat<T> && !std::is_same_v<T, double>) {
      std::mt19937_64 rng(Seed(dtype(), 300 + divisor()));
      for (const size_t length : kLengths) {
        const std::vector<float> acc = RandomPair<float>(length, rng).second;
        for (const size_t offset : kOffsets) {
          CheckStoreAccumulator<T>(isa(), acc, divisor(), offset);
        }
      }
    }
  });
}

TEST_P(StoreAccumulatorTest, RoundsSpecialValuesAndEvery16BitNeighbourhood) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    if constexpr (kIsFloat<T> && !std::is_same_v<T, double>) {
      std::vector<float> acc = Specials<float>();
      // Around each bf16 / f16 value: the value, and the f32s just below, at and above
      // the midpoint to its upper neighbour, so every rounding tie and carry shows.
      for (uint32_t pattern = 0; pattern <= 0xFFFF; pattern += 7) {
        const uint32_t bf16 = pattern << 16;
        for (const uint32_t bits : {bf16, bf16 | 0x7FFFu, bf16 | 0x8000u, bf16 | 0x8001u}) {
          acc.push_back(FromBits<float>(bits));
        }
        const uint32_t f16 = static_cast<uint32_t>(
            Bits(static_cast<float>(Decode(Float16{static_cast<uint16_t>(pattern)}))));
        for (const uint32_t bits : {f16, f16 + 0x0FFFu, f16 + 0x1000u, f16 + 0x1001u}) {
          acc.push_back(FromBits<float>(bits));
        }
      }
      for (const size_t offset : kOffsets) {
        CheckStoreAccumulator<T>(isa(), acc, divisor(), offset);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(AccumulatorDTypesDivisorsIsas, StoreAccumulatorTest,
                         ::testing::Combine(::testing::ValuesIn(kAccumulatorDTypes),
                                            ::testing::ValuesIn(kDivisors),
                                            ::testing::ValuesIn(ri::AllIsas())),
                         DivideParamName);

class FinishAverageTest : public DivideTest {};

TEST_P(FinishAverageTest, MatchesReferenceAndScalarAtEveryLengthAndOffset) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    std::mt19937_64 rng(Seed(dtype(), 400 + divisor()));
    for (const size_t length : kLengths) {
      const std::vector<T> values = RandomPair<T>(length, rng).second;
      for (const size_t offset : kOffsets) {
        CheckFinishAverage<T>(isa(), values, divisor(), offset);
      }
    }
  });
}

TEST_P(FinishAverageTest, DividesSpecialValues) {
  LOOM_SKIP_IF_UNSUPPORTED(isa());
  VisitDType(dtype(), [&](auto type) {
    using T = decltype(type);
    const std::vector<T> values = Specials<T>();
    for (const size_t offset : kOffsets) CheckFinishAverage<T>(isa(), values, divisor(), offset);
  });
}

INSTANTIATE_TEST_SUITE_P(AllDTypesRankCountsIsas, FinishAverageTest,
                         ::testing::Combine(::testing::ValuesIn(AllDTypes()),
                                            ::testing::ValuesIn(kDivisors),
                                            ::testing::ValuesIn(ri::AllIsas())),
                         DivideParamName);

// ---------------------------------------------------------------------------------
// The public functions: dispatch, the documented rules, and errors.

TEST(ActiveIsaTest, IsTheFastestSupportedIsa) {
  EXPECT_TRUE(ri::IsaSupported(ri::ActiveIsa()));
  EXPECT_TRUE(ri::IsaSupported(Isa::kScalar));
  if (ri::IsaSupported(Isa::kAvx512)) {
    EXPECT_EQ(ri::ActiveIsa(), Isa::kAvx512);
  } else if (ri::IsaSupported(Isa::kAvx2)) {
    EXPECT_EQ(ri::ActiveIsa(), Isa::kAvx2);
  } else {
    EXPECT_EQ(ri::ActiveIsa(), Isa::kScalar);
  }
}

TEST(ReduceIntoApiTest, PublicFunctionMatchesTheReferenceForEveryDTypeAndOp) {
  for (const DType dtype : AllDTypes()) {
    for (const ReduceOp op : AllReduceOps()) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " ", ReduceOpName(op)));
      VisitDType(dtype, [&](auto type) {
        using T = decltype(type);
        std::mt19937_64 rng(Seed(dtype, 500 + static_cast<int64_t>(op)));
        const auto [src, dst] = RandomPair<T>(1001, rng);
        std::vector<T> out = dst;
        LOOM_ASSERT_OK(ReduceInto(op, ConstBufferView::Of(absl::MakeConstSpan(src)),
                                  BufferView::Of(absl::MakeSpan(out))));
        int wrong = 0;
        for (size_t i = 0; i < out.size(); ++i) {
          wrong += Bits(out[i]) != ExpectedReduce(op, dst[i], src[i]);
        }
        EXPECT_EQ(wrong, 0);
      });
    }
  }
}

// The public ReduceTo at every start of dst within a cache line: the reference bit
// for bit, in place too, and nothing written outside dst.
TEST(ReduceToApiTest, MatchesTheReferenceAtEveryAlignment) {
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF64, DType::kI8}) {
    for (const ReduceOp op : AllReduceOps()) {
      SCOPED_TRACE(absl::StrCat(DTypeName(dtype), " ", ReduceOpName(op)));
      VisitDType(dtype, [&](auto type) {
        using T = decltype(type);
        std::mt19937_64 rng(Seed(dtype, 700 + static_cast<int64_t>(op)));
        const size_t length = 3 * 4096 / sizeof(T) + 5;
        const auto [a, b] = RandomPair<T>(length, rng);
        for (size_t offset = 0; offset < 64 / sizeof(T); offset += 3) {
          const std::vector<T> zeros(length);
          Window<T> out = Window<T>::Create(zeros, offset);
          LOOM_ASSERT_OK(ReduceTo(op, ConstBufferView::Of(absl::MakeConstSpan(a)),
                                  ConstBufferView::Of(absl::MakeConstSpan(b)),
                                  BufferView::Of(out.span())));
          Window<T> in_place = Window<T>::Create(a, offset);
          LOOM_ASSERT_OK(ReduceTo(op, ConstBufferView::Of(in_place.span()),
                                  ConstBufferView::Of(absl::MakeConstSpan(b)),
                                  BufferView::Of(in_place.span())));
          Mismatches mismatches;
          for (size_t i = 0; i < length; ++i) {
            const uint64_t expected = ExpectedReduce(op, a[i], b[i]);
            if (Bits(out.span()[i]) != expected || Bits(in_place.span()[i]) != expected) {
              mismatches.Add(absl::StrCat("[", i, "] offset ", offset));
            }
          }
          out.CheckGuards("dst", &mismatches);
          in_place.CheckGuards("in place", &mismatches);
          EXPECT_EQ(mismatches.count(), 0) << mismatches.examples();
        }
      });
    }
  }
}

TEST(ReduceToApiTest, RejectsMismatchesAndOverlapNamingThem) {
  std::vector<float> a(8), b(8), dst(8), longer(9);
  std::vector<BFloat16> half(8);
  const auto view = [](auto& v) { return BufferView::Of(absl::MakeSpan(v)); };
  EXPECT_THAT(ReduceTo(ReduceOp::kSum, view(a), view(half), view(dst)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ReduceTo: src is bf16 but dst is f32")));
  EXPECT_THAT(ReduceTo(ReduceOp::kSum, view(a), view(longer), view(dst)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ReduceTo: b has 9 elements but dst has 8")));
  std::vector<float> all(16);
  EXPECT_THAT(ReduceTo(ReduceOp::kSum, ConstBufferView::Of(absl::MakeConstSpan(all).subspan(1, 8)),
                       view(b), BufferView::Of(absl::MakeSpan(all).subspan(0, 8))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("overlap without being the same memory")));
  EXPECT_THAT(ReduceTo(static_cast<ReduceOp>(9), view(a), view(b), view(dst)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown ReduceOp 9")));
}

TEST(ReduceIntoApiTest, HeaderExample) {
  std::vector<float> mine = {1.0f, -0.0f, 7.0f};
  const std::vector<float> theirs = {2.0f, 0.0f, std::numeric_limits<float>::quiet_NaN()};
  LOOM_ASSERT_OK(ReduceInto(ReduceOp::kMin, ConstBufferView::Of(absl::MakeConstSpan(theirs)),
                            BufferView::Of(absl::MakeSpan(mine))));
  EXPECT_EQ(Bits(mine[0]), Bits(1.0f));
  EXPECT_EQ(Bits(mine[1]), Bits(-0.0f));
  EXPECT_EQ(Bits(mine[2]), 0x7FC00000u);

  std::vector<int32_t> counts = {7, -7, std::numeric_limits<int32_t>::max()};
  const BufferView view = BufferView::Of(absl::MakeSpan(counts));
  LOOM_ASSERT_OK(ReduceInto(ReduceOp::kAvg, view, view));
  EXPECT_THAT(counts, ::testing::ElementsAre(14, -14, -2));
  LOOM_ASSERT_OK(FinishAverage(view, 4));
  EXPECT_THAT(counts, ::testing::ElementsAre(3, -3, 0));
}

TEST(ReduceIntoApiTest, MinAndMaxPropagateNaNAndOrderSignedZerosOnEveryIsa) {
  const float nan_payload = FromBits<float>(0xFFC12345u);
  const float one = 1.0f;
  for (const Isa isa : ri::AllIsas()) {
    if (!ri::IsaSupported(isa)) continue;  // The parametrized tests report the skip.
    SCOPED_TRACE(ri::IsaName(isa));
    for (const ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
      std::vector<float> dst = {nan_payload, one, -0.0f, 0.0f};
      const std::vector<float> src = {one, nan_payload, 0.0f, -0.0f};
      ri::KernelsFor(isa).reduce_into(op, ConstBufferView::Of(absl::MakeConstSpan(src)),
                                      BufferView::Of(absl::MakeSpan(dst)));
      EXPECT_EQ(Bits(dst[0]), 0x7FC00000u);
      EXPECT_EQ(Bits(dst[1]), 0x7FC00000u);
      const uint64_t zero = op == ReduceOp::kMin ? Bits(-0.0f) : Bits(0.0f);
      EXPECT_EQ(Bits(dst[2]), zero);
      EXPECT_EQ(Bits(dst[3]), zero);
    }
  }
}

TEST(ReduceIntoApiTest, SumAndProdWrapAround) {
  std::vector<int8_t> bytes = {127, -128, 100};
  const std::vector<int8_t> more = {1, -1, 3};
  LOOM_ASSERT_OK(ReduceInto(ReduceOp::kSum, ConstBufferView::Of(absl::MakeConstSpan(more)),
                            BufferView::Of(absl::MakeSpan(bytes))));
  EXPECT_THAT(bytes, ::testing::ElementsAre(-128, 127, 103));
  LOOM_ASSERT_OK(ReduceInto(ReduceOp::kProd, ConstBufferView::Of(absl::MakeConstSpan(more)),
                            BufferView::Of(absl::MakeSpan(bytes))));
  EXPECT_THAT(bytes, ::testing::ElementsAre(-128, -127, 53));  // 309 mod 256 = 53

  std::vector<int64_t> wide = {std::numeric_limits<int64_t>::min()};
  const std::vector<int64_t> minus_one = {-1};
  LOOM_ASSERT_OK(ReduceInto(ReduceOp::kProd, ConstBufferView::Of(absl::MakeConstSpan(minus_one)),
                            BufferView::Of(absl::MakeSpan(wide))));
  EXPECT_EQ(wide[0], std::numeric_limits<int64_t>::min());  // -(-2^63) wraps to itself
}

TEST(AccumulatorApiTest, Bf16GradientsOfFourRanksAverageWithOneRounding) {
  // 1 + 3 * 2^-8 is not a bf16 value; summing in bf16 would round at every step
  // (1 + 2^-8 ties back to 1), the accumulator rounds once at the end.
  const std::vector<BFloat16> rank0 = {BFloat16{0x3F80}};  // 1
  const std::vector<BFloat16> tiny = {BFloat16{0x3B80}};   // 2^-8
  std::vector<float> acc(1);
  LOOM_ASSERT_OK(
      LoadAccumulator(ConstBufferView::Of(absl::MakeConstSpan(rank0)), absl::MakeSpan(acc)));
  for (int rank = 1; rank < 4; ++rank) {
    LOOM_ASSERT_OK(AccumulateInto(ReduceOp::kAvg, ConstBufferView::Of(absl::MakeConstSpan(tiny)),
                                  absl::MakeSpan(acc)));
  }
  EXPECT_EQ(acc[0], 1.01171875f);
  std::vector<BFloat16> out(1);
  LOOM_ASSERT_OK(StoreAccumulator(acc, 1, BufferView::Of(absl::MakeSpan(out))));
  EXPECT_EQ(out[0].bits, 0x3F82);  // 1.01171875 ties to even 1.015625

  std::vector<BFloat16> bf16_sum = rank0;
  for (int rank = 1; rank < 4; ++rank) {
    LOOM_ASSERT_OK(ReduceInto(ReduceOp::kSum, ConstBufferView::Of(absl::MakeConstSpan(tiny)),
                              BufferView::Of(absl::MakeSpan(bf16_sum))));
  }
  EXPECT_EQ(bf16_sum[0].bits, 0x3F80);  // each 1 + 2^-8 ties back to 1

  LOOM_ASSERT_OK(StoreAccumulator(acc, 4, BufferView::Of(absl::MakeSpan(out))));
  EXPECT_EQ(out[0].bits, 0x3E82);  // 0.2529296875 rounds to 0.25390625
}

TEST(ReduceIntoApiTest, EmptyViewsAndInPlaceAreAccepted) {
  LOOM_EXPECT_OK(ReduceInto(ReduceOp::kSum, ConstBufferView(nullptr, 0, DType::kF32),
                            BufferView(nullptr, 0, DType::kF32)));
  std::vector<float> values = {1.5f, -2.0f};
  const BufferView view = BufferView::Of(absl::MakeSpan(values));
  LOOM_ASSERT_OK(ReduceInto(ReduceOp::kSum, view, view));
  EXPECT_THAT(values, ::testing::ElementsAre(3.0f, -4.0f));
}

TEST(ReduceIntoApiTest, ConcurrentCallsOnDisjointDestinationsSharingASource) {
  constexpr int kThreads = 4;
  constexpr int kRounds = 8;
  const std::vector<float> src(4097, 2.0f);
  std::vector<std::vector<float>> dst(kThreads, std::vector<float>(src.size(), 1.0f));
  std::vector<std::vector<float>> acc(kThreads, std::vector<float>(src.size(), 0.0f));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        EXPECT_THAT(ReduceInto(ReduceOp::kSum, ConstBufferView::Of(absl::MakeConstSpan(src)),
                               BufferView::Of(absl::MakeSpan(dst[t]))),
                    IsOk());
        EXPECT_THAT(AccumulateInto(ReduceOp::kMax, ConstBufferView::Of(absl::MakeConstSpan(src)),
                                   absl::MakeSpan(acc[t])),
                    IsOk());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_THAT(dst[t], ::testing::Each(1.0f + 2.0f * kRounds));
    EXPECT_THAT(acc[t], ::testing::Each(2.0f));
  }
}

TEST(ReduceIntoApiTest, RejectsMismatchedDTypesNamingBoth) {
  std::vector<float> src(4, 1.0f);
  std::vector<BFloat16> dst(4, BFloat16{0x3F80});
  EXPECT_THAT(ReduceInto(ReduceOp::kSum, ConstBufferView::Of(absl::MakeConstSpan(src)),
                         BufferView::Of(absl::MakeSpan(dst))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ReduceInto: src is f32 but dst is bf16")));
  EXPECT_EQ(dst[0].bits, 0x3F80);  // Nothing written.
}

TEST(ReduceIntoApiTest, RejectsMismatchedSizesNamingBoth) {
  std::vector<int32_t> src(3, 1);
  std::vector<int32_t> dst(4, 7);
  EXPECT_THAT(
      ReduceInto(ReduceOp::kSum, ConstBufferView::Of(absl::MakeConstSpan(src)),
                 BufferView::Of(absl::MakeSpan(dst))),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("src has 3 elements but dst has 4")));
  EXPECT_THAT(dst, ::testing::Each(7));
}

TEST(ReduceIntoApiTest, RejectsShiftedOverlap) {
  std::vector<float> values(10, 1.0f);
  const absl::Span<float> all = absl::MakeSpan(values);
  EXPECT_THAT(ReduceInto(ReduceOp::kSum, ConstBufferView::Of(all.subspan(0, 8)),
                         BufferView::Of(all.subspan(1, 8))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("overlap without being the same memory")));
  EXPECT_THAT(values, ::testing::Each(1.0f));
}

TEST(ReduceIntoApiTest, RejectsElementsNotAlignedToTheirSize) {
  alignas(8) std::byte bytes[64] = {};
  const BufferView misaligned(bytes + 1, 4, DType::kF32);
  const ConstBufferView aligned(bytes + 32, 4, DType::kF32);
  EXPECT_THAT(ReduceInto(ReduceOp::kSum, aligned, misaligned),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("dst at 0x"), HasSubstr("not aligned to its 4-byte f32"))));
  EXPECT_THAT(FinishAverage(misaligned, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not aligned")));
}

TEST(ReduceIntoApiTest, RejectsAnUnknownOp) {
  std::vector<float> values(2, 1.0f);
  const BufferView view = BufferView::Of(absl::MakeSpan(values));
  EXPECT_THAT(ReduceInto(static_cast<ReduceOp>(9), view, view),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown ReduceOp 9")));
  std::vector<float> acc(2);
  EXPECT_THAT(AccumulateInto(static_cast<ReduceOp>(9), view, absl::MakeSpan(acc)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown ReduceOp 9")));
}

TEST(AccumulatorApiTest, RejectsSourcesThatAreNotF32F16OrBf16) {
  std::vector<float> acc(2, 5.0f);
  for (const DType dtype : {DType::kF64, DType::kI8, DType::kU8, DType::kI32, DType::kI64}) {
    alignas(8) std::byte bytes[16] = {};
    const ConstBufferView src(bytes, 2, dtype);
    const std::string message = absl::StrCat("src is ", DTypeName(dtype),
                                             "; an f32 accumulator pairs with f32, f16 or bf16");
    EXPECT_THAT(AccumulateInto(ReduceOp::kSum, src, absl::MakeSpan(acc)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("AccumulateInto"), HasSubstr(message))));
    EXPECT_THAT(LoadAccumulator(src, absl::MakeSpan(acc)),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("LoadAccumulator"), HasSubstr(message))));
    const BufferView dst(bytes, 2, dtype);
    EXPECT_THAT(StoreAccumulator(acc, 1, dst),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("StoreAccumulator: dst is ", DTypeName(dtype)))));
  }
  EXPECT_THAT(acc, ::testing::Each(5.0f));
}

TEST(AccumulatorApiTest, RejectsMismatchedSizesNamingBoth) {
  const std::vector<Float16> src(3);
  std::vector<float> acc(5);
  EXPECT_THAT(AccumulateInto(ReduceOp::kMax, ConstBufferView::Of(absl::MakeConstSpan(src)),
                             absl::MakeSpan(acc)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("AccumulateInto: src has 3 elements but acc has 5")));
  EXPECT_THAT(LoadAccumulator(ConstBufferView::Of(absl::MakeConstSpan(src)), absl::MakeSpan(acc)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("LoadAccumulator: src has 3 elements but acc has 5")));
  std::vector<BFloat16> dst(4);
  EXPECT_THAT(StoreAccumulator(acc, 2, BufferView::Of(absl::MakeSpan(dst))),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("StoreAccumulator: acc has 5 elements but dst has 4")));
}

TEST(AccumulatorApiTest, RejectsOverlapThatIsNotInPlace) {
  std::vector<float> values(8, 1.0f);
  const absl::Span<float> all = absl::MakeSpan(values);
  // In place, element by element: fine.
  LOOM_EXPECT_OK(AccumulateInto(ReduceOp::kSum, ConstBufferView::Of(all), all));
  EXPECT_THAT(values, ::testing::Each(2.0f));
  // bf16 widened into the f32 memory it was read from: rejected.
  const ConstBufferView bf16_in_place(reinterpret_cast<const std::byte*>(values.data()), 4,
                                      DType::kBF16);
  EXPECT_THAT(LoadAccumulator(bf16_in_place, all.subspan(0, 4)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overlap")));
  const BufferView bf16_out(reinterpret_cast<std::byte*>(values.data() + 2), 4, DType::kBF16);
  EXPECT_THAT(StoreAccumulator(all.subspan(0, 4), 1, bf16_out),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overlap")));
  EXPECT_THAT(values, ::testing::Each(2.0f));
}

TEST(AccumulatorApiTest, RejectsDivisorBelowOne) {
  const std::vector<float> acc(2, 1.0f);
  std::vector<float> dst(2, 9.0f);
  for (const int64_t divisor : {int64_t{0}, int64_t{-4}}) {
    EXPECT_THAT(
        StoreAccumulator(acc, divisor, BufferView::Of(absl::MakeSpan(dst))),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 HasSubstr(absl::StrCat("divisor is ", divisor, "; it must be at least 1"))));
  }
  EXPECT_THAT(dst, ::testing::Each(9.0f));
}

TEST(FinishAverageApiTest, RejectsRankCountBelowOne) {
  std::vector<int32_t> values = {8, -8};
  for (const int64_t num_ranks : {int64_t{0}, int64_t{-1}}) {
    EXPECT_THAT(FinishAverage(BufferView::Of(absl::MakeSpan(values)), num_ranks),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("FinishAverage: num_ranks is ", num_ranks,
                                                "; it must be at least 1"))));
  }
  EXPECT_THAT(values, ::testing::ElementsAre(8, -8));
}

TEST(FinishAverageApiTest, IntegersTruncateTowardZero) {
  std::vector<int64_t> values = {7, -7, 6, -6, std::numeric_limits<int64_t>::min()};
  LOOM_ASSERT_OK(FinishAverage(BufferView::Of(absl::MakeSpan(values)), 2));
  EXPECT_THAT(values,
              ::testing::ElementsAre(3, -3, 3, -3, std::numeric_limits<int64_t>::min() / 2));
  std::vector<uint8_t> bytes = {255, 3};
  LOOM_ASSERT_OK(FinishAverage(BufferView::Of(absl::MakeSpan(bytes)), 4));
  EXPECT_THAT(bytes, ::testing::ElementsAre(63, 0));
}

}  // namespace
}  // namespace loom
