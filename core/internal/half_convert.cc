// The vector kernels of core/internal/half_convert.h, written once with Google Highway:
// foreach_target.h compiles this file again for each target, and the kernels, which
// exist only in the AVX2 and AVX3 passes (N_AVX2::, N_AVX3::), are the same source for
// CpuIsa::kAvx2 and kAvx512. The code inside HWY_ONCE maps a CpuIsa to its table.
//
// f32 -> bf16 rounds with integer ops rather than AVX512-BF16's vcvtneps2bf16, which
// flushes subnormal inputs to zero and would disagree with ToBFloat16. f32 <-> f16 use
// F16C's vcvtps2ph / vcvtph2ps (Highway's DemoteTo / PromoteTo): their rounding,
// subnormal and NaN handling is what core/half.h reproduces in scalar code. The
// rounding mode comes from the instruction, not MXCSR, and DAZ/FTZ cannot change a
// result (f32 subnormals round to ±0 in f16 either way; f16 subnormals widen to f32
// normals), so the kernels agree with ToFloat16 under -ffast-math.
#include "core/internal/x86_intrinsics.h"  // first: see there

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/types/span.h"
#include "core/cpu_features.h"
#include "core/half.h"
#include "core/internal/half_convert.h"

// The AVX2 and AVX3 passes, whatever -march says (core/internal/simd_dispatch.h);
// dispatch goes through CpuIsa below, not HWY_DYNAMIC_DISPATCH.
#define HWY_COMPILE_ALL_ATTAINABLE
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/internal/half_convert.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep (must precede highway.h)
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace loom {
namespace half_convert_internal {
namespace HWY_NAMESPACE {
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using DU32 = hn::RebindToUnsigned<DF>;
using DI32 = hn::RebindToSigned<DF>;
using DU16 = hn::Repartition<uint16_t, DF>;         // A whole vector of 16-bit lanes.
using DF16 = hn::Rebind<hwy::float16_t, DF>;        // One 16-bit lane per f32 lane.
using DBF16 = hn::Rebind<hwy::bfloat16_t, DF>;
constexpr size_t kLanes = hn::MaxLanes(DF());

// Convert runs `step` (kStep elements from `in` to `out`) over a span of `size`. Whole
// steps cover it; a remainder is converted by one more step that ends at the span's
// end, overlapping the one before (those elements come out the same twice); a span
// shorter than a step goes through zero-padded copies on the stack. Nothing outside
// the spans is read or written, and every element converts as in the body.
template <size_t kStep, typename Src, typename Dst, class Step>
HWY_INLINE void Convert(absl::Span<const Src> src, absl::Span<Dst> dst, const Step& step) {
  const size_t size = src.size();
  if (size < kStep) {
    Src in[kStep] = {};
    Dst out[kStep] = {};
    if (size > 0) std::memcpy(in, src.data(), size * sizeof(Src));
    step(in, out);
    if (size > 0) std::memcpy(dst.data(), out, size * sizeof(Dst));
    return;
  }
  size_t i = 0;
  for (; i + kStep <= size; i += kStep) step(src.data() + i, dst.data() + i);
  if (i < size) step(src.data() + size - kStep, dst.data() + size - kStep);
}

// RoundToBF16 mirrors ToBFloat16 lane by lane and leaves the bf16 in the upper half of
// each 32-bit lane (the lower half is garbage).
HWY_INLINE hn::Vec<DU32> RoundToBF16(hn::Vec<DU32> bits) {
  const DU32 du;
  const DI32 di;
  const auto abs = hn::BitCast(di, hn::And(bits, hn::Set(du, 0x7FFFFFFFu)));
  const auto is_nan = hn::RebindMask(du, hn::Gt(abs, hn::Set(di, 0x7F800000)));
  const auto kept_lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  const auto rounded = hn::Add(bits, hn::Add(kept_lsb, hn::Set(du, 0x7FFFu)));
  return hn::IfThenElse(is_nan, hn::Or(bits, hn::Set(du, 0x00400000u)), rounded);  // Quiet.
}

void F32ToBF16(absl::Span<const float> src, absl::Span<BFloat16> dst) {
  // Two vectors of f32 make one of bf16: the upper halves of their lanes, in order.
  Convert<2 * kLanes>(src, dst, [](const float* in, BFloat16* out) {
    const DF df;
    const DU32 du32;
    const DU16 du16;
    const auto lo = RoundToBF16(hn::BitCast(du32, hn::LoadU(df, in)));
    const auto hi = RoundToBF16(hn::BitCast(du32, hn::LoadU(df, in + kLanes)));
    hn::StoreU(hn::ConcatOdd(du16, hn::BitCast(du16, hi), hn::BitCast(du16, lo)), du16,
               reinterpret_cast<uint16_t*>(out));
  });
}

void BF16ToF32(absl::Span<const BFloat16> src, absl::Span<float> dst) {
  Convert<kLanes>(src, dst, [](const BFloat16* in, float* out) {
    const DF df;
    const auto bf16 = hn::LoadU(DBF16(), reinterpret_cast<const hwy::bfloat16_t*>(in));
    hn::StoreU(hn::PromoteTo(df, bf16), df, out);
  });
}

void F32ToF16(absl::Span<const float> src, absl::Span<Float16> dst) {
  Convert<kLanes>(src, dst, [](const float* in, Float16* out) {
    const DF16 df16;
    hn::StoreU(hn::DemoteTo(df16, hn::LoadU(DF(), in)), df16,
               reinterpret_cast<hwy::float16_t*>(out));
  });
}

void F16ToF32(absl::Span<const Float16> src, absl::Span<float> dst) {
  Convert<kLanes>(src, dst, [](const Float16* in, float* out) {
    const DF df;
    const auto f16 = hn::LoadU(DF16(), reinterpret_cast<const hwy::float16_t*>(in));
    hn::StoreU(hn::PromoteTo(df, f16), df, out);
  });
}

extern const Kernels kKernels;
const Kernels kKernels = {&F32ToBF16, &BF16ToF32, &F32ToF16, &F16ToF32};

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace half_convert_internal
}  // namespace loom
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "core/internal/simd_dispatch.h"

namespace loom {
namespace half_convert_internal {
namespace {

constexpr Kernels kScalar = {&F32ToBF16Scalar, &BF16ToF32Scalar, &F32ToF16Scalar,
                             &F16ToF32Scalar};

}  // namespace

bool IsaSupported(CpuIsa isa) { return CpuSupports(isa); }

CpuIsa ActiveIsa() { return BestCpuIsa(); }

const Kernels& KernelsFor(CpuIsa isa) {
  const Kernels* simd = core_internal::SimdTableFor(isa, &N_AVX2::kKernels, &N_AVX3::kKernels);
  return simd != nullptr ? *simd : kScalar;
}

}  // namespace half_convert_internal
}  // namespace loom
#endif  // HWY_ONCE
