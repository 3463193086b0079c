// Test helpers of tensor_parallel/gpu (testonly): device detection, seeded values,
// host <-> device copies, and the error bound for comparing two f32 GEMMs.
//
// Bound (Higham, Accuracy and Stability of Numerical Algorithms, 3.1): an f32 dot
// product of n terms computed in ANY order, with or without FMA, satisfies
// |fl(x.y) - x.y| <= gamma(n) * sum |x_i||y_i|, gamma(n) = n u / (1 - n u), u = 2^-24.
// GPU and CPU each satisfy it, so per element
//   |gpu - cpu| <= 2 gamma(n) * S,   S = |alpha| sum_p |a_ip||b_pj| + |beta||c_ij| (+ |bias_j|)
// with n = k + 2 (the alpha scaling and the beta / bias add are one rounding each).
// It is a worst case, not a statistical estimate, so correct code never exceeds it
// whatever blocking or split-K cuBLAS picks; a wrong element, offset or transpose is
// off by O(|values|) >> bound, and TF32 (inputs rounded to 11 significant bits)
// exceeds it: ~1000x for k = 1, still a few times for k = 129.
#ifndef LOOM_TENSOR_PARALLEL_GPU_INTERNAL_GPU_TESTING_H_
#define LOOM_TENSOR_PARALLEL_GPU_INTERNAL_GPU_TESTING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/gpu/device_buffer.h"

namespace loom {
namespace gpu_testing {

// HasDevice reports whether a CUDA device is visible.
bool HasDevice();

// RandomValues returns n values uniform in [-1, 1) from std::mt19937(seed): distinct
// (with probability ~1) and signed, so a wrong index or sign shows.
std::vector<float> RandomValues(int64_t n, uint32_t seed);

// ToDevice copies `values` into a new device buffer on device 0; FromDevice copies
// a buffer's floats back.
absl::StatusOr<DeviceBuffer> ToDevice(absl::Span<const float> values);
absl::StatusOr<std::vector<float>> FromDevice(const DeviceBuffer& buffer);

// Gamma returns gamma(n) = n u / (1 - n u) for f32 (u = 2^-24).
double Gamma(int64_t n);

// FirstOutOfBound returns "" when |actual[i] - expected[i]| <= bound[i] for every i
// (and the sizes agree), else a description of the first offender and of how many
// elements are out of bound.
std::string FirstOutOfBound(absl::Span<const float> actual, absl::Span<const float> expected,
                            absl::Span<const double> bound);

}  // namespace gpu_testing
}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_GPU_INTERNAL_GPU_TESTING_H_
