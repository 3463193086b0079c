#include "core/checked_size.h"

#include <cstddef>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

TEST(CheckedMulTest, Products) {
  EXPECT_THAT(CheckedMul({}), IsOkAndHolds(1));
  EXPECT_THAT(CheckedMul({{"--vocab", 1000}, {"--hidden", 64}, {"bytes per f32", 4}}),
              IsOkAndHolds(256000));
  EXPECT_THAT(CheckedMul({{"a", kMax}, {"b", 1}}), IsOkAndHolds(kMax));
  EXPECT_THAT(CheckedMul({{"a", int64_t{1} << 31}, {"b", int64_t{1} << 31}}),
              IsOkAndHolds(int64_t{1} << 62));
}

TEST(CheckedMulTest, ZeroWinsOverAnOverflowingPair) {
  EXPECT_THAT(CheckedMul({{"a", kMax}, {"b", kMax}, {"c", 0}}), IsOkAndHolds(0));
}

TEST(CheckedMulTest, OverflowNamesEveryTerm) {
  EXPECT_THAT(CheckedMul({{"--hidden", 4000000000}, {"--hidden", 4000000000}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--hidden 4000000000 x --hidden 4000000000 overflows int64 "
                                 "(9223372036854775807)")));
  EXPECT_THAT(CheckedMul({{"a", kMax}, {"b", 2}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflows int64")));
  EXPECT_THAT(CheckedMul({{"a", int64_t{1} << 32}, {"b", int64_t{1} << 31}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflows int64")));
}

TEST(CheckedMulTest, NegativeIsRefused) {
  EXPECT_THAT(CheckedMul({{"--seq_len", -1}, {"--hidden", 64}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--seq_len -1 is negative (in --seq_len -1 x --hidden 64)")));
}

TEST(CheckedAddTest, SumsAndOverflow) {
  EXPECT_THAT(CheckedAdd({}), IsOkAndHolds(0));
  EXPECT_THAT(CheckedAdd({{"weights", 10}, {"grads", 20}}), IsOkAndHolds(30));
  EXPECT_THAT(CheckedAdd({{"a", kMax}, {"b", 0}}), IsOkAndHolds(kMax));
  EXPECT_THAT(CheckedAdd({{"a", kMax}, {"b", 1}}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a 9223372036854775807 + b 1 overflows int64")));
  EXPECT_THAT(CheckedAdd({{"a", -5}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("a -5 is negative")));
}

TEST(SizeFromUnsignedTest, RefusesWhatInt64CannotHold) {
  EXPECT_THAT(SizeFromUnsigned("--max_bytes", 4096), IsOkAndHolds(4096));
  EXPECT_THAT(SizeFromUnsigned("--max_bytes", static_cast<size_t>(kMax)), IsOkAndHolds(kMax));
  EXPECT_THAT(SizeFromUnsigned("--max_bytes", std::numeric_limits<size_t>::max()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--max_bytes 18446744073709551615 is larger than int64 allows")));
}

TEST(CheckFitsInMemoryTest, AgainstPhysicalMemory) {
  const int64_t physical = PhysicalMemoryBytes();
  ASSERT_GT(physical, 0);
  LOOM_EXPECT_OK(CheckFitsInMemory("nothing", 0));
  LOOM_EXPECT_OK(CheckFitsInMemory("all of it", physical));
  if (physical < kMax) {
    EXPECT_THAT(CheckFitsInMemory("--vocab 1000000000000 parameters", physical + 1),
                StatusIs(absl::StatusCode::kResourceExhausted,
                         AllOf(HasSubstr("--vocab 1000000000000 parameters need "),
                               HasSubstr(absl::StrCat(physical + 1, " bytes (")),
                               HasSubstr(absl::StrCat("this machine has ", physical, " bytes (")),
                               HasSubstr("of physical memory"))));
  }
}

TEST(HumanBytesTest, Units) {
  EXPECT_EQ(HumanBytes(0), "0 bytes");
  EXPECT_EQ(HumanBytes(1023), "1023 bytes");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(int64_t{1} << 40), "1.0 TiB");
}

}  // namespace
}  // namespace loom
