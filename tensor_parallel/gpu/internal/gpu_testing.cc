#include "tensor_parallel/gpu/internal/gpu_testing.h"

#include <cmath>
#include <cstddef>
#include <random>

#include "absl/strings/str_cat.h"
#include "core/gpu/cuda_status.h"
#include "core/status_macros.h"

namespace loom {
namespace gpu_testing {

bool HasDevice() {
  const absl::StatusOr<int> count = CudaDeviceCountOrZero();
  return count.ok() && *count > 0;
}

std::vector<float> RandomValues(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

absl::StatusOr<DeviceBuffer> ToDevice(absl::Span<const float> values) {
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer buffer, DeviceBuffer::Allocate(MemorySpace::kDevice,
                                                                    values.size() * sizeof(float)));
  LOOM_RETURN_IF_ERROR(buffer.CopyFromHost(absl::MakeConstSpan(
      reinterpret_cast<const std::byte*>(values.data()), values.size() * sizeof(float))));
  return buffer;
}

absl::StatusOr<std::vector<float>> FromDevice(const DeviceBuffer& buffer) {
  std::vector<float> values(buffer.size() / sizeof(float));
  LOOM_RETURN_IF_ERROR(buffer.CopyToHost(
      absl::MakeSpan(reinterpret_cast<std::byte*>(values.data()), values.size() * sizeof(float))));
  return values;
}

double Gamma(int64_t n) {
  const double nu = static_cast<double>(n) * std::ldexp(1.0, -24);
  return nu / (1.0 - nu);
}

std::string FirstOutOfBound(absl::Span<const float> actual, absl::Span<const float> expected,
                            absl::Span<const double> bound) {
  if (actual.size() != expected.size() || actual.size() != bound.size()) {
    return absl::StrCat("sizes differ: actual ", actual.size(), ", expected ", expected.size(),
                        ", bounds ", bound.size());
  }
  std::string first;
  size_t bad = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double diff =
        std::fabs(static_cast<double>(actual[i]) - static_cast<double>(expected[i]));
    if (diff <= bound[i]) continue;  // NaN fails here too
    if (bad++ == 0) {
      first = absl::StrCat("element ", i, ": ", actual[i], " vs ", expected[i], " (|diff| ", diff,
                           " > bound ", bound[i], ")");
    }
  }
  if (bad == 0) return "";
  return absl::StrCat(first, "; ", bad, " of ", actual.size(), " elements out of bound");
}

}  // namespace gpu_testing
}  // namespace loom
