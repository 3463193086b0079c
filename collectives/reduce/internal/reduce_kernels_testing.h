// Shared by the reduction kernel tests (one file per kernel): element bits and an exact
// decoding of every dtype that uses neither the code under test nor core/half.h, the
// reference results, special and random inputs, the guarded windows the kernels run on,
// the per-kernel checks (each ISA against the reference and, bit for bit, the scalar
// kernel), and the parameters the tests sweep.
#ifndef LOOM_COLLECTIVES_REDUCE_INTERNAL_REDUCE_KERNELS_TESTING_H_
#define LOOM_COLLECTIVES_REDUCE_INTERNAL_REDUCE_KERNELS_TESTING_H_


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

inline void PrintTo(Isa isa, std::ostream* os) { *os << IsaName(isa); }

}  // namespace reduce_internal

namespace reduce_testing {

namespace ri = reduce_internal;
using ri::Isa;

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
inline double ReferenceMin(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return kNaN;
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

inline double ReferenceMax(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return kNaN;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}

inline double ReferenceOp(ReduceOp op, double a, double b) {
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

inline std::string Hex(uint64_t bits) { return absl::StrCat("0x", absl::Hex(bits)); }

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
inline uint64_t Seed(DType dtype, int64_t variant) {
  return 1000 * static_cast<uint64_t>(dtype) + static_cast<uint64_t>(variant);
}

// LOOM_SKIP_IF_UNSUPPORTED starts every per-ISA test: an ISA this CPU lacks is
// reported as SKIPPED, never as a pass.
#define LOOM_SKIP_IF_UNSUPPORTED(isa)                      \
  if (!ri::IsaSupported(isa)) {                            \
    GTEST_SKIP() << "this CPU lacks " << ri::IsaName(isa); \
  }


// ---------------------------------------------------------------------------------
// The parameters the kernel tests sweep.

using ReduceParam = std::tuple<DType, ReduceOp, Isa>;

class ReduceParamTest : public ::testing::TestWithParam<ReduceParam> {
 protected:
  DType dtype() const { return std::get<0>(GetParam()); }
  ReduceOp op() const { return std::get<1>(GetParam()); }
  Isa isa() const { return std::get<2>(GetParam()); }
};

inline std::string ReduceParamName(const ::testing::TestParamInfo<ReduceParam>& info) {
  return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                      ReduceOpName(std::get<1>(info.param)), "_",
                      ri::IsaName(std::get<2>(info.param)));
}

using DTypeIsaParam = std::tuple<DType, Isa>;

class DTypeIsaTest : public ::testing::TestWithParam<DTypeIsaParam> {
 protected:
  DType dtype() const { return std::get<0>(GetParam()); }
  Isa isa() const { return std::get<1>(GetParam()); }
};

inline std::string DTypeIsaName(const ::testing::TestParamInfo<DTypeIsaParam>& info) {
  return absl::StrCat(DTypeName(std::get<0>(info.param)), "_",
                      ri::IsaName(std::get<1>(info.param)));
}

using DivideParam = std::tuple<DType, int64_t, Isa>;

class DivideTest : public ::testing::TestWithParam<DivideParam> {
 protected:
  DType dtype() const { return std::get<0>(GetParam()); }
  int64_t divisor() const { return std::get<1>(GetParam()); }
  Isa isa() const { return std::get<2>(GetParam()); }
};

inline std::string DivideParamName(const ::testing::TestParamInfo<DivideParam>& info) {
  return absl::StrCat(DTypeName(std::get<0>(info.param)), "_by", std::get<1>(info.param), "_",
                      ri::IsaName(std::get<2>(info.param)));
}

// 1 skips the division; 3 rounds; 8 is exact except where the quotient is subnormal.
constexpr int64_t kDivisors[] = {1, 3, 8};

// The dtypes an f32 accumulator takes.
constexpr DType kAccumulatorDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

}  // namespace reduce_testing
}  // namespace loom

#endif  // LOOM_COLLECTIVES_REDUCE_INTERNAL_REDUCE_KERNELS_TESTING_H_
