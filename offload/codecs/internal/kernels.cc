// The vector kernels of kernels.h, written once with Google Highway: foreach_target.h
// compiles this file again for each target, and the kernels, which exist only in the
// AVX2 and AVX3 passes (N_AVX2::, N_AVX3::), are the same source for Isa::kAvx2 and
// kAvx512. The code inside HWY_ONCE maps an Isa to its table (the scalar kernels are in
// kernels_scalar.cc).
//
// int8 quantization rounds as the scalar path does, lane by lane: x * inv (no FMA: the
// package builds with -ffp-contract=off), then to the nearest integer, ties to even
// (nearbyint there, the exact add of QuantizeCodes here, both in the default rounding
// mode that kernels.h assumes). Whole vectors run with
// unaligned loads and stores inside the spans; the remainder of each block, or of a
// span, runs through kernels.h's scalar helpers.
#include "core/internal/x86_intrinsics.h"  // first: see there

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "absl/types/span.h"
#include "core/cpu_features.h"
#include "offload/codecs/internal/kernels.h"

// The AVX2 and AVX3 passes, whatever -march says (core/internal/simd_dispatch.h);
// dispatch goes through Isa below, not HWY_DYNAMIC_DISPATCH.
#define HWY_COMPILE_ALL_ATTAINABLE
#define HWY_DISABLED_TARGETS (HWY_SSSE3 | HWY_SSE4)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "offload/codecs/internal/kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep (must precede highway.h)
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace loom {
namespace codecs_internal {
namespace HWY_NAMESPACE {
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;
using D8 = hn::Rebind<int8_t, DF>;    // One int8 code per f32 lane.
using DU8 = hn::Rebind<uint8_t, DF>;  // One byte per f32 lane.
using DB = hn::ScalableTag<uint8_t>;  // A whole vector of bytes.
constexpr size_t kLanes = hn::MaxLanes(DF());

// AbsMaxBits returns the integer max of the bits of |p[i]| over [0, len): the order of
// non-negative floats, with Inf and NaN above every finite value.
HWY_INLINE uint32_t AbsMaxBits(const float* p, size_t len) {
  const DF df;
  const DU du;
  const auto abs_mask = hn::Set(du, 0x7FFFFFFFu);
  auto m0 = hn::Zero(du);
  auto m1 = hn::Zero(du);
  size_t i = 0;
  for (; i + 2 * kLanes <= len; i += 2 * kLanes) {
    m0 = hn::Max(m0, hn::And(hn::BitCast(du, hn::LoadU(df, p + i)), abs_mask));
    m1 = hn::Max(m1, hn::And(hn::BitCast(du, hn::LoadU(df, p + i + kLanes)), abs_mask));
  }
  uint32_t bits = hn::GetLane(hn::MaxOfLanes(du, hn::Max(m0, m1)));
  for (; i < len; ++i) bits = std::max(bits, FloatBits(p[i]) & 0x7FFFFFFFu);
  return bits;
}

// QuantizeCodes is QuantizeOne on p[0, kLanes) less its clamp, which the caller has
// shown cannot bite: the codes are the low bytes of the returned lanes. Adding 1.5 * 2^23
// to y = x * inv (|y| < 2^22) rounds y to the nearest integer k, ties to even, as
// nearbyint does, and the sum has the bits 0x4B400000 + k, whose low byte is k in two's
// complement.
HWY_INLINE hn::Vec<DU> QuantizeCodes(const float* p, hn::Vec<DF> inv) {
  const DF df;
  const auto y = hn::Mul(hn::LoadU(df, p), inv);
  return hn::BitCast(DU(), hn::Add(y, hn::Set(df, 12582912.0f)));
}

size_t QuantizeInt8(absl::Span<const float> x, size_t block_size, std::byte* out) {
  const DF df;
  const DU8 d8;
  for (size_t begin = 0, block = 0; begin < x.size(); begin += block_size, ++block) {
    const size_t len = std::min(block_size, x.size() - begin);
    const float* p = x.data() + begin;
    const uint32_t absmax_bits = AbsMaxBits(p, len);
    if (absmax_bits >= 0x7F800000u) return block;
    float scale;
    float inv;
    Int8Scale(BitsToFloat(absmax_bits), &scale, &inv);
    std::memcpy(out, &scale, sizeof(scale));
    out += sizeof(scale);
    const auto vinv = hn::Set(df, inv);
    uint8_t* codes = reinterpret_cast<uint8_t*>(out);
    // Int8Scale keeps absmax * inv, and so every |x * inv| of the block (rounding is
    // monotonic), below 127.5: the codes round into [-127, 127] and the vector loop
    // leaves out QuantizeOne's clamp. A scale that broke this would send the block down
    // the scalar loop rather than wrap a code.
    size_t i = 0;
    if (BitsToFloat(absmax_bits) * inv < 127.5f) {
      for (; i + 2 * kLanes <= len; i += 2 * kLanes) {
        hn::StoreU(hn::TruncateTo(d8, QuantizeCodes(p + i, vinv)), d8, codes + i);
        hn::StoreU(hn::TruncateTo(d8, QuantizeCodes(p + i + kLanes, vinv)), d8,
                   codes + i + kLanes);
      }
    }
    for (; i < len; ++i) out[i] = static_cast<std::byte>(QuantizeOne(p[i], inv));
    out += len;
  }
  return kAllFinite;
}

void DequantizeInt8(const std::byte* in, size_t block_size, absl::Span<float> x) {
  const DF df;
  const DI di;
  const D8 d8;
  for (size_t begin = 0; begin < x.size(); begin += block_size) {
    const size_t len = std::min(block_size, x.size() - begin);
    float scale;
    std::memcpy(&scale, in, sizeof(scale));
    in += sizeof(scale);
    const auto vscale = hn::Set(df, scale);
    const int8_t* codes = reinterpret_cast<const int8_t*>(in);
    float* p = x.data() + begin;
    size_t i = 0;
    // Four vectors per iteration: one at a time ran 1.2x slower than the earlier
    // hand-written AVX2 loop, which did 32 codes per iteration.
    for (; i + 4 * kLanes <= len; i += 4 * kLanes) {
      for (size_t k = 0; k < 4; ++k) {
        const size_t j = i + k * kLanes;
        const auto code = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, codes + j)));
        hn::StoreU(hn::Mul(code, vscale), df, p + j);
      }
    }
    for (; i + kLanes <= len; i += kLanes) {
      const auto code = hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, codes + i)));
      hn::StoreU(hn::Mul(code, vscale), df, p + i);
    }
    for (; i < len; ++i) p[i] = DequantizeOne(in[i], scale);
    in += len;
  }
}

