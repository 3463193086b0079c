// AVX2 kernels: 8 lanes. AVX2 has no masked 8- or 16-bit loads, so a tail of fewer than 8
// elements is copied into zero-padded 8-lane arrays, run through the same vector body and
// copied back (no byte outside the tile is touched). The element math is adamw_scalar.cc's
// Update, operation for operation; the 8-bit codes use code_map.h's functions, written on
// vectors.
//
// This file is compiled with -mavx2 -mf16c (its own cc_library, see BUILD; no -mfma, so
// nothing can be contracted even by accident) and runs only where SupportedIsa() reports
// AVX2. It includes nothing but <immintrin.h>, <cstdint> and the plain internal/kernels.h
// and code_tables.h, and keeps every helper in an anonymous namespace, so no function with
// external linkage is compiled for AVX2 except the three entry points.
#include <immintrin.h>

#include <cstdint>

#include "offload/adamw/internal/code_tables.h"
#include "offload/adamw/internal/kernels.h"

#if !defined(__AVX2__) || !defined(__F16C__)
#error "adamw_avx2.cc needs -mavx2 -mf16c (offload/adamw/BUILD)"
#endif

namespace loom {
namespace adamw_internal {
namespace {

constexpr int64_t kLanes = 8;
// Software prefetch distance in elements (see adamw_avx512.cc).
constexpr int64_t kPrefetch = 512;

// Prefetch asks for the cache line `kPrefetch` elements past base[i]. Lines past the end
// of the arrays are fine: prefetches do not fault (the address is formed as an integer).
template <typename T>
void Prefetch(const T* base, int64_t i) {
  const uintptr_t address =
      reinterpret_cast<uintptr_t>(base) + static_cast<uintptr_t>(i + kPrefetch) * sizeof(T);
  _mm_prefetch(reinterpret_cast<const char*>(address), _MM_HINT_T0);
}

struct Constants {
  __m256 beta1, one_minus_beta1, beta2, one_minus_beta2, grad_scale, eps, decay, step_size,
      inv_sqrt_bc2;
};

Constants Splat(const StepConstants& c) {
  return {_mm256_set1_ps(c.beta1),       _mm256_set1_ps(c.one_minus_beta1),
          _mm256_set1_ps(c.beta2),       _mm256_set1_ps(c.one_minus_beta2),
          _mm256_set1_ps(c.grad_scale),  _mm256_set1_ps(c.eps),
          _mm256_set1_ps(c.decay),       _mm256_set1_ps(c.step_size),
          _mm256_set1_ps(c.inv_sqrt_bc2)};
}

// Update is adamw_scalar.cc's Update on 8 lanes.
__m256 Update(const Constants& k, __m256 p, __m256 grad, __m256& m, __m256& v) {
  const __m256 g = _mm256_mul_ps(grad, k.grad_scale);
  m = _mm256_add_ps(_mm256_mul_ps(k.beta1, m), _mm256_mul_ps(k.one_minus_beta1, g));
  v = _mm256_add_ps(_mm256_mul_ps(k.beta2, v),
                    _mm256_mul_ps(k.one_minus_beta2, _mm256_mul_ps(g, g)));
  const __m256 d = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(v), k.inv_sqrt_bc2), k.eps);
  return _mm256_sub_ps(_mm256_mul_ps(p, k.decay), _mm256_mul_ps(k.step_size, _mm256_div_ps(m, d)));
}

__m256i Splat32(int32_t value) { return _mm256_set1_epi32(value); }

// RoundToBF16 returns core/half.h's ToBFloat16 of each lane in its low 16 bits (see
// adamw_avx512.cc).
__m256i RoundToBF16(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i abs = _mm256_and_si256(bits, Splat32(0x7FFFFFFF));
  const __m256i nan = _mm256_cmpgt_epi32(abs, Splat32(0x7F800000));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), Splat32(1));
  const __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(lsb, Splat32(0x7FFF)));
  const __m256i quieted = _mm256_or_si256(bits, Splat32(0x00400000));
  return _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quieted, nan), 16);
}

// Narrow16 packs 8 lanes holding values below 2^16 into 8 uint16.
__m128i Narrow16(__m256i lanes) {
  return _mm_packus_epi32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1));
}

