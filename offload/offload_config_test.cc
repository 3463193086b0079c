#include "offload/offload_config.h"

#include <string>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string TempDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

TEST(OffloadConfigTest, ParsesWhatItFormats) {
  LOOM_ASSERT_OK_AND_ASSIGN(
      OffloadConfig config,
      ParseOffloadConfig("optimizer=cpu, params=nvme,host_budget=16G,nvme_budget=1.5T,"
                         "nvme_dirs=/a/swap:/b/swap,prefetch=3,pinned=pageable,"
                         "compression=bf16,state=blockwise8,state_block=1024,threads=2"));
  EXPECT_EQ(config.optimizer_state, OffloadDevice::kCpu);
  EXPECT_EQ(config.parameters, OffloadDevice::kNvme);
  EXPECT_EQ(config.gradients, OffloadDevice::kNone);
  EXPECT_EQ(config.host_budget_bytes, size_t{16} << 30);
  EXPECT_EQ(config.nvme_budget_bytes, size_t{3} << 39);
  EXPECT_THAT(config.nvme_directories, ::testing::ElementsAre("/a/swap", "/b/swap"));
  EXPECT_EQ(config.prefetch_depth, 3);
  EXPECT_EQ(config.host_memory, HostMemoryKind::kPageable);
  EXPECT_EQ(config.compression, OffloadCompression::kBf16);
  EXPECT_EQ(config.state_format, OptimizerStateFormat::kBlockwise8);
  EXPECT_EQ(config.state_block_size, 1024);
  EXPECT_EQ(config.cpu_threads, 2);
  const std::string spec = FormatOffloadConfig(config);
  EXPECT_THAT(spec, HasSubstr("host_budget=16G"));
  EXPECT_THAT(spec, HasSubstr("nvme_budget=1536G"));
  LOOM_ASSERT_OK_AND_ASSIGN(const OffloadConfig again, ParseOffloadConfig(spec));
  EXPECT_EQ(FormatOffloadConfig(again), spec);
}

TEST(OffloadConfigTest, ParseNamesWhatIsWrong) {
  EXPECT_THAT(ParseOffloadConfig("optimizer=gpu").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("optimizer=gpu is not one of none|cpu|nvme")));
  EXPECT_THAT(ParseOffloadConfig("prefetch=2,prefetch=3").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key prefetch given twice")));
  EXPECT_THAT(ParseOffloadConfig("budget=1G").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown key 'budget'")));
  EXPECT_THAT(ParseOffloadConfig("host_budget=lots").status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("host_budget: 'lots' is not a byte size")));
  EXPECT_THAT(ParseOffloadConfig("prefetch=two").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("prefetch=two is not an integer")));
  EXPECT_THAT(ParseOffloadConfig("cpu").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'cpu' is not key=value")));
}

TEST(OffloadConfigTest, NothingOffloadedIsValid) {
  LOOM_EXPECT_OK(ValidateOffloadConfig(OffloadConfig{}));
}

TEST(OffloadConfigTest, CpuOffloadNeedsAHostBudgetWithinPhysicalMemory) {
  OffloadConfig config;
  config.optimizer_state = OffloadDevice::kCpu;
  config.parameters = OffloadDevice::kCpu;
  config.host_memory = HostMemoryKind::kPageable;
  EXPECT_THAT(ValidateOffloadConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("host_budget is 0, but parameters (cpu), optimizer state (cpu) "
                                 "are offloaded")));
  config.host_budget_bytes = PhysicalMemoryBytes() * 2;
  EXPECT_THAT(ValidateOffloadConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(std::to_string(PhysicalMemoryBytes() * 2)),
                             HasSubstr("physical memory, " + std::to_string(PhysicalMemoryBytes())))));
  config.host_budget_bytes = size_t{1} << 30;
  LOOM_EXPECT_OK(ValidateOffloadConfig(config));
}

TEST(OffloadConfigTest, EveryProblemIsListedWithItsValue) {
  OffloadConfig config;
  config.optimizer_state = OffloadDevice::kCpu;
  config.host_budget_bytes = size_t{1} << 20;
  config.prefetch_depth = 0;
  config.state_format = OptimizerStateFormat::kBlockwise8;
  config.state_block_size = 300;
  config.compression = OffloadCompression::kLz4;
  config.cpu_threads = -1;
  const absl::Status status = ValidateOffloadConfig(config);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kInvalidArgument,
                               AllOf(HasSubstr("prefetch depth 0 must be at least 1"),
                                     HasSubstr("state_block 300 must be a power of two in [256, 2048]"),
                                     HasSubstr("compression=lz4 applies to offloaded parameters and "
                                               "gradients, and neither is offloaded"),
                                     HasSubstr("threads -1"))));
  config = OffloadConfig{};
  config.state_format = OptimizerStateFormat::kBf16;
  EXPECT_THAT(ValidateOffloadConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("state=bf16 applies to the CPU optimizer, but optimizer=none")));
}

TEST(OffloadConfigTest, NvmeNeedsExistingWritableDirectoriesWithRoom) {
  OffloadConfig config;
  config.parameters = OffloadDevice::kNvme;
  config.host_budget_bytes = size_t{1} << 20;
  EXPECT_THAT(ValidateOffloadConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("nvme_dirs is empty, but parameters go to nvme"),
                             HasSubstr("nvme_budget is 0"))));
  config.nvme_budget_bytes = size_t{1} << 20;
  config.nvme_directories = {TempDir(), TempDir() + "/no/such/dir"};
  EXPECT_THAT(ValidateOffloadConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("nvme_dirs: " + TempDir() + "/no/such/dir: No such file")));
  config.nvme_directories = {TempDir(), TempDir()};
  EXPECT_THAT(ValidateOffloadConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lists " + TempDir() + " twice")));
  config.nvme_directories = {TempDir()};
  LOOM_EXPECT_OK(ValidateOffloadConfig(config));
  config.nvme_budget_bytes = size_t{1} << 60;  // An exabyte: no test machine has it free.
  EXPECT_THAT(ValidateOffloadConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("nvme_budget 1048576T"), HasSubstr("bytes free in nvme_dirs"))));
}

TEST(OffloadConfigTest, NvmeSettingsWithoutNvmeAreAMistake) {
  OffloadConfig config;
  config.nvme_directories = {TempDir()};
  EXPECT_THAT(ValidateOffloadConfig(config),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nothing is offloaded to nvme")));
}

}  // namespace
}  // namespace loom
