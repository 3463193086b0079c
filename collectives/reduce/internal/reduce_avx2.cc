// AVX2 kernels: 256-bit registers. A tail is moved into a register-sized scratch array
// (with a masked load for 32- and 64-bit lanes; AVX2 has none for 8- and 16-bit ones,
// which are copied), reduced with the same vector code as the body, and moved back:
// no lane outside the spans is read or written, and the tail cannot round differently
// from the body.
//
// Only the functions marked LOOM_AVX2 are compiled for AVX2 + F16C (function-level
// target attributes), so this file links into binaries for any x86-64 CPU;
// IsaSupported() keeps CPUs without them off these kernels. FMA is deliberately not
// enabled: every result is one IEEE operation, rounded once. Everything here sits in an
// anonymous namespace, so the linker cannot merge these helpers with the AVX-512 file's.
//
// f32, f16 and bf16 all compute in f32 registers (F32Math); the storage types differ
// only in how 8 lanes are loaded and stored. f16 converts with F16C, bf16 with integer
// shifts and rounding, both exactly as core/half.h does.
#include "core/internal/x86_intrinsics.h"  // first: see there

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/types/span.h"
#include "collectives/reduce/internal/reduce_kernels.h"
#include "core/buffer_view.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/reduce_op.h"

#define LOOM_AVX2 __attribute__((target("avx2,f16c")))

namespace loom {
namespace reduce_internal {
namespace {

// F32Math: the reductions on 8 f32 lanes, bitwise equal to the scalar Combine.
struct F32Math {
  using Vec = __m256;
  using Scalar = float;
  static constexpr bool kHasProd = true;

  LOOM_AVX2 static Vec Splat(float value) { return _mm256_set1_ps(value); }
  LOOM_AVX2 static Vec CanonicalNaN() {
    return _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(kCanonicalNaNF32Bits)));
  }
  LOOM_AVX2 static Vec Canonicalize(Vec v) {
    return _mm256_blendv_ps(v, CanonicalNaN(), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  }
  LOOM_AVX2 static Vec Sum(Vec a, Vec b) { return Canonicalize(_mm256_add_ps(a, b)); }
  LOOM_AVX2 static Vec Prod(Vec a, Vec b) { return Canonicalize(_mm256_mul_ps(a, b)); }
  // vminps / vmaxps return the second operand for NaNs and for ±0 pairs; equal lanes
  // take a|b (min: -0 wins) or a&b (max: +0 wins), unordered lanes the canonical NaN.
  LOOM_AVX2 static Vec Min(Vec a, Vec b) {
    Vec r =
        _mm256_blendv_ps(_mm256_min_ps(a, b), _mm256_or_ps(a, b), _mm256_cmp_ps(a, b, _CMP_EQ_OQ));
    return _mm256_blendv_ps(r, CanonicalNaN(), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
  }
  LOOM_AVX2 static Vec Max(Vec a, Vec b) {
    Vec r =
        _mm256_blendv_ps(_mm256_max_ps(a, b), _mm256_and_ps(a, b), _mm256_cmp_ps(a, b, _CMP_EQ_OQ));
    return _mm256_blendv_ps(r, CanonicalNaN(), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
  }
  LOOM_AVX2 static Vec Div(Vec a, Vec b) { return _mm256_div_ps(a, b); }
};

struct F32Lanes : F32Math {
  using Storage = float;
  static constexpr size_t kLanes = 8;
  LOOM_AVX2 static Vec Load(const float* p) { return _mm256_loadu_ps(p); }
  LOOM_AVX2 static void Store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
};

struct BF16Lanes : F32Math {
  using Storage = BFloat16;
  static constexpr size_t kLanes = 8;
  // RoundBits returns ToBFloat16 of each lane in the high 16 bits of its 32-bit lane
  // (the low 16 are garbage): add 0x7FFF plus the kept lsb, so the carry rounds to
  // nearest even; NaNs are quieted instead, keeping sign and payload.
  LOOM_AVX2 static __m256i RoundBits(Vec v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF));
    const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F800000));
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
    const __m256i quieted = _mm256_or_si256(bits, _mm256_set1_epi32(0x00400000));
    return _mm256_blendv_epi8(rounded, quieted, nan);
  }
  // Round returns ToBFloat16 of the 8 lanes, packed in order.
  LOOM_AVX2 static __m128i Round(Vec v) {
    const __m256i halves = _mm256_srli_epi32(RoundBits(v), 16);
    // Each lane is 0..0xFFFF, so the unsigned saturation of packus never triggers.
    return _mm_packus_epi32(_mm256_castsi256_si128(halves), _mm256_extracti128_si256(halves, 1));
  }
  LOOM_AVX2 static Vec Load(const BFloat16* p) {
    const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
  }
  LOOM_AVX2 static void Store(BFloat16* p, Vec v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), Round(v));
  }
};