// `half` is null for kNone, so the element offset is applied only when there is a copy.
template <HalfKind kHalf>
void StoreHalf(uint16_t* half, int64_t i, __m256 p) {
  if constexpr (kHalf == HalfKind::kBF16) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(half + i), Narrow16(RoundToBF16(p)));
  } else if constexpr (kHalf == HalfKind::kF16) {
    // An immediate rounding mode: nearest even whatever MXCSR says, as ToFloat16 does.
    _mm_storeu_si128(reinterpret_cast<__m128i*>(half + i),
                     _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}

struct F32Storage {
  using Elem = float;
  static __m256 Load(const float* p) { return _mm256_loadu_ps(p); }
  static void Store(float* p, __m256 v) { _mm256_storeu_ps(p, v); }
};

struct BF16Storage {
  using Elem = uint16_t;
  static __m256 Load(const uint16_t* p) {
    const __m256i words =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(words, 16));
  }
  static void Store(uint16_t* p, __m256 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), Narrow16(RoundToBF16(v)));
  }
};

template <typename T>
void CopyElements(const T* src, T* dst, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] = src[i];
}

template <typename Storage, HalfKind kHalf>
void ElementwiseBody(const Constants& k, float* params, const float* grads,
                     typename Storage::Elem* m_base, typename Storage::Elem* v_base, uint16_t* half,
                     int64_t i) {
  __m256 m = Storage::Load(m_base + i);
  __m256 v = Storage::Load(v_base + i);
  const __m256 p = Update(k, _mm256_loadu_ps(params + i), _mm256_loadu_ps(grads + i), m, v);
  _mm256_storeu_ps(params + i, p);
  Storage::Store(m_base + i, m);
  Storage::Store(v_base + i, v);
  StoreHalf<kHalf>(half, i, p);
}

template <typename Storage, HalfKind kHalf>
void StepElementwise(const StepConstants& c, const TileArgs& tile_ref) {
  // A local copy: the stores below cannot alias it, so its pointers stay in registers.
  const TileArgs tile = tile_ref;
  using Elem = typename Storage::Elem;
  const Constants k = Splat(c);
  Elem* const m_base = static_cast<Elem*>(tile.m);
  Elem* const v_base = static_cast<Elem*>(tile.v);
  int64_t i = 0;
  for (; i + kLanes <= tile.count; i += kLanes) {
    if (i % 16 == 0) {  // one line of each f32 array per two iterations
      Prefetch(tile.params, i);
      Prefetch(tile.grads, i);
      Prefetch(m_base, i);
      Prefetch(v_base, i);
    }
    ElementwiseBody<Storage, kHalf>(k, tile.params, tile.grads, m_base, v_base, tile.half, i);
  }
  if (i < tile.count) {
    const int64_t n = tile.count - i;
    alignas(32) float p[kLanes] = {};
    alignas(32) float g[kLanes] = {};
    alignas(32) Elem m[kLanes] = {};
    alignas(32) Elem v[kLanes] = {};
    alignas(32) uint16_t h[kLanes] = {};
    CopyElements(tile.params + i, p, n);
    CopyElements(tile.grads + i, g, n);
    CopyElements(m_base + i, m, n);
    CopyElements(v_base + i, v, n);
    ElementwiseBody<Storage, kHalf>(k, p, g, m, v, h, 0);
    CopyElements(p, tile.params + i, n);
    CopyElements(m, m_base + i, n);
    CopyElements(v, v_base + i, n);
    if constexpr (kHalf != HalfKind::kNone) CopyElements(h, tile.half + i, n);
  }
}

template <typename Storage>
void StepElementwiseAnyHalf(const StepConstants& c, const TileArgs& tile) {
  switch (tile.half_kind) {
    case HalfKind::kNone:
      return StepElementwise<Storage, HalfKind::kNone>(c, tile);
    case HalfKind::kBF16:
      return StepElementwise<Storage, HalfKind::kBF16>(c, tile);
    case HalfKind::kF16:
      return StepElementwise<Storage, HalfKind::kF16>(c, tile);
  }
}

// -------------------------------------------------------------------------------------
// 8-bit codes: code_map.h's MagnitudeValue and EncodeMagnitude on 8 lanes.

// The code tables (internal/code_tables.h) in registers, looked up with vpermps.
struct Tables {
  __m256 encode_scale, encode_offset, decode_offset, decode_slope;
};

Tables LoadTables(const CodeTables& t) {
  return {_mm256_loadu_ps(t.encode_scale), _mm256_loadu_ps(t.encode_offset),
          _mm256_loadu_ps(t.decode_offset), _mm256_loadu_ps(t.decode_slope)};
}

// code_map.h's MagnitudeValue: exact.
__m256 MagnitudeValue(__m256i code, const Tables& t) {
  const __m256 c = _mm256_cvtepi32_ps(code);
  const __m256i l = _mm256_sub_epi32(_mm256_srli_epi32(_mm256_castps_si256(c), 23), Splat32(127));
  const __m256 value = _mm256_add_ps(_mm256_permutevar8x32_ps(t.decode_offset, l),
                                     _mm256_mul_ps(_mm256_permutevar8x32_ps(t.decode_slope, l), c));
  const __m256 zero = _mm256_castsi256_ps(_mm256_cmpeq_epi32(code, _mm256_setzero_si256()));
  return _mm256_andnot_ps(zero, value);
}

