// AVX-512 kernels: 512-bit registers, masked loads and stores for the tail, so no lane
// outside the spans is read or written.
//
// Only the functions marked LOOM_AVX512 are compiled for AVX-512 (function-level target
// attributes, no package-wide -mavx512* flags), so this file links into binaries that
// run on CPUs without it; IsaSupported() keeps those CPUs off these kernels. Everything
// here sits in an anonymous namespace: the AVX2 file has helpers of the same shape, and
// an inline function with external linkage compiled for AVX-512 could be picked by the
// linker for an AVX2 caller.
//
// f32, f16 and bf16 all compute in f32 registers (F32Math); the storage types differ
// only in how 16 lanes are loaded and stored. f16 converts with vcvtph2ps / vcvtps2ph,
// bf16 with integer shifts and rounding, both exactly as core/half.h does.
#include "core/internal/x86_intrinsics.h"  // first: see there

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"
#include "collectives/reduce/internal/reduce_kernels.h"
#include "core/buffer_view.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/reduce_op.h"

#define LOOM_AVX512 __attribute__((target("avx512f,avx512bw,f16c")))

namespace loom {
namespace reduce_internal {
namespace {

// The masks select the first `count` lanes; count is below the lane count.
__mmask8 Mask8(size_t count) { return static_cast<__mmask8>((1u << count) - 1u); }
__mmask16 Mask16(size_t count) { return static_cast<__mmask16>((1u << count) - 1u); }
__mmask32 Mask32(size_t count) { return static_cast<__mmask32>((uint32_t{1} << count) - 1u); }
__mmask64 Mask64(size_t count) { return static_cast<__mmask64>((uint64_t{1} << count) - 1u); }

// F32Math: the reductions on 16 f32 lanes, bitwise equal to the scalar Combine.
struct F32Math {
  using Vec = __m512;
  using Scalar = float;
  static constexpr bool kHasProd = true;

  LOOM_AVX512 static Vec Splat(float value) { return _mm512_set1_ps(value); }
  LOOM_AVX512 static Vec CanonicalNaN() {
    return _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(kCanonicalNaNF32Bits)));
  }
  LOOM_AVX512 static Vec Canonicalize(Vec v) {
    return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), CanonicalNaN());
  }
  LOOM_AVX512 static Vec Sum(Vec a, Vec b) { return Canonicalize(_mm512_add_ps(a, b)); }
  LOOM_AVX512 static Vec Prod(Vec a, Vec b) { return Canonicalize(_mm512_mul_ps(a, b)); }
  // vminps / vmaxps return the second operand for NaNs and for ±0 pairs; equal lanes
  // take a|b (min: -0 wins) or a&b (max: +0 wins), unordered lanes the canonical NaN.
  LOOM_AVX512 static Vec Min(Vec a, Vec b) {
    const __m512i ai = _mm512_castps_si512(a);
    const __m512i bi = _mm512_castps_si512(b);
    __m512i r = _mm512_castps_si512(_mm512_min_ps(a, b));
    r = _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ), ai, bi);
    return _mm512_mask_mov_ps(_mm512_castsi512_ps(r), _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q),
                              CanonicalNaN());
  }
  LOOM_AVX512 static Vec Max(Vec a, Vec b) {
    const __m512i ai = _mm512_castps_si512(a);
    const __m512i bi = _mm512_castps_si512(b);
    __m512i r = _mm512_castps_si512(_mm512_max_ps(a, b));
    r = _mm512_mask_and_epi32(r, _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ), ai, bi);
    return _mm512_mask_mov_ps(_mm512_castsi512_ps(r), _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q),
                              CanonicalNaN());
  }
  LOOM_AVX512 static Vec Div(Vec a, Vec b) { return _mm512_div_ps(a, b); }
};

struct F32Lanes : F32Math {
  using Storage = float;
  static constexpr size_t kLanes = 16;
  LOOM_AVX512 static Vec Load(const float* p) { return _mm512_loadu_ps(p); }
  LOOM_AVX512 static Vec LoadPartial(const float* p, size_t count) {
    return _mm512_maskz_loadu_ps(Mask16(count), p);
  }
  LOOM_AVX512 static void Store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  LOOM_AVX512 static void StorePartial(float* p, size_t count, Vec v) {
    _mm512_mask_storeu_ps(p, Mask16(count), v);
  }
};

