// The vector kernels, written once with Google Highway and compiled by foreach_target.h
// for each of its targets (this file is included again per target; the code outside
// HWY_ONCE is one target's kernels, the code inside it the table of every target's).
// CpuIsa::kAvx2 runs the HWY_AVX2 code (8 f32 lanes), kAvx512 the HWY_AVX3 code (16);
// core/cpu_features.h supports a level exactly where Highway supports its target.
//
// Every target's code sits in its own namespace (N_AVX2, N_AVX3, ...) and is compiled
// with that target's attributes only, so the library runs on any x86-64 CPU and no
// helper compiled for AVX-512 can be picked by the linker for another caller.
//
// f32, f16 and bf16 all compute in f32 vectors (FloatMath); the storage types differ
// only in how a vector is loaded and stored. f16 converts with vcvtph2ps / vcvtps2ph
// (round to nearest even, whatever MXCSR says), bf16 with integer shifts and rounding,
// both exactly as core/half.h does. A tail moves through masked loads and stores where
// they cannot touch a byte outside the spans (AVX-512 for every width, AVX2 for 32- and
// 64-bit elements) and through a zeroed scratch vector otherwise; either way it
// computes with the same vector code as the body, so it cannot round differently.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "absl/types/span.h"
#include "collectives/reduce/internal/reduce_kernels.h"
#include "core/buffer_view.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/reduce_op.h"

// The AVX2 and AVX3 passes (plus the static baseline, which foreach_target.h always
// compiles), whatever -march says: core/internal/simd_dispatch.h.
#define HWY_COMPILE_ALL_ATTAINABLE
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "collectives/reduce/internal/reduce_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep (must precede highway.h)
#include "hwy/highway.h"

// Only the AVX2 and AVX3 passes define kernels; the static baseline's pass (HWY_SCALAR
// or HWY_EMU128), which foreach_target.h always makes, is left empty: kScalar runs
// reduce_scalar.cc, the reference.
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
HWY_BEFORE_NAMESPACE();
namespace loom {
namespace reduce_internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF32 = hn::ScalableTag<float>;
using VF32 = hn::Vec<DF32>;

// FloatMath: the reductions on vectors of T (float or double), bitwise equal to the
// scalar Combine. Every NaN a reduction produces is the canonical one.
template <typename T>
struct FloatMath {
  using D = hn::ScalableTag<T>;
  using Vec = hn::Vec<D>;
  using Scalar = T;
  static constexpr bool kHasProd = true;

