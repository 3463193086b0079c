#include "core/shape.h"

#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace loom {
namespace {

TEST(ShapeTest, FormatsAndCounts) {
  EXPECT_EQ(ShapeString({4, 3}), "[4,3]");
  EXPECT_EQ(ShapeString({}), "[]");
  EXPECT_EQ(ShapeString({7}), "[7]");
  EXPECT_EQ(NumElements({4, 3, 2}), 24);
  EXPECT_EQ(NumElements({}), 1);
  EXPECT_EQ(NumElements({5, 0}), 0);
}

TEST(ShapeTest, CheckedCountRefusesNegativeDimensionsAndOverflow) {
  EXPECT_EQ(CheckedNumElements({4, 3}), 12);
  EXPECT_EQ(CheckedNumElements({}), 1);
  EXPECT_EQ(CheckedNumElements({0, std::numeric_limits<int64_t>::max()}), 0);
  EXPECT_EQ(CheckedNumElements({4, -1}), -1);
  EXPECT_EQ(CheckedNumElements({int64_t{1} << 40, int64_t{1} << 40}), -1);
  EXPECT_EQ(CheckedNumElements({int64_t{1} << 31, int64_t{1} << 31}), int64_t{1} << 62);
}

}  // namespace
}  // namespace loom