struct BF16Lanes : F32Math {
  using Storage = BFloat16;
  static constexpr size_t kLanes = 16;
  LOOM_AVX512 static Vec Widen(__m256i bits) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  }
  // RoundBits returns ToBFloat16 of each lane in the high 16 bits of its 32-bit lane
  // (the low 16 are garbage): add 0x7FFF plus the kept lsb, so the carry rounds to
  // nearest even; NaNs are quieted instead, keeping sign and payload.
  LOOM_AVX512 static __m512i RoundBits(Vec v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i abs = _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF));
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7F800000));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i rounded =
        _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
    return _mm512_mask_or_epi32(rounded, nan, bits, _mm512_set1_epi32(0x00400000));
  }
  // Round is RoundBits moved to the low 16 bits, the upper 16 zero.
  LOOM_AVX512 static __m512i Round(Vec v) { return _mm512_srli_epi32(RoundBits(v), 16); }
  LOOM_AVX512 static Vec Load(const BFloat16* p) {
    return Widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  LOOM_AVX512 static Vec LoadPartial(const BFloat16* p, size_t count) {
    return Widen(_mm512_castsi512_si256(_mm512_maskz_loadu_epi16(Mask32(count), p)));
  }
  LOOM_AVX512 static void Store(BFloat16* p, Vec v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(Round(v)));
  }
  LOOM_AVX512 static void StorePartial(BFloat16* p, size_t count, Vec v) {
    _mm512_mask_cvtepi32_storeu_epi16(p, Mask16(count), Round(v));
  }
};

// BF16PairLanes moves 32 bf16 per step for ReduceInto without any cross-lane shuffle:
// in each 32-bit lane the even element (low half) shifts up into an f32 and the odd
// one (high half) is masked in place; both halves compute in f32, and one 16-bit blend
// packs the two rounded results back. Lanes come out of order, which only an
// element-wise operation on same-typed buffers tolerates.
//
// Every NaN that Sum, Prod, Min and Max produce is the canonical 0x7FC00000, which the
// plain round-to-nearest-even add already narrows to 0x7FC0, so Join skips the NaN case
// of BF16Lanes::RoundBits; nothing else stores through these lanes.
struct BF16Pair {
  __m512 even;
  __m512 odd;
};

struct BF16PairLanes {
  using Vec = BF16Pair;
  using Storage = BFloat16;
  static constexpr size_t kLanes = 32;
  static constexpr bool kHasProd = true;

  LOOM_AVX512 static Vec Split(__m512i words) {
    return {_mm512_castsi512_ps(_mm512_slli_epi32(words, 16)),
            _mm512_castsi512_ps(_mm512_and_si512(words, _mm512_set1_epi32(~0xFFFF)))};
  }
  // RoundCanonicalBits is BF16Lanes::RoundBits for values whose NaNs are canonical.
  LOOM_AVX512 static __m512i RoundCanonicalBits(__m512 v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    return _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF)));
  }
  LOOM_AVX512 static __m512i Join(Vec v) {
    return _mm512_mask_blend_epi16(0xAAAAAAAAu, _mm512_srli_epi32(RoundCanonicalBits(v.even), 16),
                                   RoundCanonicalBits(v.odd));
  }
  LOOM_AVX512 static Vec Sum(Vec a, Vec b) {
    return {F32Math::Sum(a.even, b.even), F32Math::Sum(a.odd, b.odd)};
  }
  LOOM_AVX512 static Vec Prod(Vec a, Vec b) {
    return {F32Math::Prod(a.even, b.even), F32Math::Prod(a.odd, b.odd)};
  }
  LOOM_AVX512 static Vec Min(Vec a, Vec b) {
    return {F32Math::Min(a.even, b.even), F32Math::Min(a.odd, b.odd)};
  }
  LOOM_AVX512 static Vec Max(Vec a, Vec b) {
    return {F32Math::Max(a.even, b.even), F32Math::Max(a.odd, b.odd)};
  }
  LOOM_AVX512 static Vec Load(const BFloat16* p) { return Split(_mm512_loadu_si512(p)); }
  LOOM_AVX512 static Vec LoadPartial(const BFloat16* p, size_t count) {
    return Split(_mm512_maskz_loadu_epi16(Mask32(count), p));
  }
  LOOM_AVX512 static void Store(BFloat16* p, Vec v) { _mm512_storeu_si512(p, Join(v)); }
  LOOM_AVX512 static void StorePartial(BFloat16* p, size_t count, Vec v) {
    _mm512_mask_storeu_epi16(p, Mask32(count), Join(v));
  }
};