  static Vec CanonicalNaN() {
    const hn::RebindToUnsigned<D> du;
    if constexpr (sizeof(T) == 4) {
      return hn::BitCast(D(), hn::Set(du, kCanonicalNaNF32Bits));
    } else {
      return hn::BitCast(D(), hn::Set(du, kCanonicalNaNF64Bits));
    }
  }
  static Vec Canonicalize(Vec v) { return hn::IfThenElse(hn::IsNaN(v), CanonicalNaN(), v); }
  static Vec Splat(T value) { return hn::Set(D(), value); }
  static Vec Sum(Vec a, Vec b) { return Canonicalize(hn::Add(a, b)); }
  static Vec Prod(Vec a, Vec b) { return Canonicalize(hn::Mul(a, b)); }
  // vminps / vmaxps return the second operand for NaNs and for ±0 pairs; equal lanes
  // take a|b (min: -0 wins) or a&b (max: +0 wins), unordered lanes the canonical NaN.
  static Vec Min(Vec a, Vec b) {
    const Vec r = hn::IfThenElse(hn::Eq(a, b), hn::Or(a, b), hn::Min(a, b));
    return hn::IfThenElse(hn::Or(hn::IsNaN(a), hn::IsNaN(b)), CanonicalNaN(), r);
  }
  static Vec Max(Vec a, Vec b) {
    const Vec r = hn::IfThenElse(hn::Eq(a, b), hn::And(a, b), hn::Max(a, b));
    return hn::IfThenElse(hn::Or(hn::IsNaN(a), hn::IsNaN(b)), CanonicalNaN(), r);
  }
  static Vec Div(Vec a, Vec b) { return hn::Div(a, b); }
};

// A Lanes type says how one vector of a dtype is computed (Vec and its ops) and stored:
// SD is the descriptor of the stored vector, FromStorage and ToStorage convert between
// the two. Storage is Loom's element type.

// NativeLanes: storage and computation in T. Integers wrap on overflow, as the scalar
// unsigned arithmetic does; x86 has no 8-bit multiply and AVX2 / AVX-512F no 64-bit one,
// so those products run scalar.
template <typename T>
struct IntMath {
  using D = hn::ScalableTag<T>;
  using Vec = hn::Vec<D>;
  static constexpr bool kHasProd = sizeof(T) == 4;
  static Vec Sum(Vec a, Vec b) { return hn::Add(a, b); }
  static Vec Prod(Vec a, Vec b) { return hn::Mul(a, b); }
  static Vec Min(Vec a, Vec b) { return hn::Min(a, b); }
  static Vec Max(Vec a, Vec b) { return hn::Max(a, b); }
};

template <typename T>
struct NativeLanes : std::conditional_t<std::is_floating_point_v<T>, FloatMath<T>, IntMath<T>> {
  using Storage = T;
  using SD = hn::ScalableTag<T>;
  using Vec = hn::Vec<SD>;
  static Vec FromStorage(Vec v) { return v; }
  static Vec ToStorage(Vec v) { return v; }
};

struct F16Lanes : FloatMath<float> {
  using Storage = Float16;
  using SD = hn::Rebind<hwy::float16_t, DF32>;
  static VF32 FromStorage(hn::Vec<SD> v) { return hn::PromoteTo(DF32(), v); }
  static hn::Vec<SD> ToStorage(VF32 v) { return hn::DemoteTo(SD(), v); }
};

// Bf16Bits: the bf16 rounding, on the f32 bits of each lane.
struct Bf16Bits {
  using DU32 = hn::RebindToUnsigned<DF32>;
  using DI32 = hn::RebindToSigned<DF32>;
  using VU32 = hn::Vec<DU32>;

  // RoundedBits returns ToBFloat16 of each lane in the high 16 bits of its 32-bit lane
  // (the low 16 are garbage): add 0x7FFF plus the kept lsb, so the carry rounds to
  // nearest even. With kQuietNaN, NaNs are quieted instead, keeping sign and payload;
  // without, a NaN must be the canonical one, which the plain rounding already narrows
  // to 0x7FC0.
  template <bool kQuietNaN>
  static VU32 RoundedBits(VF32 v) {
    const DU32 du;
    const VU32 bits = hn::BitCast(du, v);
    const VU32 lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
    const VU32 rounded = hn::Add(bits, hn::Add(lsb, hn::Set(du, 0x7FFFu)));
    if constexpr (!kQuietNaN) return rounded;
    const DI32 di;
    const auto abs = hn::BitCast(di, hn::And(bits, hn::Set(du, 0x7FFFFFFFu)));
    const auto nan = hn::RebindMask(du, hn::Gt(abs, hn::Set(di, 0x7F800000)));
    return hn::IfThenElse(nan, hn::Or(bits, hn::Set(du, 0x00400000u)), rounded);
  }
};

struct BF16Lanes : FloatMath<float> {
  using Storage = BFloat16;
  using SD = hn::Rebind<uint16_t, DF32>;
  static VF32 FromStorage(hn::Vec<SD> v) {
    return hn::BitCast(DF32(), hn::ShiftLeft<16>(hn::PromoteTo(Bf16Bits::DU32(), v)));
  }
  // Each rounded lane is 0..0xFFFF, so the saturating narrowing never saturates.
  static hn::Vec<SD> ToStorage(VF32 v) {
    const auto halves = hn::ShiftRight<16>(Bf16Bits::RoundedBits<true>(v));
    return hn::DemoteTo(SD(), hn::BitCast(Bf16Bits::DI32(), halves));
  }
};

// BF16PairLanes moves a whole vector of bf16 per step for ReduceTo without any
// cross-lane shuffle: in each 32-bit lane the even element (low half) shifts up into an
// f32 and the odd one (high half) is masked in place; both halves compute in f32, and
// one 16-bit blend packs the two rounded results back. Lanes come out of order, which
// only an element-wise operation on same-typed buffers tolerates. Its reductions make
// every NaN canonical, so the rounding skips the NaN case; nothing else stores through
// these lanes.
struct BF16Pair {
  VF32 even;
  VF32 odd;
};

struct BF16PairLanes {
  using Vec = BF16Pair;
  using Storage = BFloat16;
  using SD = hn::Repartition<uint16_t, DF32>;
  using Math = FloatMath<float>;
  static constexpr bool kHasProd = true;

