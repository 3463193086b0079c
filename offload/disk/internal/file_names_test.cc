#include "offload/disk/internal/file_names.h"

#include <set>
#include <string>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace disk_internal {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(FileNamesTest, Escapes) {
  EXPECT_THAT(EscapeTensorName("layers.0.attn.q_proj-w"), IsOkAndHolds("layers.0.attn.q_proj-w"));
  EXPECT_THAT(EscapeTensorName("layers.0/attn.q"), IsOkAndHolds("layers.0%2Fattn.q"));
  EXPECT_THAT(EscapeTensorName(".hidden"), IsOkAndHolds("%2Ehidden"));
  EXPECT_THAT(EscapeTensorName(".."), IsOkAndHolds("%2E."));
  EXPECT_THAT(EscapeTensorName("a%b c:0"), IsOkAndHolds("a%25b%20c%3A0"));
  EXPECT_THAT(EscapeTensorName(std::string("\0\xff", 2)), IsOkAndHolds("%00%FF"));
}

TEST(FileNamesTest, RejectsEmptyAndLong) {
  EXPECT_THAT(EscapeTensorName(""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tensor name is empty")));
  EXPECT_THAT(EscapeTensorName(std::string(200, 'a')), IsOk());
  EXPECT_THAT(EscapeTensorName(std::string(201, 'a')),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("201 bytes escapes to 201 bytes, more than the limit of 200")));
  EXPECT_THAT(EscapeTensorName(std::string(70, '/')),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("escapes to 210 bytes")));
}

TEST(FileNamesTest, FileNames) {
  EXPECT_EQ(StripeFileName("w", 0, 0xAB), "w.0.ldt");
  EXPECT_EQ(StripeFileName("w", 2, 0xAB), "w.2.00000000000000ab.ldt");
  EXPECT_EQ(StripeFileName("a.1.ldt", 12, ~uint64_t{0}), "a.1.ldt.12.ffffffffffffffff.ldt");
  EXPECT_THAT(TempFileName("w.0.ldt", 5), StartsWith("w.0.ldt.tmp-"));
  EXPECT_NE(TempFileName("w.0.ldt", 5), TempFileName("w.0.ldt", 6));
  // The longest escaped name still fits NAME_MAX with every suffix.
  const std::string longest(kMaxEscapedNameBytes, 'n');
  EXPECT_LE(TempFileName(StripeFileName(longest, 0, 1), ~uint64_t{0}).size(), 255u);
  EXPECT_LE(StripeFileName(longest, 1023, ~uint64_t{0}).size(), 255u);
}

TEST(FileNamesTest, RecognizesOnlyItsOwnFiles) {
  EXPECT_TRUE(IsFileOfTensor("w.0.ldt", "w", 0));
  EXPECT_TRUE(IsFileOfTensor(TempFileName("w.0.ldt", 9), "w", 0));
  EXPECT_TRUE(IsFileOfTensor("w.2.00000000000000ab.ldt", "w", 2));
  EXPECT_FALSE(IsFileOfTensor("w.2.00000000000000ab.ldt", "w", 1));
  EXPECT_FALSE(IsFileOfTensor("w.0.ldt", "w", 1));
  EXPECT_FALSE(IsFileOfTensor("w.0.ldt", "v", 0));
  // Files of other tensors whose names extend "w".
  EXPECT_FALSE(IsFileOfTensor("w.0.ldt.tmp-1-2.0.ldt", "w", 0));
  EXPECT_FALSE(IsFileOfTensor("w.0.ldt.0.ldt", "w", 0));
  EXPECT_FALSE(IsFileOfTensor("w.2.00000000000000ab.ldt.2.00000000000000ab.ldt", "w", 2));
  EXPECT_FALSE(IsFileOfTensor("w.2.00000000000000AB.ldt", "w", 2));
  EXPECT_FALSE(IsFileOfTensor("w.2.0ab.ldt", "w", 2));
}

TEST(FileNamesTest, DistinctNamesNeverShareFiles) {
  std::set<std::string> seen;
  for (const char* name : {"a", "a.0", "a.0.ldt", "a.1", "a/0", "a%2F0", "a.0.ldt.0.ldt",
                           "a.1.0000000000000001.ldt"}) {
    LOOM_ASSERT_OK_AND_ASSIGN(const std::string escaped, EscapeTensorName(name));
    for (uint32_t k = 0; k < 3; ++k) {
      for (uint64_t id : {uint64_t{1}, uint64_t{2}}) {
        const std::string file = StripeFileName(escaped, k, id);
        if (k == 0 && id == 2) continue;  // file 0's name has no id
        EXPECT_TRUE(seen.insert(file).second) << name << " file " << k;
      }
    }
  }
}

}  // namespace
}  // namespace disk_internal
}  // namespace loom
