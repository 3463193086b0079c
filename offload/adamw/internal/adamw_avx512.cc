// AVX-512 kernels: 16 lanes, masked loads and stores for tails (no byte outside the tile is
// read or written). The element math is adamw_scalar.cc's Update, operation for operation;
// the 8-bit codes use code_map.h's functions, written on vectors.
//
// This file is compiled with -mavx512f -mavx512bw -mavx512cd -mf16c (its own cc_library,
// see BUILD) and runs only where SupportedIsa() reports AVX-512. It includes nothing but
// <immintrin.h>, <cstdint> and the plain internal/kernels.h and code_tables.h, and keeps
// every helper in an anonymous namespace, so no function with external linkage is compiled
// for AVX-512 except the three entry points.
#include "core/internal/x86_intrinsics.h"  // first: see there

#include <cstdint>

#include "offload/adamw/internal/code_tables.h"
#include "offload/adamw/internal/kernels.h"

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512CD__) || !defined(__F16C__)
#error "adamw_avx512.cc needs -mavx512f -mavx512bw -mavx512cd -mf16c (offload/adamw/BUILD)"
#endif

namespace loom {
namespace adamw_internal {
namespace {

constexpr int64_t kLanes = 16;
// Software prefetch distance, in elements, for the streaming loops: with the long sqrt and
// divide chains in flight the out-of-order window covers too few iterations for the
// hardware prefetcher alone to keep DRAM busy (measured: about 90% of the bound without,
// about 100% with; 512 and 1024 measured alike, 2048 worse).
constexpr int64_t kPrefetch = 512;

// Prefetch asks for the cache line kPrefetch elements past base[i]. Lines past the end of
// the arrays are fine: prefetches do not fault (the address is formed as an integer).
template <typename T>
void Prefetch(const T* base, int64_t i) {
  const uintptr_t address =
      reinterpret_cast<uintptr_t>(base) + static_cast<uintptr_t>(i + kPrefetch) * sizeof(T);
  _mm_prefetch(reinterpret_cast<const char*>(address), _MM_HINT_T0);
}

__mmask16 Mask16(int64_t count) { return static_cast<__mmask16>((1u << count) - 1u); }
__mmask32 Mask32(int64_t count) { return static_cast<__mmask32>((uint32_t{1} << count) - 1u); }
__mmask64 Mask64(int64_t count) { return static_cast<__mmask64>((uint64_t{1} << count) - 1u); }

struct Constants {
  __m512 beta1, one_minus_beta1, beta2, one_minus_beta2, grad_scale, eps, decay, step_size,
      inv_sqrt_bc2;
};

Constants Splat(const StepConstants& c) {
  return {_mm512_set1_ps(c.beta1),       _mm512_set1_ps(c.one_minus_beta1),
          _mm512_set1_ps(c.beta2),       _mm512_set1_ps(c.one_minus_beta2),
          _mm512_set1_ps(c.grad_scale),  _mm512_set1_ps(c.eps),
          _mm512_set1_ps(c.decay),       _mm512_set1_ps(c.step_size),
          _mm512_set1_ps(c.inv_sqrt_bc2)};
}

// Update is adamw_scalar.cc's Update on 16 lanes.
__m512 Update(const Constants& k, __m512 p, __m512 grad, __m512& m, __m512& v) {
  const __m512 g = _mm512_mul_ps(grad, k.grad_scale);
  m = _mm512_add_ps(_mm512_mul_ps(k.beta1, m), _mm512_mul_ps(k.one_minus_beta1, g));
  v = _mm512_add_ps(_mm512_mul_ps(k.beta2, v),
                    _mm512_mul_ps(k.one_minus_beta2, _mm512_mul_ps(g, g)));
  const __m512 d = _mm512_add_ps(_mm512_mul_ps(_mm512_sqrt_ps(v), k.inv_sqrt_bc2), k.eps);
  return _mm512_sub_ps(_mm512_mul_ps(p, k.decay), _mm512_mul_ps(k.step_size, _mm512_div_ps(m, d)));
}

// RoundToBF16 returns core/half.h's ToBFloat16 of each lane in its low 16 bits: add 0x7FFF
// plus the kept lsb so the carry rounds to nearest even; NaNs are quieted instead, keeping
// sign and payload.
__m512i RoundToBF16(__m512 v) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i abs = _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF));
  const __mmask16 nan = _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7F800000));
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
  return _mm512_srli_epi32(_mm512_mask_or_epi32(rounded, nan, bits, _mm512_set1_epi32(0x00400000)),
                           16);
}

