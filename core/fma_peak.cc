// Highway compiles this file once per target (see core/vector_math.cc); the code in
// HWY_ONCE measures through the dispatched kernel.
#include "core/fma_peak.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "core/cpu_features.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/fma_peak.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep (must precede highway.h)
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace loom {
namespace fma_peak_internal {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

// Runs `iterations` rounds of 12 independent FMA chains and returns the FLOP done.
// Twelve chains cover latency 4-6 cycles on two FMA pipes (Intel since Skylake, AMD
// since Zen 2); the result is summed and returned so no chain is optimized away.
double FmaChains(int64_t iterations, float* sink) {
  const hn::ScalableTag<float> d;
  const auto a = hn::Set(d, 0.999f);
  const auto b = hn::Set(d, 1e-3f);
  auto c0 = hn::Set(d, 0.0f), c1 = hn::Set(d, 0.1f), c2 = hn::Set(d, 0.2f);
  auto c3 = hn::Set(d, 0.3f), c4 = hn::Set(d, 0.4f), c5 = hn::Set(d, 0.5f);
  auto c6 = hn::Set(d, 0.6f), c7 = hn::Set(d, 0.7f), c8 = hn::Set(d, 0.8f);
  auto c9 = hn::Set(d, 0.9f), c10 = hn::Set(d, 1.0f), c11 = hn::Set(d, 1.1f);
  for (int64_t i = 0; i < iterations; ++i) {
    c0 = hn::MulAdd(c0, a, b);
    c1 = hn::MulAdd(c1, a, b);
    c2 = hn::MulAdd(c2, a, b);
    c3 = hn::MulAdd(c3, a, b);
    c4 = hn::MulAdd(c4, a, b);
    c5 = hn::MulAdd(c5, a, b);
    c6 = hn::MulAdd(c6, a, b);
    c7 = hn::MulAdd(c7, a, b);
    c8 = hn::MulAdd(c8, a, b);
    c9 = hn::MulAdd(c9, a, b);
    c10 = hn::MulAdd(c10, a, b);
    c11 = hn::MulAdd(c11, a, b);
  }
  const auto sum = hn::Add(hn::Add(hn::Add(hn::Add(c0, c1), hn::Add(c2, c3)),
                                   hn::Add(hn::Add(c4, c5), hn::Add(c6, c7))),
                           hn::Add(hn::Add(c8, c9), hn::Add(c10, c11)));
  *sink = hn::GetLane(sum);
  return 2.0 * 12.0 * static_cast<double>(hn::Lanes(d)) * static_cast<double>(iterations);
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace fma_peak_internal
}  // namespace loom
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom {
namespace fma_peak_internal {

HWY_EXPORT(FmaChains);
HWY_EXPORT(TargetName);

}  // namespace fma_peak_internal

namespace {

#if defined(__x86_64__)
// Bf16DotChains runs `iterations` rounds of 12 independent vdpbf16ps chains (16 f32
// lanes, each adding two bf16 products: 64 FLOP per instruction) and returns the FLOP
// done. Compiled for AVX512_BF16 whatever the build's baseline; called only where the
// CPU runs it.
__attribute__((target("avx512f,avx512bf16"))) double Bf16DotChains(int64_t iterations,
                                                                  float* sink) {
  // a = 0.999 and b = 1e-3 in every bf16 half: each step adds about 2e-3 per lane.
  const __m512bh a = (__m512bh)_mm512_set1_epi32(0x3F7F3F7F);
  const __m512bh b = (__m512bh)_mm512_set1_epi32(0x3A833A83);
  __m512 c[12];
  for (int i = 0; i < 12; ++i) c[i] = _mm512_set1_ps(0.1f * static_cast<float>(i));
  for (int64_t it = 0; it < iterations; ++it) {
    // Written out so the compiler keeps all twelve in registers.
    c[0] = _mm512_dpbf16_ps(c[0], a, b);
    c[1] = _mm512_dpbf16_ps(c[1], a, b);
    c[2] = _mm512_dpbf16_ps(c[2], a, b);
    c[3] = _mm512_dpbf16_ps(c[3], a, b);
    c[4] = _mm512_dpbf16_ps(c[4], a, b);
    c[5] = _mm512_dpbf16_ps(c[5], a, b);
    c[6] = _mm512_dpbf16_ps(c[6], a, b);
    c[7] = _mm512_dpbf16_ps(c[7], a, b);
    c[8] = _mm512_dpbf16_ps(c[8], a, b);
    c[9] = _mm512_dpbf16_ps(c[9], a, b);
    c[10] = _mm512_dpbf16_ps(c[10], a, b);
    c[11] = _mm512_dpbf16_ps(c[11], a, b);
  }
  __m512 sum = c[0];
  for (int i = 1; i < 12; ++i) sum = _mm512_add_ps(sum, c[i]);
  // Stored and summed by hand: _mm512_reduce_add_ps trips GCC 12's -Wuninitialized.
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0.0f;
  for (const float lane : lanes) total += lane;
  *sink = total;
  return 64.0 * 12.0 * static_cast<double>(iterations);
}
#endif

// BestRate returns the best FLOP/s of twenty rounds of `chains` (FLOP done for a
// count of iterations) lasting about `duration` in all, after sizing the rounds.
// Many short rounds, because a shared host slows the core in spells: on a 2-core
// KVM guest (AMD EPYC, Zen 1) five rounds in 50 ms measured 40.3 to 47.4 GFLOP/s
// over six runs (two more than 10% low), twenty in 250 ms 46.2 to 47.4 over eight.
template <typename Chains>
double BestRate(absl::Duration duration, const Chains& chains, float* sink) {
  constexpr int kRounds = 20;
  const double round_seconds = absl::ToDoubleSeconds(duration) / kRounds;
  // Calibrate: grow the iteration count until a run takes a tenth of a round, then
  // size the rounds from that run's rate.
  int64_t iterations = 1 << 12;
  bool calibrated = false;
  double best = 0.0;
  for (int round = 0; round < kRounds;) {
    const auto start = std::chrono::steady_clock::now();
    const double flop = chains(iterations, sink);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!calibrated) {
      if (seconds < round_seconds / 10 && iterations < (int64_t{1} << 40)) {
        iterations *= 4;
      } else {
        calibrated = true;
        const double scale = seconds > 0 ? round_seconds / seconds : 1.0;
        iterations = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(iterations) *
                                                               std::min(scale, 100.0)));
      }
      continue;
    }
    if (seconds > 0) best = std::max(best, flop / seconds);
    ++round;
  }
  // sink is finite by construction; reading it keeps the chains alive.
  return *sink == *sink ? best : 0.0;
}

}  // namespace

absl::StatusOr<FmaPeak> MeasureFmaPeak(absl::Duration duration) {
  if (duration <= absl::ZeroDuration() || duration > absl::Seconds(10)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MeasureFmaPeak: duration ", absl::FormatDuration(duration),
        " must be positive and at most 10s"));
  }
  float sink = 0.0f;
  FmaPeak peak;
  peak.cpu_model = CpuModelName();
  peak.vector_target = HWY_DYNAMIC_DISPATCH(fma_peak_internal::TargetName)();
  peak.flops_per_core = BestRate(
      duration,
      [](int64_t iterations, float* s) {
        return HWY_DYNAMIC_DISPATCH(fma_peak_internal::FmaChains)(iterations, s);
      },
      &sink);
#if defined(__x86_64__)
  if (CpuSupportsAvx512Bf16()) peak.bf16_flops_per_core = BestRate(duration, Bf16DotChains, &sink);
#endif
  return peak;
}

std::string CpuModelName() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (!absl::StartsWith(line, "model name")) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    return std::string(absl::StripAsciiWhitespace(absl::string_view(line).substr(colon + 1)));
  }
  return "unknown";
}

}  // namespace loom
#endif  // HWY_ONCE
