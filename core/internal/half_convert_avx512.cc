// AVX-512 kernels for the batch 16-bit float conversions, and the CPU detection that
// decides whether they may run.
//
// Only the functions marked LOOM_AVX512 are compiled for AVX-512 (function-level target
// attributes, no global -mavx512* flags), so this file links into binaries that must
// run on CPUs without it; ActiveIsa() keeps those CPUs off these kernels.
//
// f32 -> bf16 rounds with integer ops rather than AVX512-BF16's vcvtneps2bf16, which
// flushes subnormal inputs to zero and would disagree with ToBFloat16. f32 <-> f16 use
// vcvtps2ph / vcvtph2ps: their rounding, subnormal and NaN handling is what core/half.h
// reproduces in scalar code. The rounding mode comes from the instruction, not MXCSR,
// and DAZ/FTZ cannot change a result (f32 subnormals round to ±0 in f16 either way; f16
// subnormals widen to f32 normals), so the kernels agree with ToFloat16 under -ffast-math.
#include "core/internal/x86_intrinsics.h"  // first: see there

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/cpu_features.h"
#include "core/half.h"
#include "core/internal/half_convert.h"

#define LOOM_AVX512 __attribute__((target("avx512f,avx512bw,f16c")))

namespace loom {
namespace half_convert_internal {
namespace {

// One step converts 16 elements: a 512-bit register of f32, or 256 bits of 16-bit values.
constexpr size_t kLanes = 16;

// TailMask selects the first `count` (<= kLanes) lanes.
__mmask16 TailMask(size_t count) { return static_cast<__mmask16>((1u << count) - 1u); }

// F32BitsToBF16 mirrors ToBFloat16 lane by lane and leaves the bf16 in the upper half of
// each 32-bit lane (the lower half is garbage).
LOOM_AVX512 inline __m512i F32BitsToBF16(__m512i bits) {
  const __m512i abs = _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF));
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7F800000));
  const __m512i kept_lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded =
      _mm512_add_epi32(bits, _mm512_add_epi32(kept_lsb, _mm512_set1_epi32(0x7FFF)));
  return _mm512_mask_or_epi32(rounded, is_nan, bits, _mm512_set1_epi32(0x00400000));  // Quiet.
}

// kUpperHalves[j] = 2j + 1 picks, for vpermt2w, the upper 16 bits of f32 lane j of two
// concatenated registers: one shuffle packs 32 bf16 results into one register.
alignas(64) constexpr uint16_t kUpperHalves[32] = {
    1,  3,  5,  7,  9,  11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31,
    33, 35, 37, 39, 41, 43, 45, 47, 49, 51, 53, 55, 57, 59, 61, 63,
};

// BF16ToF32Bits widens 16 bf16 values by moving each into the top half of a 32-bit lane.
LOOM_AVX512 inline __m512i BF16ToF32Bits(__m256i bf16) {
  return _mm512_slli_epi32(_mm512_cvtepu16_epi32(bf16), 16);
}

// F32ToF16Lanes rounds to nearest even whatever MXCSR says, without raising exceptions.
LOOM_AVX512 inline __m256i F32ToF16Lanes(__m512 f32) {
  return _mm512_cvtps_ph(f32, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

// LoadTail16 reads `count` (< kLanes) 16-bit values; masked-off lanes are neither read nor
// able to fault, so the tail never touches memory past the span.
LOOM_AVX512 inline __m256i LoadTail16(const void* src, size_t count) {
  return _mm512_castsi512_si256(_mm512_maskz_loadu_epi16(TailMask(count), src));
}

// StoreTail16 writes the first `count` (< kLanes) lanes and nothing past them.
LOOM_AVX512 inline void StoreTail16(void* dst, size_t count, __m256i values) {
  _mm512_mask_storeu_epi16(dst, TailMask(count), _mm512_castsi256_si512(values));
}

}  // namespace

bool CpuHasAvx512() { return CpuSupports(CpuIsa::kAvx512); }

Isa ActiveIsa() {
  static const Isa isa = CpuHasAvx512() ? Isa::kAvx512 : Isa::kScalar;
  return isa;
}

absl::string_view IsaName(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

LOOM_AVX512 void F32ToBF16Avx512(absl::Span<const float> src, absl::Span<BFloat16> dst) {
  const size_t size = src.size();
  const float* in = src.data();
  BFloat16* out = dst.data();
  const __m512i upper_halves = _mm512_load_si512(kUpperHalves);
  size_t i = 0;
  for (; i + 2 * kLanes <= size; i += 2 * kLanes) {
    const __m512i low = F32BitsToBF16(_mm512_loadu_si512(in + i));
    const __m512i high = F32BitsToBF16(_mm512_loadu_si512(in + i + kLanes));
    _mm512_storeu_si512(out + i, _mm512_permutex2var_epi16(low, upper_halves, high));
  }
  for (; i < size; i += kLanes) {
    const __mmask16 mask = TailMask(std::min(size - i, kLanes));
    const __m512i bf16 = F32BitsToBF16(_mm512_maskz_loadu_epi32(mask, in + i));
    _mm512_mask_cvtepi32_storeu_epi16(out + i, mask, _mm512_srli_epi32(bf16, 16));
  }
}

LOOM_AVX512 void BF16ToF32Avx512(absl::Span<const BFloat16> src, absl::Span<float> dst) {
  const size_t size = src.size();
  const BFloat16* in = src.data();
  float* out = dst.data();
  size_t i = 0;
  for (; i + kLanes <= size; i += kLanes) {
    const __m256i bf16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_si512(out + i, BF16ToF32Bits(bf16));
  }
  if (i < size) {
    _mm512_mask_storeu_epi32(out + i, TailMask(size - i),
                             BF16ToF32Bits(LoadTail16(in + i, size - i)));
  }
}

LOOM_AVX512 void F32ToF16Avx512(absl::Span<const float> src, absl::Span<Float16> dst) {
  const size_t size = src.size();
  const float* in = src.data();
  Float16* out = dst.data();
  size_t i = 0;
  for (; i + kLanes <= size; i += kLanes) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        F32ToF16Lanes(_mm512_loadu_ps(in + i)));
  }
  if (i < size) {
    StoreTail16(out + i, size - i,
                F32ToF16Lanes(_mm512_maskz_loadu_ps(TailMask(size - i), in + i)));
  }
}

LOOM_AVX512 void F16ToF32Avx512(absl::Span<const Float16> src, absl::Span<float> dst) {
  const size_t size = src.size();
  const Float16* in = src.data();
  float* out = dst.data();
  size_t i = 0;
  for (; i + kLanes <= size; i += kLanes) {
    const __m256i f16 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i));
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(f16));
  }
  if (i < size) {
    _mm512_mask_storeu_ps(out + i, TailMask(size - i),
                          _mm512_cvtph_ps(LoadTail16(in + i, size - i)));
  }
}

}  // namespace half_convert_internal
}  // namespace loom