struct F16Lanes : F32Math {
  using Storage = Float16;
  static constexpr size_t kLanes = 16;
  // vcvtps2ph with an immediate rounding mode: nearest even whatever MXCSR says.
  LOOM_AVX512 static __m256i Narrow(Vec v) {
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  LOOM_AVX512 static Vec Load(const Float16* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  LOOM_AVX512 static Vec LoadPartial(const Float16* p, size_t count) {
    return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_maskz_loadu_epi16(Mask32(count), p)));
  }
  LOOM_AVX512 static void Store(Float16* p, Vec v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), Narrow(v));
  }
  LOOM_AVX512 static void StorePartial(Float16* p, size_t count, Vec v) {
    _mm512_mask_storeu_epi16(p, Mask32(count), _mm512_castsi256_si512(Narrow(v)));
  }
};

struct F64Lanes {
  using Vec = __m512d;
  using Scalar = double;
  using Storage = double;
  static constexpr size_t kLanes = 8;
  static constexpr bool kHasProd = true;

  LOOM_AVX512 static Vec Splat(double value) { return _mm512_set1_pd(value); }
  LOOM_AVX512 static Vec CanonicalNaN() {
    return _mm512_castsi512_pd(_mm512_set1_epi64(static_cast<long long>(kCanonicalNaNF64Bits)));
  }
  LOOM_AVX512 static Vec Canonicalize(Vec v) {
    return _mm512_mask_mov_pd(v, _mm512_cmp_pd_mask(v, v, _CMP_UNORD_Q), CanonicalNaN());
  }
  LOOM_AVX512 static Vec Sum(Vec a, Vec b) { return Canonicalize(_mm512_add_pd(a, b)); }
  LOOM_AVX512 static Vec Prod(Vec a, Vec b) { return Canonicalize(_mm512_mul_pd(a, b)); }
  LOOM_AVX512 static Vec Min(Vec a, Vec b) {
    const __m512i ai = _mm512_castpd_si512(a);
    const __m512i bi = _mm512_castpd_si512(b);
    __m512i r = _mm512_castpd_si512(_mm512_min_pd(a, b));
    r = _mm512_mask_or_epi64(r, _mm512_cmp_pd_mask(a, b, _CMP_EQ_OQ), ai, bi);
    return _mm512_mask_mov_pd(_mm512_castsi512_pd(r), _mm512_cmp_pd_mask(a, b, _CMP_UNORD_Q),
                              CanonicalNaN());
  }
  LOOM_AVX512 static Vec Max(Vec a, Vec b) {
    const __m512i ai = _mm512_castpd_si512(a);
    const __m512i bi = _mm512_castpd_si512(b);
    __m512i r = _mm512_castpd_si512(_mm512_max_pd(a, b));
    r = _mm512_mask_and_epi64(r, _mm512_cmp_pd_mask(a, b, _CMP_EQ_OQ), ai, bi);
    return _mm512_mask_mov_pd(_mm512_castsi512_pd(r), _mm512_cmp_pd_mask(a, b, _CMP_UNORD_Q),
                              CanonicalNaN());
  }
  LOOM_AVX512 static Vec Div(Vec a, Vec b) { return _mm512_div_pd(a, b); }

  LOOM_AVX512 static Vec Load(const double* p) { return _mm512_loadu_pd(p); }
  LOOM_AVX512 static Vec LoadPartial(const double* p, size_t count) {
    return _mm512_maskz_loadu_pd(Mask8(count), p);
  }
  LOOM_AVX512 static void Store(double* p, Vec v) { _mm512_storeu_pd(p, v); }
  LOOM_AVX512 static void StorePartial(double* p, size_t count, Vec v) {
    _mm512_mask_storeu_pd(p, Mask8(count), v);
  }
};

