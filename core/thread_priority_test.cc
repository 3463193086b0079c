#include "core/thread_priority.h"

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "absl/status/status.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(ThreadPriorityTest, RaisesTheCallingThreadOnlyOrLeavesItWhereRefused) {
  LOOM_ASSERT_OK_AND_ASSIGN(const int main_before, ThisThreadNice());
  int before = 0;
  int after = 0;
  absl::Status raised;
  std::thread([&] {
    before = *ThisThreadNice();
    raised = RaiseThisThreadPriority(3);
    after = *ThisThreadNice();
  }).join();
  if (raised.ok()) {
    EXPECT_EQ(after, std::max(-20, before - 3));
  } else {
    // A process without CAP_SYS_NICE: refused, and nothing changed.
    EXPECT_THAT(raised, StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("setpriority")));
    EXPECT_EQ(after, before);
  }
  LOOM_ASSERT_OK_AND_ASSIGN(const int main_after, ThisThreadNice());
  EXPECT_EQ(main_after, main_before) << "another thread's raise changed the caller's nice";
}

TEST(ThreadPriorityTest, ClampsAtMinusTwentyAndTakesZeroSteps) {
  std::thread([] {
    const int before = *ThisThreadNice();
    LOOM_EXPECT_OK(RaiseThisThreadPriority(0));
    EXPECT_EQ(*ThisThreadNice(), before);
    if (RaiseThisThreadPriority(100).ok()) {
      EXPECT_EQ(*ThisThreadNice(), -20);
    }
  }).join();
}

TEST(ThreadPriorityTest, RefusesNegativeSteps) {
  EXPECT_THAT(RaiseThisThreadPriority(-1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("steps=-1 is negative")));
}

// The refusal, for real: a child process that gave up root's privileges (user
// nobody, RLIMIT_NICE 0 by default) asks for a raise.
TEST(ThreadPriorityTest, AnUnprivilegedProcessIsRefusedByName) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to drop to an unprivileged user";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    const absl::Status refused = RaiseThisThreadPriority(5);
    const bool named = refused.code() == absl::StatusCode::kPermissionDenied &&
                       refused.message().find("needs CAP_SYS_NICE") != absl::string_view::npos;
    ::_exit(named && *ThisThreadNice() == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: not refused with the message; 3: could not drop root";
}

}  // namespace
}  // namespace loom