// code_map.h's EncodeMagnitude.
template <int kBits, int32_t kMinExponent>
__m256i EncodeMagnitude(__m256 r, const Tables& t) {
  const __m256i e = _mm256_min_epu32(
      _mm256_max_epu32(_mm256_srli_epi32(_mm256_castps_si256(r), 23), Splat32(kMinExponent)),
      Splat32(kMaxExponent));
  const __m256i z = _mm256_srli_epi32(_mm256_sub_epi32(Splat32(kMaxExponent), e), 2);
  const __m256 position =
      _mm256_sub_ps(_mm256_mul_ps(r, _mm256_permutevar8x32_ps(t.encode_scale, z)),
                    _mm256_permutevar8x32_ps(t.encode_offset, z));
  return _mm256_min_epu32(_mm256_cvtps_epi32(position), Splat32((1 << kBits) - 1));
}

__m256i AbsBits(__m256 x) { return _mm256_and_si256(_mm256_castps_si256(x), Splat32(0x7FFFFFFF)); }

__m256 DecodeSigned(__m256i code, __m256 absmax, const Tables& t) {
  const __m256 magnitude =
      _mm256_mul_ps(MagnitudeValue(_mm256_and_si256(code, Splat32(0x7F)), t), absmax);
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(code, Splat32(0x80)), 24);
  return _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(magnitude), sign));
}

__m256 DecodeUnsigned(__m256i code, __m256 absmax, const Tables& t) {
  return _mm256_mul_ps(MagnitudeValue(code, t), absmax);
}

__m256i EncodeSigned(__m256 x, __m256 inv_absmax, const Tables& t) {
  const __m256i magnitude = EncodeMagnitude<7, kSignedMinExponent>(
      _mm256_mul_ps(_mm256_castsi256_ps(AbsBits(x)), inv_absmax), t);
  const __m256i sign =
      _mm256_and_si256(_mm256_srli_epi32(_mm256_castps_si256(x), 24), Splat32(0x80));
  return _mm256_or_si256(magnitude, sign);
}

__m256i EncodeUnsigned(__m256 x, __m256 inv_absmax, const Tables& t) {
  return EncodeMagnitude<8, kUnsignedMinExponent>(
      _mm256_mul_ps(_mm256_castsi256_ps(AbsBits(x)), inv_absmax), t);
}

__m256i LoadCodes(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

void StoreCodes(uint8_t* p, __m256i codes) {
  const __m128i words = Narrow16(codes);
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm_packus_epi16(words, words));
}

uint32_t ReduceMax(__m256i lanes) {
  __m128i x = _mm_max_epu32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1));
  x = _mm_max_epu32(x, _mm_shuffle_epi32(x, 0x4E));
  x = _mm_max_epu32(x, _mm_shuffle_epi32(x, 0xB1));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(x));
}

float InverseScale(float absmax) { return absmax > 0.0f ? 1.0f / absmax : 0.0f; }

float BitsToFloat(uint32_t bits) {
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(bits))));
}

// Pass A of one 8-lane chunk: decode, update, keep the new moments in scratch.
template <HalfKind kHalf>
void DecodeUpdateBody(const Constants& k, const Tables& m_tables, const Tables& v_tables,
                      __m256 m_scale, __m256 v_scale, float* params, const float* grads,
                      const uint8_t* m_codes, const uint8_t* v_codes, uint16_t* half, int64_t i,
                      float* m_new, float* v_new, __m256i& m_max, __m256i& v_max) {
  __m256 m = DecodeSigned(LoadCodes(m_codes + i), m_scale, m_tables);
  __m256 v = DecodeUnsigned(LoadCodes(v_codes + i), v_scale, v_tables);
  const __m256 p = Update(k, _mm256_loadu_ps(params + i), _mm256_loadu_ps(grads + i), m, v);
  _mm256_storeu_ps(params + i, p);
  StoreHalf<kHalf>(half, i, p);
  _mm256_store_ps(m_new, m);
  _mm256_store_ps(v_new, v);
  m_max = _mm256_max_epu32(m_max, AbsBits(m));
  v_max = _mm256_max_epu32(v_max, AbsBits(v));
}

