// Per-ISA kernels behind offload/codecs/codec.h, exposed so that tests and benchmarks
// can run each instruction set explicitly. Callers outside this package use codec.h.
// The scalar kernels (kernels_scalar.cc) are the reference; the vector ones are written
// once with Google Highway (kernels.cc) and compiled for its AVX2 and AVX3 targets,
// which serve Isa::kAvx2 and Isa::kAvx512.
//
// Every kernel gives the same bytes as the scalar one on every input (the tests hold
// them to it): int8 quantization is the same sequence of single-rounding IEEE
// operations in every path (no FMA: the package is built with -ffp-contract=off), with
// round-to-nearest-even to integer. No kernel reads or writes a byte outside the spans
// it is given. Results assume the default floating-point environment (round to
// nearest, FTZ/DAZ off), as the rest of Loom's kernels do.
//
// Example:
//   const Kernels& k = KernelsFor(ActiveIsa());
//   size_t bad = k.quantize_int8(x, /*block_size=*/256, out);   // kAllFinite if ok
//   k.dequantize_int8(out, 256, absl::MakeSpan(y));             // |x - y| <= bound
#ifndef LOOM_OFFLOAD_CODECS_INTERNAL_KERNELS_H_
#define LOOM_OFFLOAD_CODECS_INTERNAL_KERNELS_H_

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/cpu_features.h"

namespace loom {
namespace codecs_internal {

// The instruction-set levels, as core/cpu_features.h defines and detects them (one
// definition of "supported" for every package's kernels).
using Isa = CpuIsa;
inline absl::Span<const Isa> AllIsas() { return AllCpuIsas(); }
inline absl::string_view IsaName(Isa isa) { return CpuIsaName(isa); }

// IsaSupported returns whether `isa`'s kernels run here: CpuSupports(isa), which holds
// each level to Highway's target for it (core/cpu_features.h).
bool IsaSupported(Isa isa);

// ActiveIsa returns the fastest supported Isa; codec.cc runs its kernels.
Isa ActiveIsa();

// --- int8 blockwise ----------------------------------------------------------------
//
// x is cut into blocks of block_size elements (the last may be shorter). Each block is
// written as its f32 scale (4 bytes, little-endian) followed by one int8 code per
// element, so a run of n elements takes Int8Bytes(n, block_size) bytes, blocks back to
// back. For a block with absmax m = max |x|:
//   scale = 0 when m == 0, else max(m / 127, FLT_MIN), nudged down one ulp should
//           127 * scale overflow;   inv = 1 / scale (0 for a zero block);
//   code  = clamp(round_half_even(x * inv), -127, 127);   decoded x' = code * scale.
// Every quantity is one rounding, so |x - x'| <= scale * (1/2 + 2^-14) (the 2^-14
// covers the f32 roundings of inv, x * inv and code * scale; see README.md).

// Int8Bytes returns the encoded size of n elements in blocks of block_size.
inline size_t Int8Bytes(size_t n, size_t block_size) {
  return n + sizeof(float) * ((n + block_size - 1) / block_size);
}

// Int8Scale returns the scale and its inverse for a block whose absmax is `absmax`
// (finite, >= 0). Shared by every ISA so that all compute the same bits.
inline void Int8Scale(float absmax, float* scale, float* inv) {
  if (absmax == 0.0f) {
    *scale = 0.0f;
    *inv = 0.0f;
    return;
  }
  float s = absmax / 127.0f;
  // A subnormal scale would carry too few bits to meet the bound; FLT_MIN is a power
  // of two, so both x * 2^126 and code * 2^-126 are then exact.
  if (s < FLT_MIN) s = FLT_MIN;
  // Near FLT_MAX, 127 * scale may round past it and decode to infinity.
  if (std::isinf(127.0f * s)) s = std::nextafter(s, 0.0f);
  *scale = s;
  *inv = 1.0f / s;
}

// kAllFinite is what quantize_int8 returns when every element was finite.
inline constexpr size_t kAllFinite = std::numeric_limits<size_t>::max();

// --- byte shuffle ------------------------------------------------------------------
//
// Shuffle4 writes byte j of element i of `in` (count elements of 4 bytes) to
// out[j * count + i]: four planes, one per byte position (Blosc/HDF5 "shuffle").
// Unshuffle4 undoes it. in and out must not overlap.

// --- fp16/bf16 overflow -------------------------------------------------------------
//
// FindOverflow returns the index of the first finite element x[i] with
// (bits(x[i]) & 0x7FFFFFFF) >= overflow_abs_bits, or x.size(): the values a 16-bit
// format would round to infinity (overflow_abs_bits 0x477FF000 = 65520 for fp16,
// 0x7F7F8000 for bf16). NaN and ±Inf never match.

// Kernels is one ISA's implementation.
struct Kernels {
  // quantize_int8 encodes x (any length >= 0) into out (Int8Bytes(x.size(), block_size)
  // bytes, any alignment). Returns kAllFinite, or the index of the first block holding
  // a NaN or infinity (what was written up to there is unspecified).
  size_t (*quantize_int8)(absl::Span<const float> x, size_t block_size, std::byte* out);
  // dequantize_int8 decodes Int8Bytes(x.size(), block_size) bytes of `in` into x.
  void (*dequantize_int8)(const std::byte* in, size_t block_size, absl::Span<float> x);
  void (*shuffle4)(const std::byte* in, size_t count, std::byte* out);
  void (*unshuffle4)(const std::byte* in, size_t count, std::byte* out);
  size_t (*find_overflow)(absl::Span<const float> x, uint32_t overflow_abs_bits);
};

// KernelsFor returns `isa`'s kernels, supported or not (so a test can name them before
// it skips); only a supported Isa's may be called. Every path takes any block size
// >= 1 (codec.h validates 32..65536, powers of two).
const Kernels& KernelsFor(Isa isa);

// The scalar kernels (Isa::kScalar), the reference for the others.
size_t QuantizeInt8Scalar(absl::Span<const float> x, size_t block_size, std::byte* out);
void DequantizeInt8Scalar(const std::byte* in, size_t block_size, absl::Span<float> x);
void Shuffle4Scalar(const std::byte* in, size_t count, std::byte* out);
void Unshuffle4Scalar(const std::byte* in, size_t count, std::byte* out);
size_t FindOverflowScalar(absl::Span<const float> x, uint32_t overflow_abs_bits);

// Scalar helpers the vector paths use for their tails.
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
inline bool Overflows(float x, uint32_t overflow_abs_bits) {
  const uint32_t abs = FloatBits(x) & 0x7FFFFFFFu;
  return abs >= overflow_abs_bits && abs < 0x7F800000u;
}
inline int8_t QuantizeOne(float x, float inv) {
  float q = std::nearbyint(x * inv);
  q = q > 127.0f ? 127.0f : (q < -127.0f ? -127.0f : q);
  return static_cast<int8_t>(q);
}
inline float DequantizeOne(std::byte code, float scale) {
  return static_cast<float>(static_cast<int8_t>(code)) * scale;
}

}  // namespace codecs_internal
}  // namespace loom

#endif  // LOOM_OFFLOAD_CODECS_INTERNAL_KERNELS_H_
