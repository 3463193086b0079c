// What containers with a seccomp filter against io_uring see: this binary installs such
// a filter on itself (io_uring_setup fails with EPERM, as under Docker's default
// profile since 2023), then checks that kAuto falls back to the thread pool and says
// why, and that an explicit kIoUring is FailedPrecondition with the errno text. Its own
// binary because a seccomp filter cannot be removed.
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload/disk/disk_test_util.h"
#include "offload/disk/disk_tier.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

// Returns EPERM from io_uring_setup on x86-64, allows everything else.
void ForbidIoUring() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program = {static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
  ASSERT_EQ(::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
  ASSERT_EQ(::syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &program),
            0)
      << "seccomp: " << std::strerror(errno);
}

TEST(DiskTierNoUringTest, AutoFallsBackAndExplicitRequestFails) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "the filter is written for x86-64";
#endif
  ForbidIoUring();
  DiskTierOptions options;
  options.directories = {disk_testing::MakeTestDirectory("no_uring")};

  LOOM_ASSERT_OK_AND_ASSIGN(auto tier, DiskTier::Create(options));
  EXPECT_EQ(tier->stats().engine, IoEngine::kThreadPool);
  EXPECT_THAT(tier->stats().engine_note,
              HasSubstr("io_uring unavailable (io_uring_queue_init(4): Operation not permitted); "
                        "using the thread pool"));
  const std::vector<std::byte> data = disk_testing::SeededBytes(3 << 20, 1);
  std::vector<std::byte> back(data.size());
  LOOM_ASSERT_OK(tier->Write("w", data));
  LOOM_ASSERT_OK(tier->Read("w", absl::MakeSpan(back)));
  EXPECT_TRUE(back == data);

  options.engine = IoEngine::kIoUring;
  EXPECT_THAT(DiskTier::Create(options),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("DiskTierOptions.engine = io_uring, but io_uring is "
                                 "unavailable: io_uring_queue_init(4): Operation not permitted")));
}

}  // namespace
}  // namespace loom