__m512 WidenBF16(__m256i bits) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

// The 16-bit copy of the params; vcvtps2ph with an immediate rounding mode rounds to
// nearest even whatever MXCSR says, as ToFloat16 does. `half` is null for kNone, so the
// element offset is applied only when there is a copy.
template <HalfKind kHalf>
void StoreHalf(uint16_t* half, int64_t i, __m512 p) {
  if constexpr (kHalf == HalfKind::kBF16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(half + i),
                        _mm512_cvtepi32_epi16(RoundToBF16(p)));
  } else if constexpr (kHalf == HalfKind::kF16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(half + i),
                        _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}

template <HalfKind kHalf>
void StoreHalfPartial(uint16_t* half, int64_t i, int64_t count, __m512 p) {
  if constexpr (kHalf == HalfKind::kBF16) {
    _mm512_mask_cvtepi32_storeu_epi16(half + i, Mask16(count), RoundToBF16(p));
  } else if constexpr (kHalf == HalfKind::kF16) {
    _mm512_mask_storeu_epi16(
        half + i, Mask32(count),
        _mm512_castsi256_si512(_mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
  }
}

struct F32Storage {
  using Elem = float;
  static __m512 Load(const float* p) { return _mm512_loadu_ps(p); }
  static __m512 LoadPartial(const float* p, int64_t count) {
    return _mm512_maskz_loadu_ps(Mask16(count), p);
  }
  static void Store(float* p, __m512 v) { _mm512_storeu_ps(p, v); }
  static void StorePartial(float* p, int64_t count, __m512 v) {
    _mm512_mask_storeu_ps(p, Mask16(count), v);
  }
};

struct BF16Storage {
  using Elem = uint16_t;
  static __m512 Load(const uint16_t* p) {
    return WidenBF16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static __m512 LoadPartial(const uint16_t* p, int64_t count) {
    return WidenBF16(_mm512_castsi512_si256(_mm512_maskz_loadu_epi16(Mask32(count), p)));
  }
  static void Store(uint16_t* p, __m512 v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(RoundToBF16(v)));
  }
  static void StorePartial(uint16_t* p, int64_t count, __m512 v) {
    _mm512_mask_cvtepi32_storeu_epi16(p, Mask16(count), RoundToBF16(v));
  }
};

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
    Prefetch(tile.params, i);
    Prefetch(tile.grads, i);
    Prefetch(m_base, i);
    Prefetch(v_base, i);
    __m512 m = Storage::Load(m_base + i);
    __m512 v = Storage::Load(v_base + i);
    const __m512 p =
        Update(k, _mm512_loadu_ps(tile.params + i), _mm512_loadu_ps(tile.grads + i), m, v);
    _mm512_storeu_ps(tile.params + i, p);
    Storage::Store(m_base + i, m);
    Storage::Store(v_base + i, v);
    StoreHalf<kHalf>(tile.half, i, p);
  }
  if (i < tile.count) {
    const int64_t n = tile.count - i;
    __m512 m = Storage::LoadPartial(m_base + i, n);
    __m512 v = Storage::LoadPartial(v_base + i, n);
    const __m512 p = Update(k, _mm512_maskz_loadu_ps(Mask16(n), tile.params + i),
                            _mm512_maskz_loadu_ps(Mask16(n), tile.grads + i), m, v);
    _mm512_mask_storeu_ps(tile.params + i, Mask16(n), p);
    Storage::StorePartial(m_base + i, n, m);
    Storage::StorePartial(v_base + i, n, v);
    StoreHalfPartial<kHalf>(tile.half, i, n, p);
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
// 8-bit codes: code_map.h's MagnitudeValue and EncodeMagnitude on 16 lanes.

// The code tables (internal/code_tables.h) in registers, looked up with vpermps (16
// entries: decoding by lzcnt) and vpermt2ps (32 entries in two registers: encoding by
// exponent).
struct Tables {
  __m512 scale_lo, scale_hi, offset_lo, offset_hi, decode_offset, decode_slope;
};

Tables LoadTables(const CodeTables& t) {
  return {_mm512_loadu_ps(t.encode_scale_by_exponent),
          _mm512_loadu_ps(t.encode_scale_by_exponent + 16),
          _mm512_loadu_ps(t.encode_offset_by_exponent),
          _mm512_loadu_ps(t.encode_offset_by_exponent + 16),
          _mm512_loadu_ps(t.decode_offset_by_lzcnt),
          _mm512_loadu_ps(t.decode_slope_by_lzcnt)};
}

// code_map.h's MagnitudeValue: exact. vpermps reads the low 4 bits of lzcnt(code).
__m512 MagnitudeValue(__m512i code, const Tables& t) {
  const __m512i index = _mm512_lzcnt_epi32(code);
  return _mm512_add_ps(
      _mm512_permutexvar_ps(index, t.decode_offset),
      _mm512_mul_ps(_mm512_permutexvar_ps(index, t.decode_slope), _mm512_cvtepi32_ps(code)));
}

// code_map.h's EncodeMagnitude. vpermt2ps reads the low 5 bits of the clamped exponent.
template <int kBits, int32_t kMinExponent>
__m512i EncodeMagnitude(__m512 r, const Tables& t) {
  const __m512i e = _mm512_min_epu32(_mm512_max_epu32(_mm512_srli_epi32(_mm512_castps_si512(r), 23),
                                                      _mm512_set1_epi32(kMinExponent)),
                                     _mm512_set1_epi32(kMaxExponent));
  const __m512 position =
      _mm512_sub_ps(_mm512_mul_ps(r, _mm512_permutex2var_ps(t.scale_lo, e, t.scale_hi)),
                    _mm512_permutex2var_ps(t.offset_lo, e, t.offset_hi));
  return _mm512_min_epu32(_mm512_cvtps_epi32(position), _mm512_set1_epi32((1 << kBits) - 1));
}

__m512i AbsBits(__m512 x) {
  return _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7FFFFFFF));
}

