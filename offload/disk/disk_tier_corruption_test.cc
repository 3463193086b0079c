// A torn, truncated, corrupted or mismatched file is an error naming the tensor (and
// the file and block), never silent garbage. Run for both engines.
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload/disk/disk_test_util.h"
#include "offload/disk/disk_tier.h"

namespace loom {
namespace {

using disk_testing::FlipByte;
using disk_testing::MakeTestDirectory;
using disk_testing::ReadWholeFile;
using disk_testing::SeededBytes;
using disk_testing::TruncateFile;
using disk_testing::WriteWholeFile;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr size_t kStripe = 64 << 10;
constexpr size_t kBlock = 16 << 10;
constexpr size_t kHeader = 4096;             // short name, few blocks: one page
constexpr size_t kSize = 5 * kStripe + 100;  // 6 stripes: file 0 has 0,2,4; file 1 has 1,3,5

class DiskTierCorruptionTest : public ::testing::TestWithParam<IoEngine> {
 protected:
  void SetUp() override {
    options_.directories = {MakeTestDirectory("corrupt_d0"), MakeTestDirectory("corrupt_d1")};
    options_.stripe_bytes = kStripe;
    options_.checksum_block_bytes = kBlock;
    options_.engine = GetParam();
    auto tier = DiskTier::Create(options_);
    if (GetParam() == IoEngine::kIoUring && absl::IsFailedPrecondition(tier.status())) {
      GTEST_SKIP() << tier.status();
    }
    LOOM_ASSERT_OK(tier.status());
    tier_ = std::move(tier).value();
    data_ = SeededBytes(kSize, 42);
    LOOM_ASSERT_OK(tier_->Write("victim", data_));
    back_.resize(kSize);
  }

  // File k of the tensor's current version (files k >= 1 carry the write id).
  std::string File(int k, const std::string& name = "victim") const {
    return disk_testing::FindFile(options_.directories[k], absl::StrCat(name, ".", k, "."));
  }
  absl::Status ReadVictim() { return tier_->Read("victim", absl::MakeSpan(back_)); }

  DiskTierOptions options_;
  std::unique_ptr<DiskTier> tier_;
  std::vector<std::byte> data_, back_;
};

TEST_P(DiskTierCorruptionTest, CleanReadSucceeds) {
  LOOM_ASSERT_OK(ReadVictim());
  EXPECT_TRUE(back_ == data_);
}

TEST_P(DiskTierCorruptionTest, FlippedDataByteNamesTensorFileAndBlock) {
  // File 1, slot 1 (stripe 3), second block of that stripe: block 5 of the file,
  // tensor bytes [3 * 64 KiB + 16 KiB, 3 * 64 KiB + 32 KiB).
  FlipByte(File(1), kHeader + kStripe + kBlock + 5);
  EXPECT_THAT(
      ReadVictim(),
      StatusIs(absl::StatusCode::kDataLoss,
               AllOf(HasSubstr("tensor 'victim'"),
                     HasSubstr(absl::StrCat("checksum mismatch in block 5 of file ", File(1))),
                     HasSubstr("(tensor bytes [212992, 229376))"))));
}

TEST_P(DiskTierCorruptionTest, FlippedByteInTheShortLastStripe) {
  // Stripe 5 (100 bytes) is slot 2 of file 1.
  FlipByte(File(1), kHeader + 2 * kStripe + 99);
  EXPECT_THAT(ReadVictim(), StatusIs(absl::StatusCode::kDataLoss,
                                     AllOf(HasSubstr("block 8 of file"),
                                           HasSubstr("(tensor bytes [327680, 327780))"))));
}

TEST_P(DiskTierCorruptionTest, StripeThatNeverReachedTheDiskIsDataLoss) {
  // A torn write: the header is valid but a stripe's bytes are not the ones it describes.
  std::vector<std::byte> bytes = ReadWholeFile(File(0));
  std::fill(bytes.begin() + kHeader + kStripe, bytes.begin() + kHeader + 2 * kStripe, std::byte{0});
  WriteWholeFile(File(0), bytes);
  EXPECT_THAT(ReadVictim(), StatusIs(absl::StatusCode::kDataLoss,
                                     AllOf(HasSubstr("tensor 'victim'"),
                                           HasSubstr("checksum mismatch in block 4 of file"))));
}

TEST_P(DiskTierCorruptionTest, TruncatedFileIsDataLoss) {
  TruncateFile(File(0), kHeader + kStripe);
  EXPECT_THAT(ReadVictim(),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(absl::StrCat("tensor 'victim': file ", File(0))),
                             HasSubstr("truncated: the file has 69632 bytes, its header "
                                       "describes 200704"))));
  TruncateFile(File(0), 10);
  EXPECT_THAT(ReadVictim(), StatusIs(absl::StatusCode::kDataLoss,
                                     AllOf(HasSubstr("tensor 'victim'"),
                                           HasSubstr("header truncated: 10 bytes"))));
}