// Integer lanes wrap on overflow, as the scalar unsigned arithmetic does.
struct I32Lanes {
  using Vec = __m512i;
  using Storage = int32_t;
  static constexpr size_t kLanes = 16;
  static constexpr bool kHasProd = true;
  LOOM_AVX512 static Vec Sum(Vec a, Vec b) { return _mm512_add_epi32(a, b); }
  LOOM_AVX512 static Vec Prod(Vec a, Vec b) { return _mm512_mullo_epi32(a, b); }
  LOOM_AVX512 static Vec Min(Vec a, Vec b) { return _mm512_min_epi32(a, b); }
  LOOM_AVX512 static Vec Max(Vec a, Vec b) { return _mm512_max_epi32(a, b); }
  LOOM_AVX512 static Vec Load(const int32_t* p) { return _mm512_loadu_si512(p); }
  LOOM_AVX512 static Vec LoadPartial(const int32_t* p, size_t count) {
    return _mm512_maskz_loadu_epi32(Mask16(count), p);
  }
  LOOM_AVX512 static void Store(int32_t* p, Vec v) { _mm512_storeu_si512(p, v); }
  LOOM_AVX512 static void StorePartial(int32_t* p, size_t count, Vec v) {
    _mm512_mask_storeu_epi32(p, Mask16(count), v);
  }
};

// AVX-512F has no 64-bit multiply (vpmullq is AVX-512DQ): i64 prod runs scalar.
struct I64Lanes {
  using Vec = __m512i;
  using Storage = int64_t;
  static constexpr size_t kLanes = 8;
  static constexpr bool kHasProd = false;
  LOOM_AVX512 static Vec Sum(Vec a, Vec b) { return _mm512_add_epi64(a, b); }
  LOOM_AVX512 static Vec Min(Vec a, Vec b) { return _mm512_min_epi64(a, b); }
  LOOM_AVX512 static Vec Max(Vec a, Vec b) { return _mm512_max_epi64(a, b); }
  LOOM_AVX512 static Vec Load(const int64_t* p) { return _mm512_loadu_si512(p); }
  LOOM_AVX512 static Vec LoadPartial(const int64_t* p, size_t count) {
    return _mm512_maskz_loadu_epi64(Mask8(count), p);
  }
  LOOM_AVX512 static void Store(int64_t* p, Vec v) { _mm512_storeu_si512(p, v); }
  LOOM_AVX512 static void StorePartial(int64_t* p, size_t count, Vec v) {
    _mm512_mask_storeu_epi64(p, Mask8(count), v);
  }
};

// Byte lanes; x86 has no 8-bit multiply, so i8 / u8 prod run scalar.
template <typename T>
struct ByteLanes {
  using Vec = __m512i;
  using Storage = T;
  static constexpr size_t kLanes = 64;
  static constexpr bool kHasProd = false;
  LOOM_AVX512 static Vec Sum(Vec a, Vec b) { return _mm512_add_epi8(a, b); }
  LOOM_AVX512 static Vec Load(const T* p) { return _mm512_loadu_si512(p); }
  LOOM_AVX512 static Vec LoadPartial(const T* p, size_t count) {
    return _mm512_maskz_loadu_epi8(Mask64(count), p);
  }
  LOOM_AVX512 static void Store(T* p, Vec v) { _mm512_storeu_si512(p, v); }
  LOOM_AVX512 static void StorePartial(T* p, size_t count, Vec v) {
    _mm512_mask_storeu_epi8(p, Mask64(count), v);
  }
};

struct I8Lanes : ByteLanes<int8_t> {
  LOOM_AVX512 static Vec Min(Vec a, Vec b) { return _mm512_min_epi8(a, b); }
  LOOM_AVX512 static Vec Max(Vec a, Vec b) { return _mm512_max_epi8(a, b); }
};

struct U8Lanes : ByteLanes<uint8_t> {
  LOOM_AVX512 static Vec Min(Vec a, Vec b) { return _mm512_min_epu8(a, b); }
  LOOM_AVX512 static Vec Max(Vec a, Vec b) { return _mm512_max_epu8(a, b); }
};