__m512 DecodeSigned(__m512i code, __m512 absmax, const Tables& t) {
  const __m512 magnitude =
      _mm512_mul_ps(MagnitudeValue(_mm512_and_si512(code, _mm512_set1_epi32(0x7F)), t), absmax);
  const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(code, _mm512_set1_epi32(0x80)), 24);
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(magnitude), sign));
}

__m512 DecodeUnsigned(__m512i code, __m512 absmax, const Tables& t) {
  return _mm512_mul_ps(MagnitudeValue(code, t), absmax);
}

__m512i EncodeSigned(__m512 x, __m512 inv_absmax, const Tables& t) {
  const __m512i magnitude = EncodeMagnitude<7, kSignedMinExponent>(
      _mm512_mul_ps(_mm512_castsi512_ps(AbsBits(x)), inv_absmax), t);
  const __m512i sign =
      _mm512_and_si512(_mm512_srli_epi32(_mm512_castps_si512(x), 24), _mm512_set1_epi32(0x80));
  return _mm512_or_si512(magnitude, sign);
}

__m512i EncodeUnsigned(__m512 x, __m512 inv_absmax, const Tables& t) {
  return EncodeMagnitude<8, kUnsignedMinExponent>(
      _mm512_mul_ps(_mm512_castsi512_ps(AbsBits(x)), inv_absmax), t);
}

