// AVX-512 kernels (AVX-512F only). Only the functions marked LOOM_AVX512 are compiled for
// AVX-512 (function-level target attributes), so this file links into binaries that must
// run on CPUs without it; ActiveIsa() keeps those CPUs off these kernels.
#include "core/internal/x86_intrinsics.h"  // first: see there

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/types/span.h"
#include "offload/codecs/internal/kernels.h"

#define LOOM_AVX512 __attribute__((target("avx512f")))

namespace loom {
namespace codecs_internal {
namespace {

// Quantize16 is QuantizeOne on 16 lanes; the rounding mode is in the instruction.
LOOM_AVX512 inline __m128i Quantize16(__m512 x, __m512 inv) {
  const __m512i q = _mm512_cvt_roundps_epi32(_mm512_mul_ps(x, inv),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return _mm512_cvtepi32_epi8(
      _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127)));
}

}  // namespace

LOOM_AVX512 size_t QuantizeInt8Avx512(absl::Span<const float> x, size_t block_size,
                                      std::byte* out) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  for (size_t begin = 0, block = 0; begin < x.size(); begin += block_size, ++block) {
    const size_t len = std::min(block_size, x.size() - begin);
    const size_t vec_len = len & ~size_t{31};
    const float* p = x.data() + begin;
    __m512i m0 = _mm512_setzero_si512();
    __m512i m1 = _mm512_setzero_si512();
    size_t i = 0;
    for (; i < vec_len; i += 32) {
      m0 = _mm512_max_epu32(m0, _mm512_and_si512(_mm512_loadu_si512(p + i), abs_mask));
      m1 = _mm512_max_epu32(m1, _mm512_and_si512(_mm512_loadu_si512(p + i + 16), abs_mask));
    }
    uint32_t absmax_bits = _mm512_reduce_max_epu32(_mm512_max_epu32(m0, m1));
    for (; i < len; ++i) absmax_bits = std::max(absmax_bits, FloatBits(p[i]) & 0x7FFFFFFFu);
    if (absmax_bits >= 0x7F800000u) return block;
    float scale;
    float inv;
    Int8Scale(BitsToFloat(absmax_bits), &scale, &inv);
    std::memcpy(out, &scale, sizeof(scale));
    out += sizeof(scale);
    const __m512 vinv = _mm512_set1_ps(inv);
    for (i = 0; i < vec_len; i += 32) {
      const __m128i q0 = Quantize16(_mm512_loadu_ps(p + i), vinv);
      const __m128i q1 = Quantize16(_mm512_loadu_ps(p + i + 16), vinv);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), q0);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + 16), q1);
    }
    for (; i < len; ++i) out[i] = static_cast<std::byte>(QuantizeOne(p[i], inv));
    out += len;
  }
  return kAllFinite;
}

LOOM_AVX512 void DequantizeInt8Avx512(const std::byte* in, size_t block_size, absl::Span<float> x) {
  for (size_t begin = 0; begin < x.size(); begin += block_size) {
    const size_t len = std::min(block_size, x.size() - begin);
    const size_t vec_len = len & ~size_t{31};
    float scale;
    std::memcpy(&scale, in, sizeof(scale));
    in += sizeof(scale);
    const __m512 vscale = _mm512_set1_ps(scale);
    float* p = x.data() + begin;
    size_t i = 0;
    for (; i < vec_len; i += 32) {
      const __m128i c0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
      const __m128i c1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i + 16));
      _mm512_storeu_ps(p + i, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c0)), vscale));
      _mm512_storeu_ps(p + i + 16,
                       _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c1)), vscale));
    }
    for (; i < len; ++i) p[i] = static_cast<float>(static_cast<int8_t>(in[i])) * scale;
    in += len;
  }
}

LOOM_AVX512 size_t FindOverflowAvx512(absl::Span<const float> x, uint32_t overflow_abs_bits) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i lo = _mm512_set1_epi32(static_cast<int>(overflow_abs_bits));
  const __m512i inf = _mm512_set1_epi32(0x7F800000);
  const size_t vec_len = x.size() & ~size_t{31};
  __mmask16 any = 0;
  for (size_t i = 0; i < vec_len; i += 32) {
    const __m512i a = _mm512_and_si512(_mm512_loadu_si512(x.data() + i), abs_mask);
    const __m512i b = _mm512_and_si512(_mm512_loadu_si512(x.data() + i + 16), abs_mask);
    any |= _mm512_mask_cmplt_epu32_mask(_mm512_cmpge_epu32_mask(a, lo), a, inf);
    any |= _mm512_mask_cmplt_epu32_mask(_mm512_cmpge_epu32_mask(b, lo), b, inf);
  }
  // The vector pass only says whether; the scalar one says where (rare: an error).
  for (size_t i = any == 0 ? vec_len : 0; i < x.size(); ++i) {
    if (Overflows(x[i], overflow_abs_bits)) return i;
  }
  return x.size();
}

}  // namespace codecs_internal
}  // namespace loom
