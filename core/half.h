// 16-bit floating-point storage types and their scalar conversions to and from f32.
//
// Float16 is IEEE 754 binary16 (1 sign, 5 exponent, 10 mantissa bits); BFloat16 is
// the top half of an f32 (1, 8, 7). Both are storage types: arithmetic happens in f32.
// Narrowing rounds to nearest, ties to even; overflow gives ±Inf; f16 subnormals are
// produced and read exactly; NaN stays NaN with its sign and leading payload bits and
// the quiet bit set (the behaviour of x86 F16C/AVX-512 conversions, so the scalar and
// vector paths agree bit for bit). Widening is exact.
//
// Example:
//   BFloat16 b = ToBFloat16(1.00390625f);   // b.bits == 0x3F80 (tie, rounds to even 1.0)
//   Float16 h = ToFloat16(65520.0f);        // h.bits == 0x7C00 (+Inf: past max 65504)
//   float f = ToFloat(ToFloat16(0.1f));     // 0.0999755859375f
//
// Batch conversions, vectorized, are in core/half_convert.h.
#ifndef LOOM_CORE_HALF_H_
#define LOOM_CORE_HALF_H_

#include <cstdint>
#include <cstring>

namespace loom {

struct Float16 {
  uint16_t bits = 0;
};

struct BFloat16 {
  uint16_t bits = 0;
};

inline bool operator==(Float16 a, Float16 b) { return a.bits == b.bits; }
inline bool operator!=(Float16 a, Float16 b) { return a.bits != b.bits; }
inline bool operator==(BFloat16 a, BFloat16 b) { return a.bits == b.bits; }
inline bool operator!=(BFloat16 a, BFloat16 b) { return a.bits != b.bits; }

namespace half_internal {

inline uint32_t FloatBits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return bits;
}

inline float BitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

}  // namespace half_internal

// ToBFloat16 rounds an f32 to bf16, to nearest with ties to even.
inline BFloat16 ToBFloat16(float value) {
  uint32_t bits = half_internal::FloatBits(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: keep sign and payload, set quiet bit.
    return BFloat16{static_cast<uint16_t>((bits >> 16) | 0x0040u)};
  }
  // Adding 0x7FFF (+1 when the kept lsb is odd) carries into bit 16 exactly when the
  // discarded half is above the midpoint, or at it with an odd kept part. A carry out
  // of the largest finite value lands on the Inf pattern, as RNE requires.
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return BFloat16{static_cast<uint16_t>(bits >> 16)};
}

// ToFloat widens a bf16 to f32 exactly.
inline float ToFloat(BFloat16 value) {
  return half_internal::BitsToFloat(static_cast<uint32_t>(value.bits) << 16);
}

// ToFloat16 rounds an f32 to IEEE binary16, to nearest with ties to even.
inline Float16 ToFloat16(float value) {
  const uint32_t bits = half_internal::FloatBits(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) {  // NaN: quiet, leading 9 payload bits kept.
    return Float16{static_cast<uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu))};
  }
  if (abs >= 0x47800000u) {  // |value| >= 65536 (or Inf): beyond rounding range.
    return Float16{static_cast<uint16_t>(sign | 0x7C00u)};
  }
  if (abs < 0x38800000u) {  // Below 2^-14, the smallest normal f16: subnormal or zero.
    if (abs <= 0x33000000u) {  // <= 2^-25: half the smallest subnormal or less -> 0.
      return Float16{static_cast<uint16_t>(sign)};
    }
    // value = m * 2^(e - 150); in units of 2^-24 that is m >> (126 - e).
    const uint32_t exponent = abs >> 23;
    const uint32_t mantissa = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t shift = 126u - exponent;  // 14..24 here.
    uint32_t quotient = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (remainder > halfway || (remainder == halfway && (quotient & 1u))) ++quotient;
    return Float16{static_cast<uint16_t>(sign | quotient)};  // 0x400 is the min normal.
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits.
  uint32_t half = ((abs >> 23) - 112u) << 10 | ((abs >> 13) & 0x3FFu);
  const uint32_t dropped = abs & 0x1FFFu;
  if (dropped > 0x1000u || (dropped == 0x1000u && (half & 1u))) ++half;  // May carry to Inf.
  return Float16{static_cast<uint16_t>(sign | half)};
}

// ToFloat widens an IEEE binary16 to f32 exactly (subnormals included).
inline float ToFloat(Float16 value) {
  const uint32_t sign = static_cast<uint32_t>(value.bits & 0x8000u) << 16;
  const uint32_t exponent = (value.bits >> 10) & 0x1Fu;
  uint32_t mantissa = value.bits & 0x3FFu;
  if (exponent == 0x1F) {  // Inf or NaN; a NaN comes back quiet, as F16C does.
    const uint32_t quiet = mantissa != 0 ? 0x400000u : 0u;
    return half_internal::BitsToFloat(sign | 0x7F800000u | quiet | (mantissa << 13));
  }
  if (exponent == 0) {
    if (mantissa == 0) return half_internal::BitsToFloat(sign);
    // Subnormal m * 2^-24: shift the leading one up to the implicit-bit position.
    uint32_t f32_exponent = 113;  // Exponent of 2^-14 in f32 bias.
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --f32_exponent;
    }
    return half_internal::BitsToFloat(sign | (f32_exponent << 23) | ((mantissa & 0x3FFu) << 13));
  }
  return half_internal::BitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

}  // namespace loom

#endif  // LOOM_CORE_HALF_H_
