// Highway compiles this file once per target (see core/vector_math.cc); the code in
// HWY_ONCE measures through the dispatched kernel.
#include "core/fma_peak.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

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

absl::StatusOr<FmaPeak> MeasureFmaPeak(absl::Duration duration) {
  if (duration <= absl::ZeroDuration() || duration > absl::Seconds(10)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MeasureFmaPeak: duration ", absl::FormatDuration(duration),
        " must be positive and at most 10s"));
  }
  constexpr int kRounds = 5;
  const double round_seconds = absl::ToDoubleSeconds(duration) / kRounds;
  float sink = 0.0f;
  // Calibrate: grow the iteration count until a run takes a tenth of a round, then
  // size the rounds from that run's rate.
  int64_t iterations = 1 << 12;
  bool calibrated = false;
  double best = 0.0;
  for (int round = 0; round < kRounds;) {
    const auto start = std::chrono::steady_clock::now();
    const double flop = HWY_DYNAMIC_DISPATCH(fma_peak_internal::FmaChains)(iterations, &sink);
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
  FmaPeak peak;
  peak.cpu_model = CpuModelName();
  peak.vector_target = HWY_DYNAMIC_DISPATCH(fma_peak_internal::TargetName)();
  // sink is finite by construction; reading it keeps the chains alive.
  peak.flops_per_core = sink == sink ? best : 0.0;
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