__m512i LoadCodes(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
__m512i LoadCodesPartial(const uint8_t* p, int64_t count) {
  return _mm512_cvtepu8_epi32(_mm512_castsi512_si128(_mm512_maskz_loadu_epi8(Mask64(count), p)));
}

float InverseScale(float absmax) { return absmax > 0.0f ? 1.0f / absmax : 0.0f; }

float BitsToFloat(uint32_t bits) {
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(bits))));
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
  alignas(64) float m_new[kMaxBlockSize];
  alignas(64) float v_new[kMaxBlockSize];
  for (int64_t begin = 0, block = 0; begin < tile.count; begin += tile.block_size, ++block) {
    const int64_t n = tile.count - begin < tile.block_size ? tile.count - begin : tile.block_size;
    const __m512 m_scale = _mm512_set1_ps(tile.m_absmax[block]);
    const __m512 v_scale = _mm512_set1_ps(tile.v_absmax[block]);
    __m512i m_max = _mm512_setzero_si512();
    __m512i v_max = _mm512_setzero_si512();
    // Pass A: decode, update, keep the new moments. A partial chunk loads zeros into its
    // dead lanes, whose m and v stay 0 and so leave the maxima alone.
    for (int64_t j = 0; j < n; j += kLanes) {
      const int64_t i = begin + j;
      const int64_t lanes = n - j < kLanes ? n - j : kLanes;
      __m512 m;
      __m512 v;
      __m512 p;
      if (lanes == kLanes) {
        Prefetch(tile.params, i);
        Prefetch(tile.grads, i);
        if (j % 64 == 0) {
          Prefetch(m_codes, i);
          Prefetch(v_codes, i);
        }
        m = DecodeSigned(LoadCodes(m_codes + i), m_scale, m_tables);
        v = DecodeUnsigned(LoadCodes(v_codes + i), v_scale, v_tables);
        p = Update(k, _mm512_loadu_ps(tile.params + i), _mm512_loadu_ps(tile.grads + i), m, v);
        _mm512_storeu_ps(tile.params + i, p);
        StoreHalf<kHalf>(tile.half, i, p);
      } else {
        m = DecodeSigned(LoadCodesPartial(m_codes + i, lanes), m_scale, m_tables);
        v = DecodeUnsigned(LoadCodesPartial(v_codes + i, lanes), v_scale, v_tables);
        p = Update(k, _mm512_maskz_loadu_ps(Mask16(lanes), tile.params + i),
                   _mm512_maskz_loadu_ps(Mask16(lanes), tile.grads + i), m, v);
        _mm512_mask_storeu_ps(tile.params + i, Mask16(lanes), p);
        StoreHalfPartial<kHalf>(tile.half, i, lanes, p);
      }
      _mm512_store_ps(m_new + j, m);
      _mm512_store_ps(v_new + j, v);
      m_max = _mm512_max_epu32(m_max, AbsBits(m));
      v_max = _mm512_max_epu32(v_max, AbsBits(v));
    }
    const float m_absmax = BitsToFloat(_mm512_reduce_max_epu32(m_max));
    const float v_absmax = BitsToFloat(_mm512_reduce_max_epu32(v_max));
    const __m512 m_inv = _mm512_set1_ps(InverseScale(m_absmax));
    const __m512 v_inv = _mm512_set1_ps(InverseScale(v_absmax));
    // Pass B: encode against the new absmax.
    for (int64_t j = 0; j < n; j += kLanes) {
      const int64_t i = begin + j;
      const int64_t lanes = n - j < kLanes ? n - j : kLanes;
      const __m512i mc = EncodeSigned(_mm512_load_ps(m_new + j), m_inv, m_tables);
      const __m512i vc = EncodeUnsigned(_mm512_load_ps(v_new + j), v_inv, v_tables);
      if (lanes == kLanes) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(m_codes + i), _mm512_cvtepi32_epi8(mc));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(v_codes + i), _mm512_cvtepi32_epi8(vc));
      } else {
        _mm512_mask_cvtepi32_storeu_epi8(m_codes + i, Mask16(lanes), mc);
        _mm512_mask_cvtepi32_storeu_epi8(v_codes + i, Mask16(lanes), vc);
      }
    }
    tile.m_absmax[block] = m_absmax;
    tile.v_absmax[block] = v_absmax;
  }
}

}  // namespace

void StepF32Avx512(const StepConstants& constants, const TileArgs& tile) {
  StepElementwiseAnyHalf<F32Storage>(constants, tile);
}

void StepBF16Avx512(const StepConstants& constants, const TileArgs& tile) {
  StepElementwiseAnyHalf<BF16Storage>(constants, tile);
}

void StepBlockwise8Avx512(const StepConstants& constants, const TileArgs& tile) {
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
