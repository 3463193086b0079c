#include "core/gpu/cuda_probe.h"

#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

TEST(CudaProbeTest, NcclReportsItsVersionWithoutAGpu) {
  EXPECT_THAT(NcclVersion(), IsOkAndHolds(MatchesRegex("2\\.[0-9]+\\.[0-9]+")));
}

TEST(CudaProbeTest, RejectsMismatchedLengths) {
  EXPECT_THAT(AddOnDevice({1.0f, 2.0f}, {1.0f}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a has 2 elements, b has 1")));
}

TEST(CudaProbeTest, AddsOnTheDevice) {
  LOOM_ASSERT_OK_AND_ASSIGN(const int devices, CudaDeviceCount());
  if (devices == 0) {
    EXPECT_THAT(AddOnDevice({1.0f}, {2.0f}),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA device")));
    GTEST_SKIP() << "no CUDA device on this machine";
  }
  // Distinct, exactly representable values: the sums are exact in f32.
  std::vector<float> a(100'003), b(a.size()), expected(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i);
    b[i] = 0.5f * static_cast<float>(i % 977);
    expected[i] = a[i] + b[i];
  }
  EXPECT_THAT(AddOnDevice(a, b), IsOkAndHolds(ElementsAreArray(expected)));
}

}  // namespace
}  // namespace loom
