// The 8-bit dynamic code maps of the blockwise state, scalar form (the AVX2 and AVX-512
// kernels compute the same functions on vectors, with the same operations).
//
// A magnitude code of `bits` bits (8 for v's unsigned map; 7 plus a sign bit for m's signed
// map) is a dynamic-exponent number, in the spirit of Dettmers' dynamic tree quantization
// but base 16 rather than 10 so that encoding is exponent arithmetic:
//
//   c = 0                        -> 0
//   c = 2^l + F, 0 <= F < 2^l    -> 16^-z * (1/16 + (F + 1) * (15/16) / 2^l),
//                                   z = bits - 1 - l (the group; 0 holds the largest)
//
// Group z covers (16^-(z+1), 16^-z] with 2^(bits-1-z) evenly spaced levels, its top level
// being 16^-z: the largest code is exactly 1 (a block's absmax encodes exactly), the
// smallest non-zero level is 16^-(bits-1) (2^-28 unsigned, 2^-24 signed). Big groups get
// many levels and small ones few, so relative precision is finest near the block's absmax:
// the spacing in group 0 is 15/16 / 2^(bits-1) (0.73% of absmax unsigned, 1.46% signed).
//
// Encoding takes r = |x| / absmax, finds r's group from its float exponent and rounds r's
// position in the group, in units of the spacing, to the nearest integer (ties to even):
// the nearest level, up to the few-2^-24 error of computing that position (a choice can
// differ from the exact nearest only within 2e-4 of a spacing from a midpoint). A group's
// position 0 is 16^-(z+1), the top level of the next group, whose code precedes the group's
// codes, so rounding down across a group boundary is just code arithmetic. r >= 1 (or NaN)
// gives the top code; r below 0.53 x the smallest level gives 0. internal/code_tables.h has
// the formulas as the kernels evaluate them.
//
// Decoding is exact (every step is a power-of-two scaling or an exact sum), so the value a
// code decodes to is the same from any code path; the one rounding is the final
// multiplication by the block's absmax.
#ifndef LOOM_OFFLOAD_ADAMW_INTERNAL_CODE_MAP_H_
#define LOOM_OFFLOAD_ADAMW_INTERNAL_CODE_MAP_H_

#include <xmmintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "offload/adamw/internal/code_tables.h"

namespace loom {
namespace adamw_internal {

// Magnitude bits of the two maps.
inline constexpr int kSignedMagnitudeBits = 7;
inline constexpr int kUnsignedMagnitudeBits = 8;

inline uint32_t FloatToBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

inline float BitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

inline const CodeTables& TablesFor(int bits) {
  return bits == kSignedMagnitudeBits ? kSignedCodeTables : kUnsignedCodeTables;
}

// MagnitudeValue returns the level of magnitude code `code` (< 2^bits): 0 or a value in
// [16^-(bits-1), 1]. Every operation is exact.
inline float MagnitudeValue(uint32_t code, int bits) {
  if (code == 0) return 0.0f;
  const float c = static_cast<float>(code);
  const uint32_t l = (FloatToBits(c) >> 23) - 127u;  // floor(log2 code)
  const CodeTables& tables = TablesFor(bits);
  return tables.decode_offset[l] + tables.decode_slope[l] * c;
}

// EncodeMagnitude returns the code of the level nearest to r (r >= 0; NaN and r >= 1 give
// the top code).
inline uint32_t EncodeMagnitude(float r, int bits) {
  const CodeTables& tables = TablesFor(bits);
  const uint32_t min_exponent = static_cast<uint32_t>(
      bits == kSignedMagnitudeBits ? kSignedMinExponent : kUnsignedMinExponent);
  const uint32_t e =
      std::min(std::max(FloatToBits(r) >> 23, min_exponent), static_cast<uint32_t>(kMaxExponent));
  const uint32_t z = (static_cast<uint32_t>(kMaxExponent) - e) >> 2;
  const float t = r * tables.encode_scale[z] - tables.encode_offset[z];
  // cvtss2si: round to nearest even (the default MXCSR mode, as for every float operation
  // here); NaN and out-of-range give 0x80000000, as vcvtps2dq does.
  const uint32_t code = static_cast<uint32_t>(_mm_cvtss_si32(_mm_set_ss(t)));
  return std::min(code, (1u << bits) - 1u);
}

// InverseScale returns 1 / absmax, or 0 when absmax is 0 or NaN (every r is then 0 or NaN,
// encoded as 0 or the top code). The kernels of every ISA compute the same.
inline float InverseScale(float absmax) { return absmax > 0.0f ? 1.0f / absmax : 0.0f; }

// EncodeSigned / EncodeUnsigned return the 8-bit code of x given 1 / absmax of its block:
// sign bit 7 and a 7-bit magnitude, or an 8-bit magnitude (x's sign ignored).
inline uint8_t EncodeSigned(float x, float inv_absmax) {
  const uint32_t x_bits = FloatToBits(x);
  const float r = BitsToFloat(x_bits & 0x7FFFFFFFu) * inv_absmax;
  return static_cast<uint8_t>(((x_bits >> 24) & 0x80u) | EncodeMagnitude(r, kSignedMagnitudeBits));
}
inline uint8_t EncodeUnsigned(float x, float inv_absmax) {
  const float r = BitsToFloat(FloatToBits(x) & 0x7FFFFFFFu) * inv_absmax;
  return static_cast<uint8_t>(EncodeMagnitude(r, kUnsignedMagnitudeBits));
}

// DecodeSigned / DecodeUnsigned return a code's level times absmax (for the signed map,
// with the code's sign; 0x80 gives -0).
inline float DecodeSigned(uint8_t code, float absmax) {
  const float magnitude = MagnitudeValue(code & 0x7Fu, kSignedMagnitudeBits) * absmax;
  return BitsToFloat(FloatToBits(magnitude) | (static_cast<uint32_t>(code & 0x80u) << 24));
}
inline float DecodeUnsigned(uint8_t code, float absmax) {
  return MagnitudeValue(code, kUnsignedMagnitudeBits) * absmax;
}

// AbsBits returns the bits of |x|; comparing them as integers orders |x| exactly (NaN above
// Inf), so a block's absmax does not depend on the order lanes are combined.
inline uint32_t AbsBits(float x) { return FloatToBits(x) & 0x7FFFFFFFu; }

}  // namespace adamw_internal
}  // namespace loom

#endif  // LOOM_OFFLOAD_ADAMW_INTERNAL_CODE_MAP_H_