template <HalfKind kHalf>
void StepBlockwise8(const StepConstants& c, const TileArgs& tile_ref) {
  // A local copy: the stores below cannot alias it, so its pointers stay in registers.
  const TileArgs tile = tile_ref;
  const Constants k = Splat(c);
  const Tables m_tables = LoadTables(kSignedCodeTables);
  const Tables v_tables = LoadTables(kUnsignedCodeTables);
  uint8_t* const m_codes = static_cast<uint8_t*>(tile.m);
  uint8_t* const v_codes = static_cast<uint8_t*>(tile.v);
  alignas(32) float m_new[kMaxBlockSize];
  alignas(32) float v_new[kMaxBlockSize];
  for (int64_t begin = 0, block = 0; begin < tile.count; begin += tile.block_size, ++block) {
    const int64_t n = tile.count - begin < tile.block_size ? tile.count - begin : tile.block_size;
    const __m256 m_scale = _mm256_set1_ps(tile.m_absmax[block]);
    const __m256 v_scale = _mm256_set1_ps(tile.v_absmax[block]);
    __m256i m_max = _mm256_setzero_si256();
    __m256i v_max = _mm256_setzero_si256();
    int64_t j = 0;
    for (; j + kLanes <= n; j += kLanes) {
      if (j % 16 == 0) {
        Prefetch(tile.params, begin + j);
        Prefetch(tile.grads, begin + j);
      }
      if (j % 64 == 0) {
        Prefetch(m_codes, begin + j);
        Prefetch(v_codes, begin + j);
      }
      DecodeUpdateBody<kHalf>(k, m_tables, v_tables, m_scale, v_scale, tile.params, tile.grads,
                              m_codes, v_codes, tile.half, begin + j, m_new + j, v_new + j, m_max,
                              v_max);
    }
    if (j < n) {
      // Zero padding: the dead lanes' m and v stay 0 and leave the maxima alone.
      const int64_t lanes = n - j;
      const int64_t i = begin + j;
      alignas(32) float p[kLanes] = {};
      alignas(32) float g[kLanes] = {};
      alignas(32) uint8_t mc[kLanes] = {};
      alignas(32) uint8_t vc[kLanes] = {};
      alignas(32) uint16_t h[kLanes] = {};
      CopyElements(tile.params + i, p, lanes);
      CopyElements(tile.grads + i, g, lanes);
      CopyElements(m_codes + i, mc, lanes);
      CopyElements(v_codes + i, vc, lanes);
      DecodeUpdateBody<kHalf>(k, m_tables, v_tables, m_scale, v_scale, p, g, mc, vc, h, 0,
                              m_new + j, v_new + j, m_max, v_max);
      CopyElements(p, tile.params + i, lanes);
      if constexpr (kHalf != HalfKind::kNone) CopyElements(h, tile.half + i, lanes);
    }
    const float m_absmax = BitsToFloat(ReduceMax(m_max));
    const float v_absmax = BitsToFloat(ReduceMax(v_max));
    const __m256 m_inv = _mm256_set1_ps(InverseScale(m_absmax));
    const __m256 v_inv = _mm256_set1_ps(InverseScale(v_absmax));
    for (j = 0; j + kLanes <= n; j += kLanes) {
      StoreCodes(m_codes + begin + j, EncodeSigned(_mm256_load_ps(m_new + j), m_inv, m_tables));
      StoreCodes(v_codes + begin + j, EncodeUnsigned(_mm256_load_ps(v_new + j), v_inv, v_tables));
    }
    if (j < n) {
      alignas(32) uint8_t mc[kLanes];
      alignas(32) uint8_t vc[kLanes];
      StoreCodes(mc, EncodeSigned(_mm256_load_ps(m_new + j), m_inv, m_tables));
      StoreCodes(vc, EncodeUnsigned(_mm256_load_ps(v_new + j), v_inv, v_tables));
      CopyElements(mc, m_codes + begin + j, n - j);
      CopyElements(vc, v_codes + begin + j, n - j);
    }
    tile.m_absmax[block] = m_absmax;
    tile.v_absmax[block] = v_absmax;
  }
}

}  // namespace

void StepF32Avx2(const StepConstants& constants, const TileArgs& tile) {
  StepElementwiseAnyHalf<F32Storage>(constants, tile);
}

void StepBF16Avx2(const StepConstants& constants, const TileArgs& tile) {
  StepElementwiseAnyHalf<BF16Storage>(constants, tile);
}

void StepBlockwise8Avx2(const StepConstants& constants, const TileArgs& tile) {
  switch (tile.half_kind) {
    case HalfKind::kNone:
      return StepBlockwise8<HalfKind::kNone>(constants, tile);
    case HalfKind::kBF16:
      return StepBlockwise8<HalfKind::kBF16>(constants, tile);
    case HalfKind::kF16:
      return StepBlockwise8<HalfKind::kF16>(constants, tile);
  }
}

}  // namespace adamw_internal
}  // namespace loom
