#include "tools/training/offload_mapping.h"

#include <sys/stat.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "core/temp_dir_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

// Two fresh directories under the test's temporary directory, ':'-separated.
std::string TwoDirectories() {
  const std::string base = FreshTestDirectory("offload_mapping");
  if (base.empty()) return "";
  const std::string a = base + "/a", b = base + "/b";
  if (mkdir(a.c_str(), 0700) != 0 || mkdir(b.c_str(), 0700) != 0) return "";
  return absl::StrCat(a, ":", b);
}

// A spec maps onto the job's options and back to the same spec.
TEST(OffloadMappingTest, SpecMapsOntoTheOptionsAndBack) {
  const std::string dirs = TwoDirectories();
  ASSERT_FALSE(dirs.empty());
  LOOM_ASSERT_OK_AND_ASSIGN(
      const OffloadConfig config,
      ParseOffloadConfig(absl::StrCat("optimizer=nvme,params=nvme,grads=nvme,host_budget=1G,"
                                      "nvme_budget=1M,nvme_dirs=", dirs, ",prefetch=1,threads=3")));
  TrainJobOptions options;
  LOOM_ASSERT_OK(ApplyOffloadConfig(config, &options));
  EXPECT_EQ(options.offload, OffloadKind::kNvme);
  EXPECT_EQ(options.offload_params, OffloadKind::kNvme);
  EXPECT_EQ(options.offload_grads, OffloadKind::kNvme);
  EXPECT_EQ(options.nvme_dir, dirs);
  EXPECT_EQ(options.prefetch_depth, 1);
  EXPECT_EQ(options.adamw_threads, 3);
  OffloadConfig back = JobOffloadConfig(options);
  back.host_budget_bytes = config.host_budget_bytes;  // the job keeps no budgets
  back.nvme_budget_bytes = config.nvme_budget_bytes;
  EXPECT_EQ(FormatOffloadConfig(back), FormatOffloadConfig(config));

  LOOM_ASSERT_OK_AND_ASSIGN(const OffloadConfig cpu,
                            ParseOffloadConfig("optimizer=cpu,params=cpu,host_budget=1G"));
  LOOM_ASSERT_OK(ApplyOffloadConfig(cpu, &options));
  EXPECT_EQ(options.offload, OffloadKind::kCpu);
  EXPECT_EQ(options.offload_params, OffloadKind::kCpu);
  EXPECT_EQ(options.nvme_dir, "");
  EXPECT_GE(options.adamw_threads, 1);  // threads=0: one per online core

  // The library's validation (through PlanOffload) comes back named.
  LOOM_ASSERT_OK_AND_ASSIGN(const OffloadConfig unbudgeted, ParseOffloadConfig("params=cpu"));
  EXPECT_THAT(ApplyOffloadConfig(unbudgeted, &options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--offload_config: offload: host_budget is 0")));
}

// The GPU AdamW offloads nothing from the device it runs on.
TEST(OffloadMappingTest, GpuAdamWIsNoOffload) {
  TrainJobOptions options;
  options.offload = OffloadKind::kGpu;
  EXPECT_EQ(JobOffloadConfig(options).optimizer_state, OffloadDevice::kNone);
}

// What the job's engine does not do is named, key and value.
TEST(OffloadMappingTest, WhatTheJobCannotDoIsNamed) {
  const struct {
    const char* spec;
    const char* error;
  } cases[] = {
      {"optimizer=cpu,compression=lz4,host_budget=1G", "compression=lz4: the ZeRO engine stores"},
      {"optimizer=cpu,state=bf16,host_budget=1G", "state=bf16: the ZeRO engine's AdamW keeps f32"},
      {"optimizer=cpu,pinned=pinned,host_budget=1G", "pinned=pinned: this job computes on the CPU"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.spec);
    LOOM_ASSERT_OK_AND_ASSIGN(const OffloadConfig config, ParseOffloadConfig(c.spec));
    TrainJobOptions options;
    EXPECT_THAT(ApplyOffloadConfig(config, &options),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.error)));
  }
}

}  // namespace
}  // namespace loom
