#include "tensor_parallel/layers/gemm_throughput.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/half.h"
#include "core/status_macros.h"

namespace loom {

absl::StatusOr<double> MeasureGemmThroughput(GemmPrecision precision, absl::Duration duration,
                                             int64_t n) {
  if (n < 16 || n > 8192) {
    return absl::InvalidArgumentError(
        absl::StrCat("MeasureGemmThroughput: n = ", n, " is not in [16, 8192]"));
  }
  if (duration <= absl::ZeroDuration() || duration > absl::Seconds(10)) {
    return absl::InvalidArgumentError(absl::StrCat("MeasureGemmThroughput: duration ",
                                                   absl::FormatDuration(duration),
                                                   " is not in (0, 10s]"));
  }
  const size_t elements = static_cast<size_t>(n * n);
  // Seeded values in [-1, 1): a product of zeros could take a shortcut somewhere.
  std::mt19937 rng(20261125);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> a(elements), b(elements), c(elements);
  for (float& v : a) v = uniform(rng);
  for (float& v : b) v = uniform(rng);
  // bf16: the operands rounded once, as the layers keep their weights, so that what
  // is timed is the backend's product and not the rounding.
  std::vector<BFloat16> a16, b16;
  if (precision == GemmPrecision::kBf16) {
    for (const float v : a) a16.push_back(ToBFloat16(v));
    for (const float v : b) b16.push_back(ToBFloat16(v));
  }
  const auto product = [&]() {
    if (precision == GemmPrecision::kBf16) {
      return GemmBf16(Dense(absl::MakeConstSpan(a16), n, n), Transpose::kNo,
                      Dense(absl::MakeConstSpan(b16), n, n), Transpose::kNo,
                      Dense(absl::MakeSpan(c), n, n));
    }
    return Gemm(Dense(a, n, n), Transpose::kNo, Dense(b, n, n), Transpose::kNo,
                Dense(absl::MakeSpan(c), n, n), 1.0f, 0.0f, precision);
  };
  LOOM_RETURN_IF_ERROR(product());  // first use: oneDNN makes its primitive, pages fault
  const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(n) *
                       static_cast<double>(n);
  double best = 0;
  const absl::Time end = absl::Now() + duration;
  do {
    const absl::Time start = absl::Now();
    LOOM_RETURN_IF_ERROR(product());
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (seconds > 0) best = std::max(best, flops / seconds);
  } while (absl::Now() < end);
  return best;
}

}  // namespace loom