// The ops, as types the loops are instantiated with.
struct SumOp {
  template <typename L>
  LOOM_AVX512 static typename L::Vec Apply(typename L::Vec a, typename L::Vec b) {
    return L::Sum(a, b);
  }
};
struct ProdOp {
  template <typename L>
  LOOM_AVX512 static typename L::Vec Apply(typename L::Vec a, typename L::Vec b) {
    return L::Prod(a, b);
  }
};
struct MinOp {
  template <typename L>
  LOOM_AVX512 static typename L::Vec Apply(typename L::Vec a, typename L::Vec b) {
    return L::Min(a, b);
  }
};
struct MaxOp {
  template <typename L>
  LOOM_AVX512 static typename L::Vec Apply(typename L::Vec a, typename L::Vec b) {
    return L::Max(a, b);
  }
};

// CombineLoop: dst[i] = Op(a[i], b[i]), computed in Dst's registers. `dst` may be
// `a` (in place); each vector is loaded before its lanes are stored.
template <typename Dst, typename Src, typename Op>
LOOM_AVX512 void CombineLoop(const typename Dst::Storage* a, const typename Src::Storage* b,
                             typename Dst::Storage* dst, size_t size) {
  static_assert(Dst::kLanes == Src::kLanes, "one register of each per step");
  size_t i = 0;
  for (; i + Dst::kLanes <= size; i += Dst::kLanes) {
    Dst::Store(dst + i, Op::template Apply<Dst>(Dst::Load(a + i), Src::Load(b + i)));
  }
  if (i < size) {
    const size_t rest = size - i;
    Dst::StorePartial(dst + i, rest,
        Op::template Apply<Dst>(Dst::LoadPartial(a + i, rest), Src::LoadPartial(b + i, rest)));
  }
}

// ConvertLoop: out[i] = in[i], widened or rounded.
template <typename In, typename Out>
LOOM_AVX512 void ConvertLoop(const typename In::Storage* in, typename Out::Storage* out,
                             size_t size) {
  static_assert(In::kLanes == Out::kLanes, "one register of each per step");
  size_t i = 0;
  for (; i + In::kLanes <= size; i += In::kLanes) Out::Store(out + i, In::Load(in + i));
  if (i < size) Out::StorePartial(out + i, size - i, In::LoadPartial(in + i, size - i));
}

// DivideLoop: out[i] = in[i] / divisor, divided in In's registers and rounded once to
// Out. `in` and `out` may be the same buffer.
template <typename In, typename Out>
LOOM_AVX512 void DivideLoop(const typename In::Storage* in, typename Out::Storage* out, size_t size,
                            typename In::Scalar divisor) {
  static_assert(In::kLanes == Out::kLanes, "one register of each per step");
  const typename In::Vec d = In::Splat(divisor);
  size_t i = 0;
  for (; i + In::kLanes <= size; i += In::kLanes) {
    Out::Store(out + i, In::Div(In::Load(in + i), d));
  }
  if (i < size) {
    Out::StorePartial(out + i, size - i, In::Div(In::LoadPartial(in + i, size - i), d));
  }
}

template <typename L>
const typename L::Storage* Data(ConstBufferView view) {
  return reinterpret_cast<const typename L::Storage*>(view.data());
}

template <typename L>
typename L::Storage* Data(BufferView view) {
  return reinterpret_cast<typename L::Storage*>(view.data());
}

// Reduce: dst = op(a, b).
template <typename L>
void Reduce(ReduceOp op, ConstBufferView a, ConstBufferView b, BufferView dst) {
  const size_t size = dst.size();
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return CombineLoop<L, L, SumOp>(Data<L>(a), Data<L>(b), Data<L>(dst), size);
    case ReduceOp::kProd:
      if constexpr (L::kHasProd) {
        return CombineLoop<L, L, ProdOp>(Data<L>(a), Data<L>(b), Data<L>(dst), size);
      } else {
        return ReduceToScalar(op, a, b, dst);
      }
    case ReduceOp::kMin:
      return CombineLoop<L, L, MinOp>(Data<L>(a), Data<L>(b), Data<L>(dst), size);
    case ReduceOp::kMax:
      return CombineLoop<L, L, MaxOp>(Data<L>(a), Data<L>(b), Data<L>(dst), size);
  }
}

