// Blockwise 8-bit quantization with dynamic (non-linear) code maps: the storage of AdamW's
// m and v under StateFormat::kBlockwise8, usable on its own.
//
// An array is cut into blocks of block_size elements (the last one may be shorter). Each
// block keeps one f32 scale, its absmax (the largest |x|), and one byte per element: the
// code of the level nearest to x / absmax in a dynamic-exponent map. CodeMap::kSigned (for
// m) has a sign bit and 7 magnitude bits, levels in [-1, 1]; CodeMap::kUnsigned (for v)
// uses all 8 bits for magnitudes in [0, 1]. Levels are dense near 1 and sparse near 0
// across 7 (signed) or 8 (unsigned) factors of 16: the smallest non-zero level is 2^-24
// (signed) or 2^-28 (unsigned) of the absmax. internal/code_map.h has the construction and
// its error bounds.
//
// Example:
//   std::vector<float> x = {0.5f, -1.0f, 0.001f, 0.0f};   // one block
//   std::vector<uint8_t> codes(4);
//   std::vector<float> absmax(NumBlocks(4, 256));         // 1 scale
//   LOOM_RETURN_IF_ERROR(QuantizeBlockwise8(CodeMap::kSigned, 256, x, absl::MakeSpan(codes),
//                                           absl::MakeSpan(absmax)));
//   // absmax == {1.0f}; codes[1] == 0xFF (-1 is exact); codes[3] == 0x00
//   std::vector<float> y(4);
//   LOOM_RETURN_IF_ERROR(DequantizeBlockwise8(CodeMap::kSigned, 256, codes, absmax,
//                                             absl::MakeSpan(y)));
//   // y == {0.501953125f, -1.0f, 0.000930786133f, 0.0f}
//   QuantizeBlockwise8(CodeMap::kSigned, 100, ...);
//   // InvalidArgument: "QuantizeBlockwise8: block_size is 100; it must be a multiple of
//   // 64 in [256, 2048]"
#ifndef LOOM_OFFLOAD_ADAMW_BLOCKWISE8_H_
#define LOOM_OFFLOAD_ADAMW_BLOCKWISE8_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace loom {

// The two code maps.
enum class CodeMap {
  kSigned,    // sign bit + 7-bit magnitude; for m
  kUnsigned,  // 8-bit magnitude, the input's sign ignored; for v
};

// CodeMapName returns "signed" or "unsigned".
absl::string_view CodeMapName(CodeMap map);

// Block sizes: a multiple of 64 (so blocks start on cache lines) in [256, 2048] (the
// scratch a kernel keeps per block stays in L1).
inline constexpr int64_t kMinBlockSize = 256;
inline constexpr int64_t kMaxBlockSize = 2048;

// ValidateBlockSize returns InvalidArgument, naming the value, unless block_size is a
// multiple of 64 in [kMinBlockSize, kMaxBlockSize].
absl::Status ValidateBlockSize(int64_t block_size);

// NumBlocks returns the number of blocks (and scales) for `count` elements: ceil(count /
// block_size), 0 for count 0. block_size must be positive.
int64_t NumBlocks(int64_t count, int64_t block_size);

// CodeLevel returns the level `code` decodes to before scaling: in [-1, 1] for kSigned
// (0x80 is -0), [0, 1] for kUnsigned. Exact; the largest magnitude code is 1.
float CodeLevel(CodeMap map, uint8_t code);

// QuantizeBlockwise8 writes each block's absmax into absmax[b] and each element's code into
// codes[i], the code of the level nearest to values[i] / absmax (ties to even; an all-zero
// block gets absmax 0 and codes 0). A block holding NaN gets a NaN absmax (Inf: an Inf
// absmax) and decodes to NaN. Returns InvalidArgument, writing nothing, if block_size is
// invalid, codes and values differ in size, or absmax does not have
// NumBlocks(values.size(), block_size) elements.
absl::Status QuantizeBlockwise8(CodeMap map, int64_t block_size, absl::Span<const float> values,
                                absl::Span<uint8_t> codes, absl::Span<float> absmax);

// DequantizeBlockwise8 writes values[i] = CodeLevel(map, codes[i]) * absmax[block of i]
// (one rounding). Returns InvalidArgument, writing nothing, on the size and block size
// errors of QuantizeBlockwise8.
absl::Status DequantizeBlockwise8(CodeMap map, int64_t block_size, absl::Span<const uint8_t> codes,
                                  absl::Span<const float> absmax, absl::Span<float> values);

}  // namespace loom

#endif  // LOOM_OFFLOAD_ADAMW_BLOCKWISE8_H_