// BF16PairLanes moves 16 bf16 per step for ReduceInto without any cross-lane shuffle:
// in each 32-bit lane the even element (low half) shifts up into an f32 and the odd
// one (high half) is masked in place; both halves compute in f32, and one 16-bit blend
// packs the two rounded results back. Lanes come out of order, which only an
// element-wise operation on same-typed buffers tolerates.
//
// Every NaN that Sum, Prod, Min and Max produce is the canonical 0x7FC00000, which the
// plain round-to-nearest-even add already narrows to 0x7FC0, so Join skips the NaN case
// of BF16Lanes::RoundBits; nothing else stores through these lanes.
struct BF16Pair {
  __m256 even;
  __m256 odd;
};

struct BF16PairLanes {
  using Vec = BF16Pair;
  using Storage = BFloat16;
  static constexpr size_t kLanes = 16;
  static constexpr bool kHasProd = true;

  LOOM_AVX2 static Vec Split(__m256i words) {
    return {_mm256_castsi256_ps(_mm256_slli_epi32(words, 16)),
            _mm256_castsi256_ps(_mm256_and_si256(words, _mm256_set1_epi32(~0xFFFF)))};
  }
  // RoundCanonicalBits is BF16Lanes::RoundBits for values whose NaNs are canonical.
  LOOM_AVX2 static __m256i RoundCanonicalBits(__m256 v) {
    const __m256i bits = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF)));
  }
  LOOM_AVX2 static __m256i Join(Vec v) {
    return _mm256_blend_epi16(_mm256_srli_epi32(RoundCanonicalBits(v.even), 16),
                              RoundCanonicalBits(v.odd), 0xAA);
  }
  LOOM_AVX2 static Vec Sum(Vec a, Vec b) {
    return {F32Math::Sum(a.even, b.even), F32Math::Sum(a.odd, b.odd)};
  }
  LOOM_AVX2 static Vec Prod(Vec a, Vec b) {
    return {F32Math::Prod(a.even, b.even), F32Math::Prod(a.odd, b.odd)};
  }
  LOOM_AVX2 static Vec Min(Vec a, Vec b) {
    return {F32Math::Min(a.even, b.even), F32Math::Min(a.odd, b.odd)};
  }
  LOOM_AVX2 static Vec Max(Vec a, Vec b) {
    return {F32Math::Max(a.even, b.even), F32Math::Max(a.odd, b.odd)};
  }
  LOOM_AVX2 static Vec Load(const BFloat16* p) {
    return Split(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  LOOM_AVX2 static void Store(BFloat16* p, Vec v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), Join(v));
  }
};

