#include "pipeline/executor/f32_tensor.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(F32TensorTest, ZerosFillsTheShape) {
  const F32Tensor x = F32Tensor::Zeros({4, 3});
  EXPECT_EQ(x.NumElements(), 12);
  EXPECT_EQ(x.values, std::vector<float>(12, 0.0f));
  LOOM_EXPECT_OK(x.Validate());
}

TEST(F32TensorTest, ScalarAndEmptyShapes) {
  EXPECT_EQ(F32Tensor::Zeros({}).NumElements(), 1);
  EXPECT_EQ(F32Tensor::Zeros({}).values.size(), 1u);
  EXPECT_EQ(F32Tensor::Zeros({3, 0}).NumElements(), 0);
  LOOM_EXPECT_OK(F32Tensor::Zeros({3, 0}).Validate());
}

TEST(F32TensorTest, CreateKeepsShapeAndValues) {
  LOOM_ASSERT_OK_AND_ASSIGN(F32Tensor x, F32Tensor::Create({2, 2}, {1, 2, 3, 4}));
  EXPECT_THAT(x.shape, ElementsAre(2, 2));
  EXPECT_THAT(x.values, ElementsAre(1, 2, 3, 4));
}

TEST(F32TensorTest, CreateRefusesValuesThatDoNotFillTheShape) {
  EXPECT_THAT(F32Tensor::Create({2, 2}, {1, 2, 3}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("shape [2,2] has 4 elements, 3 values given")));
}

TEST(F32TensorTest, NegativeOrOverflowingShapesAreInvalid) {
  EXPECT_EQ(CheckedNumElements({2, -1}), -1);
  const int64_t big = std::numeric_limits<int64_t>::max() / 2;
  EXPECT_EQ(CheckedNumElements({big, 3}), -1);
  EXPECT_THAT(F32Tensor::Zeros({2, -1}).Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[2,-1]")));
}

}  // namespace
}  // namespace loom
