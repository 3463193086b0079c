// AVX2 kernels. Only the functions marked LOOM_AVX2 are compiled for AVX2 (function-level
// target attributes, no global -mavx2), so this file links into binaries that must run
// on older CPUs; ActiveIsa() keeps those CPUs off these kernels.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/types/span.h"
#include "offload/codecs/internal/kernels.h"

#define LOOM_AVX2 __attribute__((target("avx2")))

namespace loom {
namespace codecs_internal {
namespace {

LOOM_AVX2 inline uint32_t HorizontalMaxU32(__m256i v) {
  __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(m));
}

// Quantize8 is QuantizeOne on 8 lanes: multiply, round half to even whatever MXCSR says,
// convert (exact: the value is integral), clamp.
LOOM_AVX2 inline __m256i Quantize8(__m256 x, __m256 inv) {
  const __m256 y =
      _mm256_round_ps(_mm256_mul_ps(x, inv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256i q = _mm256_cvttps_epi32(y);
  return _mm256_min_epi32(_mm256_max_epi32(q, _mm256_set1_epi32(-127)), _mm256_set1_epi32(127));
}

}  // namespace

LOOM_AVX2 size_t QuantizeInt8Avx2(absl::Span<const float> x, size_t block_size, std::byte* out) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  // packs_epi32 then packs_epi16 interleave the 128-bit lanes; this puts dwords back.
  const __m256i unlace = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (size_t begin = 0, block = 0; begin < x.size(); begin += block_size, ++block) {
    const size_t len = std::min(block_size, x.size() - begin);
    const size_t vec_len = len & ~size_t{31};
    const float* p = x.data() + begin;
    __m256i m0 = _mm256_setzero_si256();
    __m256i m1 = _mm256_setzero_si256();
    size_t i = 0;
    for (; i < vec_len; i += 16) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i));
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 8));
      m0 = _mm256_max_epu32(m0, _mm256_and_si256(a, abs_mask));
      m1 = _mm256_max_epu32(m1, _mm256_and_si256(b, abs_mask));
    }
    uint32_t absmax_bits = HorizontalMaxU32(_mm256_max_epu32(m0, m1));
    for (; i < len; ++i) absmax_bits = std::max(absmax_bits, FloatBits(p[i]) & 0x7FFFFFFFu);
    if (absmax_bits >= 0x7F800000u) return block;
    float scale;
    float inv;
    Int8Scale(BitsToFloat(absmax_bits), &scale, &inv);
    std::memcpy(out, &scale, sizeof(scale));
    out += sizeof(scale);
    const __m256 vinv = _mm256_set1_ps(inv);
    for (i = 0; i < vec_len; i += 32) {
      const __m256i q0 = Quantize8(_mm256_loadu_ps(p + i), vinv);
      const __m256i q1 = Quantize8(_mm256_loadu_ps(p + i + 8), vinv);
      const __m256i q2 = Quantize8(_mm256_loadu_ps(p + i + 16), vinv);
      const __m256i q3 = Quantize8(_mm256_loadu_ps(p + i + 24), vinv);
      const __m256i packed =
          _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                          _mm256_permutevar8x32_epi32(packed, unlace));
    }
    for (; i < len; ++i) out[i] = static_cast<std::byte>(QuantizeOne(p[i], inv));
    out += len;
  }
  return kAllFinite;
}

LOOM_AVX2 void DequantizeInt8Avx2(const std::byte* in, size_t block_size, absl::Span<float> x) {
  for (size_t begin = 0; begin < x.size(); begin += block_size) {
    const size_t len = std::min(block_size, x.size() - begin);
    const size_t vec_len = len & ~size_t{31};
    float scale;
    std::memcpy(&scale, in, sizeof(scale));
    in += sizeof(scale);
    const __m256 vscale = _mm256_set1_ps(scale);
    float* p = x.data() + begin;
    size_t i = 0;
    for (; i < vec_len; i += 32) {
      const __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
      const __m128i lo = _mm256_castsi256_si128(codes);
      const __m128i hi = _mm256_extracti128_si256(codes, 1);
      _mm256_storeu_ps(p + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), vscale));
      _mm256_storeu_ps(
          p + i + 8,
          _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), vscale));
      _mm256_storeu_ps(p + i + 16,
                       _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), vscale));
      _mm256_storeu_ps(
          p + i + 24,
          _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), vscale));
    }
    for (; i < len; ++i) p[i] = static_cast<float>(static_cast<int8_t>(in[i])) * scale;
    in += len;
  }
}