  static Vec FromStorage(hn::Vec<SD> words) {
    const Bf16Bits::DU32 du;
    const auto w = hn::BitCast(du, words);
    return {hn::BitCast(DF32(), hn::ShiftLeft<16>(w)),
            hn::BitCast(DF32(), hn::And(w, hn::Set(du, 0xFFFF0000u)))};
  }
  static hn::Vec<SD> ToStorage(Vec v) {
    const SD d16;
    const auto even = hn::ShiftRight<16>(Bf16Bits::RoundedBits<false>(v.even));
    return hn::OddEven(hn::BitCast(d16, Bf16Bits::RoundedBits<false>(v.odd)),
                       hn::BitCast(d16, even));
  }
  static Vec Sum(Vec a, Vec b) { return {Math::Sum(a.even, b.even), Math::Sum(a.odd, b.odd)}; }
  static Vec Prod(Vec a, Vec b) {
    return {Math::Prod(a.even, b.even), Math::Prod(a.odd, b.odd)};
  }
  static Vec Min(Vec a, Vec b) { return {Math::Min(a.even, b.even), Math::Min(a.odd, b.odd)}; }
  static Vec Max(Vec a, Vec b) { return {Math::Max(a.even, b.even), Math::Max(a.odd, b.odd)}; }
};

using F32Lanes = NativeLanes<float>;

// --- Loads and stores of one vector, whole or the first `count` elements -------------

template <typename L>
using StoredT = hn::TFromD<typename L::SD>;

template <typename L>
size_t LanesOf() {
  return hn::Lanes(typename L::SD());
}

template <typename L>
const StoredT<L>* Raw(const typename L::Storage* p) {
  static_assert(sizeof(StoredT<L>) == sizeof(typename L::Storage), "one element each");
  return reinterpret_cast<const StoredT<L>*>(p);
}

template <typename L>
StoredT<L>* Raw(typename L::Storage* p) {
  return reinterpret_cast<StoredT<L>*>(p);
}

// Masked loads and stores touch no byte of a masked-off lane on AVX-512 (every width)
// and on AVX2 for 32- and 64-bit lanes; AVX2 emulates the narrower ones with a whole-
// vector access, which could fall outside the spans.
template <typename L>
constexpr bool kMaskedTail = HWY_TARGET <= HWY_AVX3 || sizeof(StoredT<L>) >= 4;

template <typename L>
typename L::Vec Load(const typename L::Storage* p) {
  return L::FromStorage(hn::LoadU(typename L::SD(), Raw<L>(p)));
}

template <typename L>
void Store(typename L::Storage* p, typename L::Vec v) {
  hn::StoreU(L::ToStorage(v), typename L::SD(), Raw<L>(p));
}

template <typename L>
typename L::Vec LoadPartial(const typename L::Storage* p, size_t count) {
  const typename L::SD sd;
  if constexpr (kMaskedTail<L>) {
    return L::FromStorage(hn::MaskedLoad(hn::FirstN(sd, count), sd, Raw<L>(p)));
  } else {
    HWY_ALIGN StoredT<L> staged[HWY_MAX_BYTES / sizeof(StoredT<L>)] = {};
    std::memcpy(staged, p, count * sizeof(*p));
    return L::FromStorage(hn::Load(sd, staged));
  }
}

template <typename L>
void StorePartial(typename L::Storage* p, size_t count, typename L::Vec v) {
  const typename L::SD sd;
  if constexpr (kMaskedTail<L>) {
    hn::BlendedStore(L::ToStorage(v), hn::FirstN(sd, count), sd, Raw<L>(p));
  } else {
    HWY_ALIGN StoredT<L> staged[HWY_MAX_BYTES / sizeof(StoredT<L>)];
    hn::Store(L::ToStorage(v), sd, staged);
    std::memcpy(p, staged, count * sizeof(*p));
  }
}

// --- The loops --------------------------------------------------------------------

// The ops, as types the loops are instantiated with.
struct SumOp {
  template <typename L>
  static typename L::Vec Apply(typename L::Vec a, typename L::Vec b) {
    return L::Sum(a, b);
  }
};
struct ProdOp {
  template <typename L>
  static typename L::Vec Apply(typename L::Vec a, typename L::Vec b) {
    return L::Prod(a, b);
  }
};
struct MinOp {
  template <typename L>
  static typename L::Vec Apply(typename L::Vec a, typename L::Vec b) {
    return L::Min(a, b);
  }
};
struct MaxOp {
  template <typename L>
  static typename L::Vec Apply(typename L::Vec a, typename L::Vec b) {
    return L::Max(a, b);
  }
};

// CombineLoop: dst[i] = Op(a[i], b[i]), computed in Dst's vectors. `dst` may be `a`
// (in place); each vector is loaded before its lanes are stored.
template <typename Dst, typename Src, typename Op>
void CombineLoop(const typename Dst::Storage* a, const typename Src::Storage* b,
                 typename Dst::Storage* dst, size_t size) {
  const size_t lanes = LanesOf<Dst>();
  size_t i = 0;
  for (; i + lanes <= size; i += lanes) {
    Store<Dst>(dst + i, Op::template Apply<Dst>(Load<Dst>(a + i), Load<Src>(b + i)));
  }
  if (i < size) {
    const size_t rest = size - i;
    StorePartial<Dst>(dst + i, rest,
                      Op::template Apply<Dst>(LoadPartial<Dst>(a + i, rest),
                                              LoadPartial<Src>(b + i, rest)));
  }
}

// ConvertLoop: out[i] = in[i], widened or rounded.
template <typename In, typename Out>
void ConvertLoop(const typename In::Storage* in, typename Out::Storage* out, size_t size) {
  const size_t lanes = LanesOf<In>();
  size_t i = 0;
  for (; i + lanes <= size; i += lanes) Store<Out>(out + i, Load<In>(in + i));
  if (i < size) StorePartial<Out>(out + i, size - i, LoadPartial<In>(in + i, size - i));
}

// DivideLoop: out[i] = in[i] / divisor, divided in In's vectors and rounded once to Out.
// `in` and `out` may be the same buffer.
template <typename In, typename Out>
void DivideLoop(const typename In::Storage* in, typename Out::Storage* out, size_t size,
                typename In::Scalar divisor) {
  const typename In::Vec d = In::Splat(divisor);
  const size_t lanes = LanesOf<In>();
  size_t i = 0;
  for (; i + lanes <= size; i += lanes) Store<Out>(out + i, In::Div(Load<In>(in + i), d));
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
  float* data = acc.data();
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return CombineLoop<F32Lanes, Src, SumOp>(data, Data<Src>(src), data, acc.size());
    case ReduceOp::kProd:
      return CombineLoop<F32Lanes, Src, ProdOp>(data, Data<Src>(src), data, acc.size());
    case ReduceOp::kMin:
      return CombineLoop<F32Lanes, Src, MinOp>(data, Data<Src>(src), data, acc.size());
    case ReduceOp::kMax:
      return CombineLoop<F32Lanes, Src, MaxOp>(data, Data<Src>(src), data, acc.size());
  }
}

