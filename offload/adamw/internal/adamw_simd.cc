// The vector tile kernels, written once with Google Highway and compiled by
// foreach_target.h for each of its targets (this file is included again per target; the
// code outside HWY_ONCE is one target's kernels, the code inside it the table of every
// target's). CpuIsa::kAvx2 runs the HWY_AVX2 code (8 f32 lanes), kAvx512 the HWY_AVX3
// code (16 lanes).
//
// The element math is adamw_scalar.cc's Update, operation for operation (the package is
// built with -ffp-contract=off, so no multiply and add fuse); the 8-bit codes use
// code_map.h's functions, written on vectors with the tables of code_tables.h looked up
// in registers. A tile's tail (fewer elements than a vector) is copied into zeroed
// scratch vectors, run through the same vector code as the body and copied back: no
// byte outside the tile is read or written, and the tail cannot round differently.
//
// Every target's code sits in its own namespace (N_AVX2, N_AVX3) and is compiled with
// that target's attributes only; every helper has internal linkage, so the only symbols
// compiled for a target that the archive exports are its kTileKernels table (data;
// internal/isa_symbols_test.sh holds this).
#include <cstddef>
#include <cstdint>

#include "core/cpu_features.h"
#include "offload/adamw/internal/code_tables.h"
#include "offload/adamw/internal/kernels.h"
#include "offload/adamw/internal/simd_tile_kernels.h"

// The AVX2 and AVX3 passes (plus the static baseline, which foreach_target.h always
// compiles), whatever -march says: core/internal/simd_dispatch.h.
#define HWY_COMPILE_ALL_ATTAINABLE
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "offload/adamw/internal/adamw_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep (must precede highway.h)
#include "hwy/cache_control.h"
#include "hwy/highway.h"