struct F16Lanes : F32Math {
  using Storage = Float16;
  static constexpr size_t kLanes = 8;
  LOOM_AVX2 static Vec Load(const Float16* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  // vcvtps2ph with an immediate rounding mode: nearest even whatever MXCSR says.
  LOOM_AVX2 static void Store(Float16* p, Vec v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

struct F64Lanes {
  using Vec = __m256d;
  using Scalar = double;
  using Storage = double;
  static constexpr size_t kLanes = 4;
  static constexpr bool kHasProd = true;

  LOOM_AVX2 static Vec Splat(double value) { return _mm256_set1_pd(value); }
  LOOM_AVX2 static Vec CanonicalNaN() {
    return _mm256_castsi256_pd(_mm256_set1_epi64x(static_cast<long long>(kCanonicalNaNF64Bits)));
  }
  LOOM_AVX2 static Vec Canonicalize(Vec v) {
    return _mm256_blendv_pd(v, CanonicalNaN(), _mm256_cmp_pd(v, v, _CMP_UNORD_Q));
  }
  LOOM_AVX2 static Vec Sum(Vec a, Vec b) { return Canonicalize(_mm256_add_pd(a, b)); }
  LOOM_AVX2 static Vec Prod(Vec a, Vec b) { return Canonicalize(_mm256_mul_pd(a, b)); }
  LOOM_AVX2 static Vec Min(Vec a, Vec b) {
    Vec r =
        _mm256_blendv_pd(_mm256_min_pd(a, b), _mm256_or_pd(a, b), _mm256_cmp_pd(a, b, _CMP_EQ_OQ));
    return _mm256_blendv_pd(r, CanonicalNaN(), _mm256_cmp_pd(a, b, _CMP_UNORD_Q));
  }
  LOOM_AVX2 static Vec Max(Vec a, Vec b) {
    Vec r =
        _mm256_blendv_pd(_mm256_max_pd(a, b), _mm256_and_pd(a, b), _mm256_cmp_pd(a, b, _CMP_EQ_OQ));
    return _mm256_blendv_pd(r, CanonicalNaN(), _mm256_cmp_pd(a, b, _CMP_UNORD_Q));
  }
  LOOM_AVX2 static Vec Div(Vec a, Vec b) { return _mm256_div_pd(a, b); }
  LOOM_AVX2 static Vec Load(const double* p) { return _mm256_loadu_pd(p); }
  LOOM_AVX2 static void Store(double* p, Vec v) { _mm256_storeu_pd(p, v); }
};

// IntLanes: loads and stores of a 256-bit register of integers.
template <typename T>
struct IntLanes {
  using Vec = __m256i;
  using Storage = T;
  static constexpr size_t kLanes = 32 / sizeof(T);
  LOOM_AVX2 static Vec Load(const T* p) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
  LOOM_AVX2 static void Store(T* p, Vec v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
  }
};

// Integer lanes wrap on overflow, as the scalar unsigned arithmetic does.
struct I32Lanes : IntLanes<int32_t> {
  static constexpr bool kHasProd = true;
  LOOM_AVX2 static Vec Sum(Vec a, Vec b) { return _mm256_add_epi32(a, b); }
  LOOM_AVX2 static Vec Prod(Vec a, Vec b) { return _mm256_mullo_epi32(a, b); }
  LOOM_AVX2 static Vec Min(Vec a, Vec b) { return _mm256_min_epi32(a, b); }
  LOOM_AVX2 static Vec Max(Vec a, Vec b) { return _mm256_max_epi32(a, b); }
};

// AVX2 has no 64-bit multiply or min/max: i64 prod runs scalar, min/max compare and blend.
struct I64Lanes : IntLanes<int64_t> {
  static constexpr bool kHasProd = false;
  LOOM_AVX2 static Vec Sum(Vec a, Vec b) { return _mm256_add_epi64(a, b); }
  LOOM_AVX2 static Vec Min(Vec a, Vec b) {
    return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b));
  }
  LOOM_AVX2 static Vec Max(Vec a, Vec b) {
    return _mm256_blendv_epi8(b, a, _mm256_cmpgt_epi64(a, b));
  }
};

// x86 has no 8-bit multiply, so i8 / u8 prod run scalar.
struct I8Lanes : IntLanes<int8_t> {
  static constexpr bool kHasProd = false;
  LOOM_AVX2 static Vec Sum(Vec a, Vec b) { return _mm256_add_epi8(a, b); }
  LOOM_AVX2 static Vec Min(Vec a, Vec b) { return _mm256_min_epi8(a, b); }
  LOOM_AVX2 static Vec Max(Vec a, Vec b) { return _mm256_max_epi8(a, b); }
};

struct U8Lanes : IntLanes<uint8_t> {
  static constexpr bool kHasProd = false;
  LOOM_AVX2 static Vec Sum(Vec a, Vec b) { return _mm256_add_epi8(a, b); }
  LOOM_AVX2 static Vec Min(Vec a, Vec b) { return _mm256_min_epu8(a, b); }
  LOOM_AVX2 static Vec Max(Vec a, Vec b) { return _mm256_max_epu8(a, b); }
};

// TailMask sets the first `count` lanes of elements of kBytes (4 or 8) bytes, for
// AVX2's masked loads and stores, which exist for those widths only.
template <size_t kBytes>
LOOM_AVX2 __m256i TailMask(size_t count) {
  if constexpr (kBytes == 4) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  } else {
    static_assert(kBytes == 8, "AVX2 masks 32- and 64-bit lanes only");
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(static_cast<long long>(count)),
                              _mm256_setr_epi64x(0, 1, 2, 3));
  }
}

// LoadPartial / StorePartial move the first `count` (< L::kLanes) elements through a
// scratch register image, zero beyond them. Elements of 4 and 8 bytes move with one
// masked load or store (a tiny reduction is all tail, and a copy through memcpy cost
// more than the arithmetic); masked-off lanes are neither read nor written.
template <typename L>
LOOM_AVX2 typename L::Vec LoadPartial(const typename L::Storage* p, size_t count) {
  constexpr size_t kBytes = sizeof(typename L::Storage);
  alignas(32) typename L::Storage staged[L::kLanes] = {};
  if constexpr (kBytes == 4) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(staged),
                       _mm256_maskload_epi32(reinterpret_cast<const int*>(p), TailMask<4>(count)));
  } else if constexpr (kBytes == 8) {
    _mm256_store_si256(
        reinterpret_cast<__m256i*>(staged),
        _mm256_maskload_epi64(reinterpret_cast<const long long*>(p), TailMask<8>(count)));
  } else {
    std::memcpy(staged, p, count * sizeof(*p));
  }
  return L::Load(staged);
}