template <typename Dst>
void StoreAll(absl::Span<const float> acc, int64_t divisor, BufferView dst) {
  if (divisor == 1) return ConvertLoop<F32Lanes, Dst>(acc.data(), Data<Dst>(dst), acc.size());
  DivideLoop<F32Lanes, Dst>(acc.data(), Data<Dst>(dst), acc.size(), static_cast<float>(divisor));
}

template <typename L>
void Average(BufferView buf, int64_t num_ranks) {
  DivideLoop<L, L>(Data<L>(buf), Data<L>(buf), buf.size(),
                   static_cast<typename L::Scalar>(num_ranks));
}

// --- This target's entry points ---------------------------------------------------

void ReduceTo(ReduceOp op, ConstBufferView a, ConstBufferView b, BufferView dst) {
  switch (dst.dtype()) {
    case DType::kF32:
      return Reduce<F32Lanes>(op, a, b, dst);
    case DType::kF64:
      return Reduce<NativeLanes<double>>(op, a, b, dst);
    case DType::kF16:
      return Reduce<F16Lanes>(op, a, b, dst);
    case DType::kBF16:
      return Reduce<BF16PairLanes>(op, a, b, dst);
    case DType::kI8:
      return Reduce<NativeLanes<int8_t>>(op, a, b, dst);
    case DType::kU8:
      return Reduce<NativeLanes<uint8_t>>(op, a, b, dst);
    case DType::kI32:
      return Reduce<NativeLanes<int32_t>>(op, a, b, dst);
    case DType::kI64:
      return Reduce<NativeLanes<int64_t>>(op, a, b, dst);
  }
}