LOOM_AVX2 void Shuffle4Avx2(const std::byte* in, size_t count, std::byte* out) {
  const __m256i byte_mask = _mm256_set1_epi32(0xFF);
  const __m256i unlace = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const size_t vec_count = count & ~size_t{31};
  size_t i = 0;
  for (; i < vec_count; i += 32) {
    const __m256i* src = reinterpret_cast<const __m256i*>(in + 4 * i);
    const __m256i a0 = _mm256_loadu_si256(src);
    const __m256i a1 = _mm256_loadu_si256(src + 1);
    const __m256i a2 = _mm256_loadu_si256(src + 2);
    const __m256i a3 = _mm256_loadu_si256(src + 3);
    for (int plane = 0; plane < 4; ++plane) {
      const __m128i shift = _mm_cvtsi32_si128(8 * plane);
      const __m256i b0 = _mm256_and_si256(_mm256_srl_epi32(a0, shift), byte_mask);
      const __m256i b1 = _mm256_and_si256(_mm256_srl_epi32(a1, shift), byte_mask);
      const __m256i b2 = _mm256_and_si256(_mm256_srl_epi32(a2, shift), byte_mask);
      const __m256i b3 = _mm256_and_si256(_mm256_srl_epi32(a3, shift), byte_mask);
      // Values are 0..255, so the unsigned saturating packs are exact.
      const __m256i packed =
          _mm256_packus_epi16(_mm256_packus_epi32(b0, b1), _mm256_packus_epi32(b2, b3));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + plane * count + i),
                          _mm256_permutevar8x32_epi32(packed, unlace));
    }
  }
  for (; i < count; ++i) {
    for (size_t j = 0; j < 4; ++j) out[j * count + i] = in[4 * i + j];
  }
}

LOOM_AVX2 void Unshuffle4Avx2(const std::byte* in, size_t count, std::byte* out) {
  const size_t vec_count = count & ~size_t{31};
  size_t i = 0;
  for (; i < vec_count; i += 32) {
    const __m256i p0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    const __m256i p1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + count + i));
    const __m256i p2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 2 * count + i));
    const __m256i p3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + 3 * count + i));
    // Per 128-bit lane: bytes 0/1 of elements 0..7 and 8..15 (lane 1: 16..31).
    const __m256i lo01 = _mm256_unpacklo_epi8(p0, p1);
    const __m256i hi01 = _mm256_unpackhi_epi8(p0, p1);
    const __m256i lo23 = _mm256_unpacklo_epi8(p2, p3);
    const __m256i hi23 = _mm256_unpackhi_epi8(p2, p3);
    const __m256i e0 = _mm256_unpacklo_epi16(lo01, lo23);  // Elements 0..3 | 16..19.
    const __m256i e1 = _mm256_unpackhi_epi16(lo01, lo23);  // 4..7 | 20..23.
    const __m256i e2 = _mm256_unpacklo_epi16(hi01, hi23);  // 8..11 | 24..27.
    const __m256i e3 = _mm256_unpackhi_epi16(hi01, hi23);  // 12..15 | 28..31.
    __m256i* dst = reinterpret_cast<__m256i*>(out + 4 * i);
    _mm256_storeu_si256(dst, _mm256_permute2x128_si256(e0, e1, 0x20));
    _mm256_storeu_si256(dst + 1, _mm256_permute2x128_si256(e2, e3, 0x20));
    _mm256_storeu_si256(dst + 2, _mm256_permute2x128_si256(e0, e1, 0x31));
    _mm256_storeu_si256(dst + 3, _mm256_permute2x128_si256(e2, e3, 0x31));
  }
  for (; i < count; ++i) {
    for (size_t j = 0; j < 4; ++j) out[4 * i + j] = in[j * count + i];
  }
}

LOOM_AVX2 size_t FindOverflowAvx2(absl::Span<const float> x, uint32_t overflow_abs_bits) {
  // Signed compares are exact here: |x|'s bits are below 2^31.
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i below = _mm256_set1_epi32(static_cast<int>(overflow_abs_bits) - 1);
  const __m256i inf = _mm256_set1_epi32(0x7F800000);
  const size_t vec_len = x.size() & ~size_t{15};
  __m256i any = _mm256_setzero_si256();
  for (size_t i = 0; i < vec_len; i += 16) {
    const __m256i a = _mm256_and_si256(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.data() + i)), abs_mask);
    const __m256i b = _mm256_and_si256(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.data() + i + 8)), abs_mask);
    any = _mm256_or_si256(
        any, _mm256_and_si256(_mm256_cmpgt_epi32(inf, a), _mm256_cmpgt_epi32(a, below)));
    any = _mm256_or_si256(
        any, _mm256_and_si256(_mm256_cmpgt_epi32(inf, b), _mm256_cmpgt_epi32(b, below)));
  }
  // The vector pass only says whether; the scalar one says where (rare: an error).
  const size_t start = _mm256_testz_si256(any, any) ? vec_len : 0;
  for (size_t i = start; i < x.size(); ++i) {
    if (Overflows(x[i], overflow_abs_bits)) return i;
  }
  return x.size();
}

}  // namespace codecs_internal
}  // namespace loom