template <typename Src>
void Accumulate(ReduceOp op, ConstBufferView src, absl::Span<float> acc) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return CombineLoop<F32Lanes, Src, SumOp>(acc.data(), Data<Src>(src), acc.data(),
                                                     acc.size());
    case ReduceOp::kProd:
      return CombineLoop<F32Lanes, Src, ProdOp>(acc.data(), Data<Src>(src), acc.data(),
                                                      acc.size());
    case ReduceOp::kMin:
      return CombineLoop<F32Lanes, Src, MinOp>(acc.data(), Data<Src>(src), acc.data(),
                                                     acc.size());
    case ReduceOp::kMax:
      return CombineLoop<F32Lanes, Src, MaxOp>(acc.data(), Data<Src>(src), acc.data(),
                                                     acc.size());
  }
}

template <typename Dst>
void Store(absl::Span<const float> acc, int64_t divisor, BufferView dst) {
  if (divisor == 1) return ConvertLoop<F32Lanes, Dst>(acc.data(), Data<Dst>(dst), acc.size());
  DivideLoop<F32Lanes, Dst>(acc.data(), Data<Dst>(dst), acc.size(), static_cast<float>(divisor));
}

template <typename L>
void Average(BufferView buf, int64_t num_ranks) {
  DivideLoop<L, L>(Data<L>(buf), Data<L>(buf), buf.size(),
                   static_cast<typename L::Scalar>(num_ranks));
}

}  // namespace

void ReduceToAvx512(ReduceOp op, ConstBufferView a, ConstBufferView b, BufferView dst) {
  switch (dst.dtype()) {
    case DType::kF32:
      return Reduce<F32Lanes>(op, a, b, dst);
    case DType::kF64:
      return Reduce<F64Lanes>(op, a, b, dst);
    case DType::kF16:
      return Reduce<F16Lanes>(op, a, b, dst);
    case DType::kBF16:
      return Reduce<BF16PairLanes>(op, a, b, dst);
    case DType::kI8:
      return Reduce<I8Lanes>(op, a, b, dst);
    case DType::kU8:
      return Reduce<U8Lanes>(op, a, b, dst);
    case DType::kI32:
      return Reduce<I32Lanes>(op, a, b, dst);
    case DType::kI64:
      return Reduce<I64Lanes>(op, a, b, dst);
  }
}

void ReduceIntoAvx512(ReduceOp op, ConstBufferView src, BufferView dst) {
  ReduceToAvx512(op, dst, src, dst);
}

void AccumulateIntoAvx512(ReduceOp op, ConstBufferView src, absl::Span<float> acc) {
  switch (src.dtype()) {
    case DType::kF32:
      return Accumulate<F32Lanes>(op, src, acc);
    case DType::kF16:
      return Accumulate<F16Lanes>(op, src, acc);
    case DType::kBF16:
      return Accumulate<BF16Lanes>(op, src, acc);
    default:
      return;
  }
}

void LoadAccumulatorAvx512(ConstBufferView src, absl::Span<float> acc) {
  switch (src.dtype()) {
    case DType::kF32:
      return ConvertLoop<F32Lanes, F32Lanes>(Data<F32Lanes>(src), acc.data(), acc.size());
    case DType::kF16:
      return ConvertLoop<F16Lanes, F32Lanes>(Data<F16Lanes>(src), acc.data(), acc.size());
    case DType::kBF16:
      return ConvertLoop<BF16Lanes, F32Lanes>(Data<BF16Lanes>(src), acc.data(), acc.size());
    default:
      return;
  }
}

void StoreAccumulatorAvx512(absl::Span<const float> acc, int64_t divisor, BufferView dst) {
  switch (dst.dtype()) {
    case DType::kF32:
      return Store<F32Lanes>(acc, divisor, dst);
    case DType::kF16:
      return Store<F16Lanes>(acc, divisor, dst);
    case DType::kBF16:
      return Store<BF16Lanes>(acc, divisor, dst);
    default:
      return;
  }
}

// x86 has no SIMD integer division: integer dtypes run scalar.
void FinishAverageAvx512(BufferView buf, int64_t num_ranks) {
  if (num_ranks == 1) return;
  switch (buf.dtype()) {
    case DType::kF32:
      return Average<F32Lanes>(buf, num_ranks);
    case DType::kF64:
      return Average<F64Lanes>(buf, num_ranks);
    case DType::kF16:
      return Average<F16Lanes>(buf, num_ranks);
    case DType::kBF16:
      return Average<BF16Lanes>(buf, num_ranks);
    default:
      return FinishAverageScalar(buf, num_ranks);
  }
}

}  // namespace reduce_internal
}  // namespace loom