void ReduceInto(ReduceOp op, ConstBufferView src, BufferView dst) { ReduceTo(op, dst, src, dst); }

void AccumulateInto(ReduceOp op, ConstBufferView src, absl::Span<float> acc) {
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

void LoadAccumulator(ConstBufferView src, absl::Span<float> acc) {
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

void StoreAccumulator(absl::Span<const float> acc, int64_t divisor, BufferView dst) {
  switch (dst.dtype()) {
    case DType::kF32:
      return StoreAll<F32Lanes>(acc, divisor, dst);
    case DType::kF16:
      return StoreAll<F16Lanes>(acc, divisor, dst);
    case DType::kBF16:
      return StoreAll<BF16Lanes>(acc, divisor, dst);
    default:
      return;
  }
}

// x86 has no SIMD integer division: integer dtypes run scalar.
void FinishAverage(BufferView buf, int64_t num_ranks) {
  if (num_ranks == 1) return;
  switch (buf.dtype()) {
    case DType::kF32:
      return Average<F32Lanes>(buf, num_ranks);
    case DType::kF64:
      return Average<NativeLanes<double>>(buf, num_ranks);
    case DType::kF16:
      return Average<F16Lanes>(buf, num_ranks);
    case DType::kBF16:
      return Average<BF16Lanes>(buf, num_ranks);
    default:
      return FinishAverageScalar(buf, num_ranks);
  }
}

extern const Kernels kKernels;
const Kernels kKernels = {&ReduceInto,       &ReduceTo,         &AccumulateInto,
                          &LoadAccumulator,  &StoreAccumulator, &FinishAverage};

}  // namespace HWY_NAMESPACE
}  // namespace reduce_internal
}  // namespace loom
HWY_AFTER_NAMESPACE();
#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

#if HWY_ONCE
#include "core/internal/simd_dispatch.h"

namespace loom {
namespace reduce_internal {

const Kernels* SimdKernels(Isa isa) {
  return core_internal::SimdTableFor(isa, &N_AVX2::kKernels, &N_AVX3::kKernels);
}

}  // namespace reduce_internal
}  // namespace loom
#endif  // HWY_ONCE
