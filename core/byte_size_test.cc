#include "core/byte_size.h"

#include <cstdint>
#include <string>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(ParseByteSizeTest, PlainAndSuffixed) {
  EXPECT_THAT(ParseByteSize("0"), IsOkAndHolds(0u));
  EXPECT_THAT(ParseByteSize("4096"), IsOkAndHolds(4096u));
  EXPECT_THAT(ParseByteSize(" 4K "), IsOkAndHolds(4096u));
  EXPECT_THAT(ParseByteSize("64k"), IsOkAndHolds(65536u));
  EXPECT_THAT(ParseByteSize("64M"), IsOkAndHolds(size_t{64} << 20));
  EXPECT_THAT(ParseByteSize("1g"), IsOkAndHolds(size_t{1} << 30));
  EXPECT_THAT(ParseByteSize("2T"), IsOkAndHolds(size_t{2} << 40));
}

TEST(ParseByteSizeTest, FractionsRoundToTheNearestByte) {
  EXPECT_THAT(ParseByteSize("1.5G"), IsOkAndHolds(size_t{3} << 29));
  EXPECT_THAT(ParseByteSize("0.3K"), IsOkAndHolds(307u));   // 307.2
  EXPECT_THAT(ParseByteSize("0.5K"), IsOkAndHolds(512u));
  EXPECT_THAT(ParseByteSize(".25M"), IsOkAndHolds(size_t{1} << 18));
  EXPECT_THAT(ParseByteSize("1.0009765625K"), IsOkAndHolds(1025u));
}

TEST(ParseByteSizeTest, LargeCountsAreExact) {
  // 2^53 + 1 is where a parse through double would lose the last byte.
  EXPECT_THAT(ParseByteSize("9007199254740993"), IsOkAndHolds(size_t{9007199254740993u}));
  EXPECT_THAT(ParseByteSize("18446744073709551615"), IsOkAndHolds(SIZE_MAX));
  EXPECT_THAT(ParseByteSize("16777215T"), IsOkAndHolds(size_t{16777215} << 40));
}

TEST(ParseByteSizeTest, RefusalsQuoteTheText) {
  for (const std::string bad : {"", "lots", "G", "-1", "+5", "1.5", "4KB", "4 K", "1e3",
                                "18446744073709551616", "16777216T", "99999999T", "1..5K"}) {
    EXPECT_THAT(ParseByteSize(bad), StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("'" + bad + "' is not a byte size")))
        << bad;
  }
}

}  // namespace
}  // namespace loom
