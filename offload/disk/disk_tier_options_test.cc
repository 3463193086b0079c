// DiskTierOptions validation and DiskTier::Create's checks of the directories: exact
// codes and the values in the messages.
#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload/disk/disk_test_util.h"
#include "offload/disk/disk_tier.h"

namespace loom {
namespace {

using disk_testing::MakeTestDirectory;
using ::testing::AllOf;
using ::testing::HasSubstr;

DiskTierOptions Valid() {
  DiskTierOptions options;
  options.directories = {MakeTestDirectory("options")};
  return options;
}

TEST(DiskTierOptionsTest, DefaultsAreValid) {
  LOOM_EXPECT_OK(ValidateDiskTierOptions(Valid()));
  LOOM_ASSERT_OK_AND_ASSIGN(auto tier, DiskTier::Create(Valid()));
  EXPECT_EQ(tier->options().stripe_bytes, size_t{1} << 20);
}

TEST(DiskTierOptionsTest, RejectsBadValues) {
  const auto invalid = [](const DiskTierOptions& o, const std::string& text) {
    EXPECT_THAT(ValidateDiskTierOptions(o),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(text)));
    EXPECT_THAT(DiskTier::Create(o), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(text)));
  };
  DiskTierOptions o = Valid();
  o.directories.clear();
  invalid(o, "DiskTierOptions.directories is empty");
  o = Valid();
  o.directories.push_back("");
  invalid(o, "DiskTierOptions.directories[1] is an empty path");
  o = Valid();
  o.stripe_bytes = 5000;
  invalid(o, "DiskTierOptions.stripe_bytes = 5000 is not a multiple of 4096 in [4096, 268435456]");
  o.stripe_bytes = 0;
  invalid(o, "DiskTierOptions.stripe_bytes = 0 ");
  o.stripe_bytes = size_t{512} << 20;
  invalid(o, "DiskTierOptions.stripe_bytes = 536870912 ");
  o = Valid();
  o.stripe_bytes = 12288;
  o.checksum_block_bytes = 8192;
  invalid(o,
          "DiskTierOptions.checksum_block_bytes = 8192 must be a multiple of 4096 that "
          "divides stripe_bytes = 12288");
  o.checksum_block_bytes = 1000;
  invalid(o, "DiskTierOptions.checksum_block_bytes = 1000 ");
  o = Valid();
  o.queue_depth = 0;
  invalid(o, "DiskTierOptions.queue_depth = 0 is not in [1, 4096]");
  o.queue_depth = 5000;
  invalid(o, "DiskTierOptions.queue_depth = 5000 ");
  o = Valid();
  o.threads = 0;
  invalid(o, "DiskTierOptions.threads = 0 is not in [1, 1024]");
  o = Valid();
  o.io_timeout = absl::ZeroDuration();
  invalid(o, "DiskTierOptions.io_timeout = 0 is not positive");
  o = Valid();
  o.engine = static_cast<IoEngine>(7);
  invalid(o, "DiskTierOptions.engine = 7 is not an IoEngine");
}

TEST(DiskTierOptionsTest, ChecksTheDirectories) {
  DiskTierOptions o = Valid();
  o.directories.push_back(o.directories[0] + "/missing");
  EXPECT_THAT(DiskTier::Create(o),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr(absl::StrCat("DiskTierOptions.directories[1] = '",
                                                    o.directories[1], "': open")),
                             HasSubstr("No such file or directory"))));

  o = Valid();
  const std::string file = o.directories[0] + "/plain_file";
  ::close(::open(file.c_str(), O_CREAT | O_WRONLY, 0644));
  o.directories.push_back(file);
  EXPECT_THAT(DiskTier::Create(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("'" + file + "' is not a directory")));

  o = Valid();
  o.directories.push_back(o.directories[0] + "/.");
  EXPECT_THAT(DiskTier::Create(o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("is the same directory as DiskTierOptions.directories[0]")));

  // /proc takes no new files, not even from root.
  o = Valid();
  o.directories = {"/proc"};
  auto tier = DiskTier::Create(o);
  EXPECT_FALSE(tier.ok());
  EXPECT_THAT(tier.status().message(),
              HasSubstr("DiskTierOptions.directories[0] = '/proc' is not writable: openat(/proc/"));
}

TEST(DiskTierOptionsTest, EngineNames) {
  EXPECT_EQ(IoEngineName(IoEngine::kIoUring), "io_uring");
  EXPECT_THAT(ParseIoEngine("thread_pool"), IsOkAndHolds(IoEngine::kThreadPool));
  EXPECT_THAT(ParseIoEngine("auto"), IsOkAndHolds(IoEngine::kAuto));
  EXPECT_THAT(ParseIoEngine("spdk"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown I/O engine 'spdk'")));
}

TEST(DiskTierOptionsTest, RejectsNamesTooLongToEscape) {
  LOOM_ASSERT_OK_AND_ASSIGN(auto tier, DiskTier::Create(Valid()));
  std::vector<std::byte> data(8);
  EXPECT_THAT(
      tier->Write(std::string(201, 'n'), data),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("more than the limit of 200")));
  LOOM_EXPECT_OK(tier->Write(std::string(200, 'n'), data));
}

}  // namespace
}  // namespace loom