// Only the AVX2 and AVX3 passes define kernels; kScalar runs adamw_scalar.cc.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
HWY_BEFORE_NAMESPACE();
namespace loom {
namespace adamw_internal {
namespace HWY_NAMESPACE {
namespace {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DU = hn::RebindToUnsigned<DF>;
using DI = hn::RebindToSigned<DF>;
using DU16 = hn::Rebind<uint16_t, DF>;
using DF16 = hn::Rebind<hwy::float16_t, DF>;
using DU8 = hn::Rebind<uint8_t, DF>;
using VF = hn::Vec<DF>;
using VU = hn::Vec<DU>;

constexpr int64_t kLanes = static_cast<int64_t>(hn::MaxLanes(DF()));
static_assert(kLanes == 8 || kLanes == 16, "AVX2 or AVX3 vectors of f32");

// Every per-vector helper is HWY_INLINE (always_inline): left to itself, GCC kept the
// bodies that both a loop and its tail call out of line, with the splatted constants
// spilled to the stack (measured 1.3x slower for AVX2 f32, 1.8x for AVX-512 8-bit).

// Software prefetch distance, in elements, for the streaming loops: with the long sqrt and
// divide chains in flight the out-of-order window covers too few iterations for the
// hardware prefetcher alone to keep DRAM busy (measured: about 90% of the bound without,
// about 100% with; 512 and 1024 measured alike, 2048 worse).
constexpr int64_t kPrefetch = 512;

// Prefetch asks for the cache line kPrefetch elements past base[i]. Lines past the end of
// the arrays are fine: prefetches do not fault (the address is formed as an integer).
template <typename T>
HWY_INLINE void Prefetch(const T* base, int64_t i) {
  const uintptr_t address =
      reinterpret_cast<uintptr_t>(base) + static_cast<uintptr_t>(i + kPrefetch) * sizeof(T);
  hwy::Prefetch(reinterpret_cast<const T*>(address));
}

HWY_INLINE VU SplatU(uint32_t value) { return hn::Set(DU(), value); }

struct Constants {
  VF beta1, one_minus_beta1, beta2, one_minus_beta2, grad_scale, eps, decay, step_size,
      inv_sqrt_bc2;
};

HWY_INLINE Constants Splat(const StepConstants& c) {
  const DF df;
  return {hn::Set(df, c.beta1),      hn::Set(df, c.one_minus_beta1), hn::Set(df, c.beta2),
          hn::Set(df, c.one_minus_beta2), hn::Set(df, c.grad_scale), hn::Set(df, c.eps),
          hn::Set(df, c.decay),      hn::Set(df, c.step_size),       hn::Set(df, c.inv_sqrt_bc2)};
}

// Update is adamw_scalar.cc's Update on a vector.
HWY_INLINE VF Update(const Constants& k, VF p, VF grad, VF& m, VF& v) {
  const VF g = hn::Mul(grad, k.grad_scale);
  m = hn::Add(hn::Mul(k.beta1, m), hn::Mul(k.one_minus_beta1, g));
  v = hn::Add(hn::Mul(k.beta2, v), hn::Mul(k.one_minus_beta2, hn::Mul(g, g)));
  const VF d = hn::Add(hn::Mul(hn::Sqrt(v), k.inv_sqrt_bc2), k.eps);
  return hn::Sub(hn::Mul(p, k.decay), hn::Mul(k.step_size, hn::Div(m, d)));
}

// Narrowing lanes that hold values which fit: AVX-512 truncates in one instruction
// (vpmovdw / vpmovdb), where Highway 1.0.3's portable DemoteTo packs and permutes; on
// AVX2 the saturating pack is what there is, and exact for these values.
HWY_INLINE hn::Vec<DU16> NarrowTo16(VU lanes) {
#if HWY_TARGET == HWY_AVX3
  return hn::Vec<DU16>{_mm512_cvtepi32_epi16(lanes.raw)};
#else
  return hn::DemoteTo(DU16(), hn::BitCast(DI(), lanes));
#endif
}

HWY_INLINE hn::Vec<DU8> NarrowTo8(VU lanes) {
#if HWY_TARGET == HWY_AVX3
  return hn::Vec<DU8>{_mm512_cvtepi32_epi8(lanes.raw)};
#else
  return hn::DemoteTo(DU8(), hn::BitCast(DI(), lanes));
#endif
}

// RoundToBF16 returns core/half.h's ToBFloat16 of each lane in its low 16 bits: add 0x7FFF
// plus the kept lsb so that the carry rounds to nearest even; NaNs are quieted instead,
// keeping sign and payload.
HWY_INLINE VU RoundToBF16(VF value) {
  const VU bits = hn::BitCast(DU(), value);
  const VU abs = hn::And(bits, SplatU(0x7FFFFFFFu));
  // abs < 2^31, so the signed compare is the unsigned one.
  const auto nan = hn::RebindMask(DU(), hn::Gt(hn::BitCast(DI(), abs), hn::Set(DI(), 0x7F800000)));
  const VU lsb = hn::And(hn::ShiftRight<16>(bits), SplatU(1));
  const VU rounded = hn::Add(bits, hn::Add(lsb, SplatU(0x7FFF)));
  const VU quieted = hn::Or(bits, SplatU(0x00400000u));
  return hn::ShiftRight<16>(hn::IfThenElse(nan, quieted, rounded));
}

HWY_INLINE VF WidenBF16(hn::Vec<DU16> bits) {
  return hn::BitCast(DF(), hn::ShiftLeft<16>(hn::PromoteTo(DU(), bits)));
}

// The 16-bit copy of the params. vcvtps2ph rounds by its immediate (nearest even), not by
// MXCSR, as ToFloat16 does. `half` is null for kNone, so the element offset is applied only
// when there is a copy.
template <HalfKind kHalf>
HWY_INLINE void StoreHalf(uint16_t* half, int64_t i, VF p) {
  if constexpr (kHalf == HalfKind::kBF16) {
    hn::StoreU(NarrowTo16(RoundToBF16(p)), DU16(), half + i);
  } else if constexpr (kHalf == HalfKind::kF16) {
    hn::StoreU(hn::DemoteTo(DF16(), p), DF16(), reinterpret_cast<hwy::float16_t*>(half + i));
  }
}

// How m and v are stored, for the element-wise formats.
struct F32Storage {
  using Elem = float;
  HWY_INLINE static VF Load(const float* p) { return hn::LoadU(DF(), p); }
  HWY_INLINE static void Store(float* p, VF v) { hn::StoreU(v, DF(), p); }
};

struct BF16Storage {
  using Elem = uint16_t;
  HWY_INLINE static VF Load(const uint16_t* p) { return WidenBF16(hn::LoadU(DU16(), p)); }
  HWY_INLINE static void Store(uint16_t* p, VF v) { hn::StoreU(NarrowTo16(RoundToBF16(v)), DU16(), p); }
};

template <typename T>
void CopyElements(const T* src, T* dst, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] = src[i];
}

template <typename Storage, HalfKind kHalf>
HWY_INLINE void ElementwiseBody(const Constants& k, float* params, const float* grads,
                     typename Storage::Elem* m_base, typename Storage::Elem* v_base,
                     uint16_t* half, int64_t i) {
  VF m = Storage::Load(m_base + i);
  VF v = Storage::Load(v_base + i);
  const VF p = Update(k, hn::LoadU(DF(), params + i), hn::LoadU(DF(), grads + i), m, v);
  hn::StoreU(p, DF(), params + i);
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
    if (i % 16 == 0) {  // one line of each f32 array per 16 elements
      Prefetch(tile.params, i);
      Prefetch(tile.grads, i);
      Prefetch(m_base, i);
      Prefetch(v_base, i);
    }
    ElementwiseBody<Storage, kHalf>(k, tile.params, tile.grads, m_base, v_base, tile.half, i);
  }
  if (i < tile.count) {
    const int64_t n = tile.count - i;
    alignas(64) float p[kLanes] = {};
    alignas(64) float g[kLanes] = {};
    alignas(64) Elem m[kLanes] = {};
    alignas(64) Elem v[kLanes] = {};
    alignas(64) uint16_t h[kLanes] = {};
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
// 8-bit codes: code_map.h's MagnitudeValue and EncodeMagnitude on vectors.

// One code map's tables in registers (internal/code_tables.h), and the lookups, which
// differ per target only in how an entry is indexed. AVX2 derives the 8-entry tables'
// index (l, or the group z) and looks up with vpermps. AVX-512 indexes 16-entry copies by
// 15 - l (vpermps with a zeroing mask for code 0) and 32-entry copies, in two registers,
// by the clamped exponent itself (vpermt2ps): two to three instructions fewer per lookup,
// which the compute-bound 8-bit step shows (measured 1.2x before).
#if HWY_TARGET == HWY_AVX3
struct Tables {
  VF scale_lo, scale_hi, offset_lo, offset_hi;  // by exponent mod 32
  VF decode_offset, decode_slope;               // by 15 - l
};

HWY_INLINE Tables LoadTables(const CodeTables& t) {
  const DF df;
  return {hn::LoadU(df, t.encode_scale_by_exponent),
          hn::LoadU(df, t.encode_scale_by_exponent + 16),
          hn::LoadU(df, t.encode_offset_by_exponent),
          hn::LoadU(df, t.encode_offset_by_exponent + 16),
          hn::LoadU(df, t.decode_offset_by_lzcnt),
          hn::LoadU(df, t.decode_slope_by_lzcnt)};
}

// The decode entries of l = exponent(c) - 127; vpermps reads the low 4 bits of
// 142 - exponent(c), which is 15 - l. Code 0's lanes are zeroed.
HWY_INLINE void DecodeEntries(VU code, VU exponent, const Tables& t, VF& offset, VF& slope) {
  const __mmask16 nonzero = _mm512_test_epi32_mask(code.raw, code.raw);
  const __m512i index = hn::Sub(SplatU(142), exponent).raw;
  offset = VF{_mm512_maskz_permutexvar_ps(nonzero, index, t.decode_offset.raw)};
  slope = VF{_mm512_maskz_permutexvar_ps(nonzero, index, t.decode_slope.raw)};
}

// The encode entries of the clamped exponent e (vpermt2ps reads its low 5 bits).
HWY_INLINE void EncodeEntries(VU e, const Tables& t, VF& scale, VF& offset) {
  scale = VF{_mm512_permutex2var_ps(t.scale_lo.raw, e.raw, t.scale_hi.raw)};
  offset = VF{_mm512_permutex2var_ps(t.offset_lo.raw, e.raw, t.offset_hi.raw)};
}

// vcvtps2dq: nearest even; NaN and out-of-range lanes give 0x80000000 (no fix-up, unlike
// Highway's NearestInt, which EncodeMagnitude's unsigned min does not need).
HWY_INLINE VU RoundToInt(VF x) { return VU{_mm512_cvtps_epi32(x.raw)}; }
#else
struct Tables {
  VF encode_scale, encode_offset, decode_offset, decode_slope;  // 8 entries each
};

HWY_INLINE Tables LoadTables(const CodeTables& t) {
  const DF df;
  return {hn::LoadU(df, t.encode_scale), hn::LoadU(df, t.encode_offset),
          hn::LoadU(df, t.decode_offset), hn::LoadU(df, t.decode_slope)};
}

// Lookup returns table[index] per lane; every index is below 8.
HWY_INLINE VF Lookup(VF table, VU index) {
  return hn::TableLookupLanes(table, hn::IndicesFromVec(DF(), hn::BitCast(DI(), index)));
}

// The decode entries of l = exponent(c) - 127 (masked to 3 bits); code 0's lanes are
// zeroed.
HWY_INLINE void DecodeEntries(VU code, VU exponent, const Tables& t, VF& offset, VF& slope) {
  const VU l = hn::And(hn::Sub(exponent, SplatU(127)), SplatU(7));
  const auto zero = hn::RebindMask(DF(), hn::Eq(code, hn::Zero(DU())));
  offset = hn::IfThenZeroElse(zero, Lookup(t.decode_offset, l));
  slope = hn::IfThenZeroElse(zero, Lookup(t.decode_slope, l));
}

// The encode entries of the clamped exponent e: its group z = (126 - e) / 4.
HWY_INLINE void EncodeEntries(VU e, const Tables& t, VF& scale, VF& offset) {
  const VU z = hn::ShiftRight<2>(hn::Sub(SplatU(kMaxExponent), e));
  scale = Lookup(t.encode_scale, z);
  offset = Lookup(t.encode_offset, z);
}

// vcvtps2dq, as on AVX-512.
HWY_INLINE VU RoundToInt(VF x) { return VU{_mm256_cvtps_epi32(x.raw)}; }
#endif

// code_map.h's MagnitudeValue: exact. l = floor(log2 c) is the exponent of c as a float
// (c < 2^8 converts exactly); code 0 has zero entries and decodes to 0.
HWY_INLINE VF MagnitudeValue(VU code, const Tables& t) {
  const VF c = hn::ConvertTo(DF(), hn::BitCast(DI(), code));
  VF offset;
  VF slope;
  DecodeEntries(code, hn::ShiftRight<23>(hn::BitCast(DU(), c)), t, offset, slope);
  return hn::Add(offset, hn::Mul(slope, c));
}

// code_map.h's EncodeMagnitude: r's exponent clamped to [kMinExponent, kMaxExponent]
// picks the group; the rounded position saturates (unsigned min) at the top code, which
// a NaN or a huge position, converted to 0x80000000, also gives.
template <int kBits, int32_t kMinExponent>
HWY_INLINE VU EncodeMagnitude(VF r, const Tables& t) {
  const VU e = hn::Min(hn::Max(hn::ShiftRight<23>(hn::BitCast(DU(), r)), SplatU(kMinExponent)),
                       SplatU(kMaxExponent));
  VF scale;
  VF offset;
  EncodeEntries(e, t, scale, offset);
  return hn::Min(RoundToInt(hn::Sub(hn::Mul(r, scale), offset)), SplatU((1u << kBits) - 1));
}

HWY_INLINE VU AbsBits(VF x) { return hn::And(hn::BitCast(DU(), x), SplatU(0x7FFFFFFFu)); }

HWY_INLINE VF DecodeSigned(VU code, VF absmax, const Tables& t) {
  const VF magnitude = hn::Mul(MagnitudeValue(hn::And(code, SplatU(0x7F)), t), absmax);
  const VU sign = hn::ShiftLeft<24>(hn::And(code, SplatU(0x80)));
  return hn::BitCast(DF(), hn::Or(hn::BitCast(DU(), magnitude), sign));
}

HWY_INLINE VF DecodeUnsigned(VU code, VF absmax, const Tables& t) {
  return hn::Mul(MagnitudeValue(code, t), absmax);
}

HWY_INLINE VU EncodeSigned(VF x, VF inv_absmax, const Tables& t) {
  const VU magnitude = EncodeMagnitude<7, kSignedMinExponent>(
      hn::Mul(hn::BitCast(DF(), AbsBits(x)), inv_absmax), t);
  const VU sign = hn::And(hn::ShiftRight<24>(hn::BitCast(DU(), x)), SplatU(0x80));
  return hn::Or(magnitude, sign);
}

HWY_INLINE VU EncodeUnsigned(VF x, VF inv_absmax, const Tables& t) {
  return EncodeMagnitude<8, kUnsignedMinExponent>(
      hn::Mul(hn::BitCast(DF(), AbsBits(x)), inv_absmax), t);
}

HWY_INLINE VU LoadCodes(const uint8_t* p) { return hn::PromoteTo(DU(), hn::LoadU(DU8(), p)); }

HWY_INLINE void StoreCodes(uint8_t* p, VU codes) { hn::StoreU(NarrowTo8(codes), DU8(), p); }

float InverseScale(float absmax) { return absmax > 0.0f ? 1.0f / absmax : 0.0f; }

float BitsToFloat(uint32_t bits) { return hn::GetLane(hn::BitCast(DF(), SplatU(bits))); }

// Pass A of one vector: decode, update, keep the new moments in scratch.
template <HalfKind kHalf>
HWY_INLINE void DecodeUpdateBody(const Constants& k, const Tables& m_tables, const Tables& v_tables,
                      VF m_scale, VF v_scale, float* params, const float* grads,
                      const uint8_t* m_codes, const uint8_t* v_codes, uint16_t* half, int64_t i,
                      float* m_new, float* v_new, VU& m_max, VU& v_max) {
  VF m = DecodeSigned(LoadCodes(m_codes + i), m_scale, m_tables);
  VF v = DecodeUnsigned(LoadCodes(v_codes + i), v_scale, v_tables);
  const VF p = Update(k, hn::LoadU(DF(), params + i), hn::LoadU(DF(), grads + i), m, v);
  hn::StoreU(p, DF(), params + i);
  StoreHalf<kHalf>(half, i, p);
  hn::Store(m, DF(), m_new);
  hn::Store(v, DF(), v_new);
  m_max = hn::Max(m_max, AbsBits(m));
  v_max = hn::Max(v_max, AbsBits(v));
}

// Per block: decode, update and keep the new m and v in an L1-resident scratch while
// taking their absmax (pass A), then encode them against the new absmax (pass B).
template <HalfKind kHalf>
void StepBlockwise8(const StepConstants& c, const TileArgs& tile_ref) {
  // A local copy: the stores below cannot alias it, so its pointers stay in registers.
  const TileArgs tile = tile_ref;
  const DF df;
  const Constants k = Splat(c);
  const Tables m_tables = LoadTables(kSignedCodeTables);
  const Tables v_tables = LoadTables(kUnsignedCodeTables);
  uint8_t* const m_codes = static_cast<uint8_t*>(tile.m);
  uint8_t* const v_codes = static_cast<uint8_t*>(tile.v);
  alignas(64) float m_new[kMaxBlockSize];
  alignas(64) float v_new[kMaxBlockSize];
  for (int64_t begin = 0, block = 0; begin < tile.count; begin += tile.block_size, ++block) {
    const int64_t n = tile.count - begin < tile.block_size ? tile.count - begin : tile.block_size;
    const VF m_scale = hn::Set(df, tile.m_absmax[block]);
    const VF v_scale = hn::Set(df, tile.v_absmax[block]);
    VU m_max = hn::Zero(DU());
    VU v_max = hn::Zero(DU());
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
      alignas(64) float p[kLanes] = {};
      alignas(64) float g[kLanes] = {};
      alignas(64) uint8_t mc[kLanes] = {};
      alignas(64) uint8_t vc[kLanes] = {};
      alignas(64) uint16_t h[kLanes] = {};
      CopyElements(tile.params + i, p, lanes);
      CopyElements(tile.grads + i, g, lanes);
      CopyElements(m_codes + i, mc, lanes);
      CopyElements(v_codes + i, vc, lanes);
      DecodeUpdateBody<kHalf>(k, m_tables, v_tables, m_scale, v_scale, p, g, mc, vc, h, 0,
                              m_new + j, v_new + j, m_max, v_max);
      CopyElements(p, tile.params + i, lanes);
      if constexpr (kHalf != HalfKind::kNone) CopyElements(h, tile.half + i, lanes);
    }
    const float m_absmax = BitsToFloat(hn::GetLane(hn::MaxOfLanes(DU(), m_max)));
    const float v_absmax = BitsToFloat(hn::GetLane(hn::MaxOfLanes(DU(), v_max)));
    const VF m_inv = hn::Set(df, InverseScale(m_absmax));
    const VF v_inv = hn::Set(df, InverseScale(v_absmax));
    for (j = 0; j + kLanes <= n; j += kLanes) {
      StoreCodes(m_codes + begin + j, EncodeSigned(hn::Load(df, m_new + j), m_inv, m_tables));
      StoreCodes(v_codes + begin + j, EncodeUnsigned(hn::Load(df, v_new + j), v_inv, v_tables));
    }
    if (j < n) {
      alignas(64) uint8_t mc[kLanes];
      alignas(64) uint8_t vc[kLanes];
      StoreCodes(mc, EncodeSigned(hn::Load(df, m_new + j), m_inv, m_tables));
      StoreCodes(vc, EncodeUnsigned(hn::Load(df, v_new + j), v_inv, v_tables));
      CopyElements(mc, m_codes + begin + j, n - j);
      CopyElements(vc, v_codes + begin + j, n - j);
    }
    tile.m_absmax[block] = m_absmax;
    tile.v_absmax[block] = v_absmax;
  }
}

// --- This target's entry points ---------------------------------------------------

void StepF32(const StepConstants& constants, const TileArgs& tile) {
  StepElementwiseAnyHalf<F32Storage>(constants, tile);
}

void StepBF16(const StepConstants& constants, const TileArgs& tile) {
  StepElementwiseAnyHalf<BF16Storage>(constants, tile);
}

void StepBlockwise8Any(const StepConstants& constants, const TileArgs& tile) {
  switch (tile.half_kind) {
    case HalfKind::kNone:
      return StepBlockwise8<HalfKind::kNone>(constants, tile);
    case HalfKind::kBF16:
      return StepBlockwise8<HalfKind::kBF16>(constants, tile);
    case HalfKind::kF16:
      return StepBlockwise8<HalfKind::kF16>(constants, tile);
  }
}

}  // namespace

extern const TileKernels kTileKernels;
const TileKernels kTileKernels = {&StepF32, &StepBF16, &StepBlockwise8Any};

}  // namespace HWY_NAMESPACE
}  // namespace adamw_internal
}  // namespace loom
HWY_AFTER_NAMESPACE();
#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

#if HWY_ONCE
#include "core/internal/simd_dispatch.h"

namespace loom {
namespace adamw_internal {

const TileKernels* SimdTileKernels(CpuIsa isa) {
  return core_internal::SimdTableFor(isa, &N_AVX2::kTileKernels, &N_AVX3::kTileKernels);
}

}  // namespace adamw_internal
}  // namespace loom
#endif  // HWY_ONCE
