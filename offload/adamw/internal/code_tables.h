// The constants of the 8-bit code maps (internal/code_map.h), as plain tables that the
// scalar and the vector kernels share: the vector kernels look them up with in-register
// permutes (vpermps), the scalar code by index, so every path computes the same function
// with the same operations.
//
// The AVX2 kernels look the 8-entry tables up with vpermps; the AVX-512 kernels use
// copies indexed by what AVX-512 computes in one instruction (vplzcntd for decoding, the
// exponent for encoding with vpermt2ps over 32 entries).
#ifndef LOOM_OFFLOAD_ADAMW_INTERNAL_CODE_TABLES_H_
#define LOOM_OFFLOAD_ADAMW_INTERNAL_CODE_TABLES_H_

#include <cstdint>

namespace loom {
namespace adamw_internal {

// CodeTables: one map of `bits` magnitude bits (7 signed, 8 unsigned).
//
// Encoding r = |x| / absmax takes r's float exponent e, clamped to [127 - 4 bits, 126],
// and its group z = (126 - e) / 4 (rounded down), so that r in [16^-(z+1), 16^-z) is in
// group z, r below the groups in the last and r >= 1 (or NaN) in the first. It computes
// the code as a real number, the group's first code plus r's position in the group in
// units of the level spacing, (r 16^z - 1/16) (16/15) 2^(bits-1-z) + 2^(bits-1-z) - 1, as
//   t = r * encode_scale[z] - encode_offset[z]
// and returns min(cvt(t), 2^bits - 1): cvt rounds to the nearest integer (ties to even),
// and the min is unsigned, so a NaN or huge t, which converts to 0x80000000, gives the
// top code. Below the groups t is under 1/2, so r encodes as 0.
// Decoding code c with l = floor(log2 c) is exact:
//   level(c) = decode_offset[l] + decode_slope[l] * c,   level(0) = 0.
struct CodeTables {
  float encode_scale[8];   // 2^(3z + bits - 1) * 16/15, rounded to float
  float encode_offset[8];  // 2^(bits - 1 - z) / 15 - (2^(bits - 1 - z) - 1), rounded
  // The same, indexed by the clamped exponent e mod 32 (AVX-512's two-table vpermt2ps).
  float encode_scale_by_exponent[32];
  float encode_offset_by_exponent[32];
  float decode_offset[8];  // 16^-z 2^(-4-l) (15 - 14 2^l), z = bits - 1 - l (exact)
  float decode_slope[8];   // 15 16^-z 2^(-4-l) (exact)
  // The same, indexed by lzcnt32(c) mod 16 = 15 - l (AVX-512CD's vplzcntd); entry 0, where
  // code 0 lands (lzcnt 32), is 0 so that it decodes to 0 without a mask.
  float decode_offset_by_lzcnt[16];
  float decode_slope_by_lzcnt[16];
};

// The exponent range that encoding clamps r's float exponent to.
inline constexpr int32_t kSignedMinExponent = 127 - 4 * 7;
inline constexpr int32_t kUnsignedMinExponent = 127 - 4 * 8;
inline constexpr int32_t kMaxExponent = 126;

extern const CodeTables kSignedCodeTables;    // 7 magnitude bits, for m
extern const CodeTables kUnsignedCodeTables;  // 8 magnitude bits, for v

}  // namespace adamw_internal
}  // namespace loom

#endif  // LOOM_OFFLOAD_ADAMW_INTERNAL_CODE_TABLES_H_
