#include "core/status_macros.h"

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd value " + std::to_string(x));
  return x / 2;
}

absl::Status CheckPositive(int x) {
  if (x <= 0) return absl::OutOfRangeError("value " + std::to_string(x) + " <= 0");
  return absl::OkStatus();
}

int calls = 0;
absl::Status CountedCheck(int x) {
  ++calls;
  return CheckPositive(x);
}

absl::StatusOr<int> QuarterOfPositive(int x) {
  LOOM_RETURN_IF_ERROR(CountedCheck(x));
  LOOM_ASSIGN_OR_RETURN(int half, Half(x));
  int quarter = 0;
  LOOM_ASSIGN_OR_RETURN(quarter, Half(half));  // assigns an existing variable
  return quarter;
}

TEST(StatusMacrosTest, PassesValuesThrough) {
  EXPECT_THAT(QuarterOfPositive(12), IsOkAndHolds(3));
}

TEST(StatusMacrosTest, ReturnIfErrorReturnsTheErrorAndEvaluatesOnce) {
  calls = 0;
  EXPECT_THAT(QuarterOfPositive(-4),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("value -4 <= 0")));
  EXPECT_EQ(calls, 1);
}

TEST(StatusMacrosTest, AssignOrReturnReturnsTheFirstError) {
  EXPECT_THAT(QuarterOfPositive(7),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("odd value 7")));
  EXPECT_THAT(QuarterOfPositive(6),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("odd value 3")));
}

TEST(StatusMatchersTest, StatusIsDistinguishesCodeAndMessage) {
  const absl::Status status = absl::NotFoundError("no rank 9");
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kNotFound, HasSubstr("rank 9")));
  EXPECT_THAT(status, ::testing::Not(StatusIs(absl::StatusCode::kInternal, HasSubstr("rank 9"))));
  EXPECT_THAT(status, ::testing::Not(StatusIs(absl::StatusCode::kNotFound, HasSubstr("rank 8"))));
  EXPECT_THAT(status, ::testing::Not(IsOk()));
  EXPECT_THAT(absl::StatusOr<int>(5), ::testing::Not(IsOkAndHolds(6)));
}

}  // namespace
}  // namespace loom
