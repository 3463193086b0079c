#include "core/dtype.h"

#include <sstream>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(DTypeTest, SizesMatchTheCTypes) {
  EXPECT_EQ(DTypeSize(DType::kF32), sizeof(float));
  EXPECT_EQ(DTypeSize(DType::kF64), sizeof(double));
  EXPECT_EQ(DTypeSize(DType::kF16), sizeof(Float16));
  EXPECT_EQ(DTypeSize(DType::kBF16), sizeof(BFloat16));
  EXPECT_EQ(DTypeSize(DType::kI8), sizeof(int8_t));
  EXPECT_EQ(DTypeSize(DType::kU8), sizeof(uint8_t));
  EXPECT_EQ(DTypeSize(DType::kI32), sizeof(int32_t));
  EXPECT_EQ(DTypeSize(DType::kI64), sizeof(int64_t));
}

TEST(DTypeTest, NamesRoundTripThroughParse) {
  EXPECT_EQ(AllDTypes().size(), 8u);
  for (DType dtype : AllDTypes()) {
    EXPECT_THAT(ParseDType(DTypeName(dtype)), IsOkAndHolds(dtype)) << DTypeName(dtype);
  }
}

TEST(DTypeTest, ParseAcceptsAliasesCaseInsensitively) {
  EXPECT_THAT(ParseDType("BFloat16"), IsOkAndHolds(DType::kBF16));
  EXPECT_THAT(ParseDType("half"), IsOkAndHolds(DType::kF16));
  EXPECT_THAT(ParseDType("float"), IsOkAndHolds(DType::kF32));
  EXPECT_THAT(ParseDType("double"), IsOkAndHolds(DType::kF64));
  EXPECT_THAT(ParseDType("INT64"), IsOkAndHolds(DType::kI64));
}

TEST(DTypeTest, ParseRejectsUnknownNamesWithTheText) {
  EXPECT_THAT(ParseDType("f33"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown dtype \"f33\"")));
  EXPECT_THAT(ParseDType(""), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bf16")));
}

TEST(DTypeTest, FloatingPointClassification) {
  EXPECT_TRUE(IsFloatingPoint(DType::kBF16));
  EXPECT_TRUE(IsFloatingPoint(DType::kF64));
  EXPECT_FALSE(IsFloatingPoint(DType::kI32));
  EXPECT_FALSE(IsFloatingPoint(DType::kU8));
}

TEST(DTypeTest, DTypeOfMapsCTypes) {
  static_assert(DTypeOf<float>() == DType::kF32);
  static_assert(DTypeOf<BFloat16>() == DType::kBF16);
  static_assert(DTypeOf<int8_t>() == DType::kI8);
  std::ostringstream os;
  os << DType::kI64;
  EXPECT_EQ(os.str(), "i64");
}

TEST(DTypeTest, VisitDTypeReachesTheMatchingCType) {
  for (DType dtype : AllDTypes()) {
    const DType seen = VisitDType(dtype, [](auto zero) { return DTypeOf<decltype(zero)>(); });
    EXPECT_EQ(seen, dtype);
    const size_t size = VisitDType(dtype, [](auto zero) { return sizeof(zero); });
    EXPECT_EQ(size, DTypeSize(dtype));
  }
}

}  // namespace
}  // namespace loom