TEST_P(DiskTierCorruptionTest, MissingStripeFileIsDataLoss) {
  ASSERT_EQ(::unlink(File(1).c_str()), 0);
  EXPECT_THAT(ReadVictim(), StatusIs(absl::StatusCode::kDataLoss,
                                     HasSubstr("tensor 'victim': stripe file 1 of 2 is missing")));
}

TEST_P(DiskTierCorruptionTest, MissingFirstFileIsNotFound) {
  // File 0 is the commit record: without it the tensor does not exist (and the other
  // files are leftovers that Remove reclaims).
  ASSERT_EQ(::unlink(File(0).c_str()), 0);
  EXPECT_THAT(ReadVictim(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("tensor 'victim' is not stored")));
  EXPECT_FALSE(tier_->Contains("victim"));
  LOOM_EXPECT_OK(tier_->Remove("victim"));
  EXPECT_TRUE(disk_testing::ListDirectory(options_.directories[1]).empty());
}

TEST_P(DiskTierCorruptionTest, HeaderOfAnotherTensorIsDataLoss) {
  LOOM_ASSERT_OK(tier_->Write("other", SeededBytes(kSize, 43)));
  WriteWholeFile(File(1), ReadWholeFile(File(1, "other")));
  EXPECT_THAT(ReadVictim(),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(absl::StrCat("tensor 'victim': file ", File(1))),
                             HasSubstr("holds a header of tensor 'other'"))));
}

TEST_P(DiskTierCorruptionTest, FilesOfDifferentWritesAreDataLoss) {
  // A file of the previous version copied over the current one (its name says the
  // current write id, its header another).
  const std::vector<std::byte> old_file1 = ReadWholeFile(File(1));
  LOOM_ASSERT_OK(tier_->Write("victim", SeededBytes(kSize, 44)));
  WriteWholeFile(File(1), old_file1);
  EXPECT_THAT(ReadVictim(), StatusIs(absl::StatusCode::kDataLoss,
                                     AllOf(HasSubstr("tensor 'victim'"),
                                           HasSubstr("come from different writes"))));
}

TEST_P(DiskTierCorruptionTest, CorruptedHeaderIsDataLoss) {
  FlipByte(File(0), 100);  // inside the block checksum list
  EXPECT_THAT(ReadVictim(),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr(File(0)), HasSubstr("header checksum mismatch"))));
  EXPECT_THAT(tier_->StoredBytes("victim"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("tensor 'victim'")));
  FlipByte(File(0), 100);
  FlipByte(File(0), 0);  // the magic
  EXPECT_THAT(ReadVictim(), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("bad magic")));
}

TEST_P(DiskTierCorruptionTest, WrongSizeBufferIsInvalidArgument) {
  std::vector<std::byte> small(kSize - 1);
  EXPECT_THAT(tier_->Read("victim", absl::MakeSpan(small)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tensor 'victim': the output buffer has 327779 bytes, the "
                                 "stored tensor has 327780")));
}

INSTANTIATE_TEST_SUITE_P(Engines, DiskTierCorruptionTest,
                         ::testing::Values(IoEngine::kIoUring, IoEngine::kThreadPool),
                         [](const ::testing::TestParamInfo<IoEngine>& param) {
                           return std::string(IoEngineName(param.param));
                         });

}  // namespace
}  // namespace loom