void Shuffle4(const std::byte* in, size_t count, std::byte* out) {
  const DB db;
  const size_t lanes = hn::Lanes(db);
  const uint8_t* src = reinterpret_cast<const uint8_t*>(in);
  uint8_t* dst = reinterpret_cast<uint8_t*>(out);
  size_t i = 0;
  for (; i + lanes <= count; i += lanes) {
    hn::Vec<DB> b0, b1, b2, b3;
    hn::LoadInterleaved4(db, src + 4 * i, b0, b1, b2, b3);
    hn::StoreU(b0, db, dst + i);
    hn::StoreU(b1, db, dst + count + i);
    hn::StoreU(b2, db, dst + 2 * count + i);
    hn::StoreU(b3, db, dst + 3 * count + i);
  }
  for (; i < count; ++i) {
    for (size_t j = 0; j < 4; ++j) out[j * count + i] = in[4 * i + j];
  }
}

void Unshuffle4(const std::byte* in, size_t count, std::byte* out) {
  const DB db;
  const size_t lanes = hn::Lanes(db);
  const uint8_t* src = reinterpret_cast<const uint8_t*>(in);
  uint8_t* dst = reinterpret_cast<uint8_t*>(out);
  size_t i = 0;
  for (; i + lanes <= count; i += lanes) {
    hn::StoreInterleaved4(hn::LoadU(db, src + i), hn::LoadU(db, src + count + i),
                          hn::LoadU(db, src + 2 * count + i), hn::LoadU(db, src + 3 * count + i),
                          db, dst + 4 * i);
  }
  for (; i < count; ++i) {
    for (size_t j = 0; j < 4; ++j) out[4 * i + j] = in[j * count + i];
  }
}

// A lane overflows when overflow_abs_bits <= |x|'s bits < Inf's: exactly when
// |x|'s bits - overflow_abs_bits, wrapped to uint32, is below Inf's bits -
// overflow_abs_bits (smaller values wrap above it, Inf and NaN stay above it). So the
// vector pass keeps the unsigned minimum of that difference: two integer ops per vector
// and no mask in the loop (AVX-512's compares into mask registers, two per vector, and
// the mask ors had made the AVX3 pass slower than the AVX2 one).
size_t FindOverflow(absl::Span<const float> x, uint32_t overflow_abs_bits) {
  const DF df;
  const DU du;
  const auto abs_mask = hn::Set(du, 0x7FFFFFFFu);
  const auto threshold = hn::Set(du, overflow_abs_bits);
  const size_t vec_len = x.size() - x.size() % (2 * kLanes);
  auto min0 = hn::Set(du, 0xFFFFFFFFu);
  auto min1 = min0;
  for (size_t i = 0; i < vec_len; i += 2 * kLanes) {
    const auto a = hn::And(hn::BitCast(du, hn::LoadU(df, x.data() + i)), abs_mask);
    const auto b = hn::And(hn::BitCast(du, hn::LoadU(df, x.data() + i + kLanes)), abs_mask);
    min0 = hn::Min(min0, hn::Sub(a, threshold));
    min1 = hn::Min(min1, hn::Sub(b, threshold));
  }
  const uint32_t least = hn::GetLane(hn::MinOfLanes(du, hn::Min(min0, min1)));
  // The vector pass only says whether; the scalar one says where (rare: an error).
  const size_t start = least < 0x7F800000u - overflow_abs_bits ? 0 : vec_len;
  return start + FindOverflowScalar(x.subspan(start), overflow_abs_bits);
}

extern const Kernels kKernels;
const Kernels kKernels = {&QuantizeInt8, &DequantizeInt8, &Shuffle4, &Unshuffle4, &FindOverflow};

#endif  // HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3
}  // namespace HWY_NAMESPACE
}  // namespace codecs_internal
}  // namespace loom
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "core/internal/simd_dispatch.h"

namespace loom {
namespace codecs_internal {

bool IsaSupported(Isa isa) { return CpuSupports(isa); }

Isa ActiveIsa() { return BestCpuIsa(); }

const Kernels& KernelsFor(Isa isa) {
  static constexpr Kernels kScalar = {&QuantizeInt8Scalar, &DequantizeInt8Scalar, &Shuffle4Scalar,
                                      &Unshuffle4Scalar, &FindOverflowScalar};
  const Kernels* simd = core_internal::SimdTableFor(isa, &N_AVX2::kKernels, &N_AVX3::kKernels);
  return simd != nullptr ? *simd : kScalar;
}

}  // namespace codecs_internal
}  // namespace loom
#endif  // HWY_ONCE