template <typename L>
LOOM_AVX2 void StorePartial(typename L::Storage* p, size_t count, typename L::Vec v) {
  constexpr size_t kBytes = sizeof(typename L::Storage);
  alignas(32) typename L::Storage staged[L::kLanes] = {};
  L::Store(staged, v);
  if constexpr (kBytes == 4) {
    _mm256_maskstore_epi32(reinterpret_cast<int*>(p), TailMask<4>(count),
                           _mm256_load_si256(reinterpret_cast<const __m256i*>(staged)));
  } else if constexpr (kBytes == 8) {
    _mm256_maskstore_epi64(reinterpret_cast<long long*>(p), TailMask<8>(count),
                           _mm256_load_si256(reinterpret_cast<const __m256i*>(staged)));
  } else {
    std::memcpy(p, staged, count * sizeof(*p));
  }
}

// The ops, as types the loops are instantiated with.
struct SumOp {
  template <typename L>
  LOOM_AVX2 static typename L::Vec Apply(typename L::Vec a, typename L::Vec b) {
    return L::Sum(a, b);
  }
};
struct ProdOp {
  template <typename L>
  LOOM_AVX2 static typename L::Vec Apply(typename L::Vec a, typename L::Vec b) {
    return L::Prod(a, b);
  }
};
struct MinOp {
  template <typename L>
  LOOM_AVX2 static typename L::Vec Apply(typename L::Vec a, typename L::Vec b) {
    return L::Min(a, b);
  }
};
struct MaxOp {
  template <typename L>
  LOOM_AVX2 static typename L::Vec Apply(typename L::Vec a, typename L::Vec b) {
    return L::Max(a, b);
  }
};

// CombineLoop: dst[i] = Op(a[i], b[i]), computed in Dst's registers. `dst` may be
// `a` (in place); each vector is loaded before its lanes are stored.
template <typename Dst, typename Src, typename Op>
LOOM_AVX2 void CombineLoop(const typename Dst::Storage* a, const typename Src::Storage* b,
                           typename Dst::Storage* dst, size_t size) {
  static_assert(Dst::kLanes == Src::kLanes, "one register of each per step");
  size_t i = 0;
  for (; i + Dst::kLanes <= size; i += Dst::kLanes) {
    Dst::Store(dst + i, Op::template Apply<Dst>(Dst::Load(a + i), Src::Load(b + i)));
  }
  if (i < size) {
    const size_t rest = size - i;
    StorePartial<Dst>(dst + i, rest,
        Op::template Apply<Dst>(LoadPartial<Dst>(a + i, rest), LoadPartial<Src>(b + i, rest)));
  }
}

// ConvertLoop: out[i] = in[i], widened or rounded.
template <typename In, typename Out>
LOOM_AVX2 void ConvertLoop(const typename In::Storage* in, typename Out::Storage* out,
                           size_t size) {
  static_assert(In::kLanes == Out::kLanes, "one register of each per step");
  size_t i = 0;
  for (; i + In::kLanes <= size; i += In::kLanes) Out::Store(out + i, In::Load(in + i));
  if (i < size) StorePartial<Out>(out + i, size - i, LoadPartial<In>(in + i, size - i));
}

// DivideLoop: out[i] = in[i] / divisor, divided in In's registers and rounded once to
// Out. `in` and `out` may be the same buffer.
template <typename In, typename Out>
LOOM_AVX2 void DivideLoop(const typename In::Storage* in, typename Out::Storage* out, size_t size,
                          typename In::Scalar divisor) {
  static_assert(In::kLanes == Out::kLanes, "one register of each per step");
  const typename In::Vec d = In::Splat(divisor);
  size_t i = 0;
  for (; i + In::kLanes <= size; i += In::kLanes) {
    Out::Store(out + i, In::Div(In::Load(in + i), d));
  }
  if (i < size) {
    StorePartial<Out>(out + i, size - i, In::Div(LoadPartial<In>(in + i, size - i), d));
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

void ReduceToAvx2(ReduceOp op, ConstBufferView a, ConstBufferView b, BufferView dst) {
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

void ReduceIntoAvx2(ReduceOp op, ConstBufferView src, BufferView dst) {
  ReduceToAvx2(op, dst, src, dst);
}

void AccumulateIntoAvx2(ReduceOp op, ConstBufferView src, absl::Span<float> acc) {
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

void LoadAccumulatorAvx2(ConstBufferView src, absl::Span<float> acc) {
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

void StoreAccumulatorAvx2(absl::Span<const float> acc, int64_t divisor, BufferView dst) {
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
void FinishAverageAvx2(BufferView buf, int64_t num_ranks) {
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
