#include "core/thread_priority.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "core/posix.h"

namespace loom {
namespace {

// On Linux, PRIO_PROCESS with a thread id addresses that thread alone (the
// scheduler's entity is the thread; glibc has no pthread wrapper for nice).
id_t ThisThreadId() { return static_cast<id_t>(::syscall(SYS_gettid)); }

}  // namespace

absl::StatusOr<int> ThisThreadNice() {
  errno = 0;
  const int nice = ::getpriority(PRIO_PROCESS, ThisThreadId());
  // -1 is also a valid nice value: only errno tells a failure.
  if (nice == -1 && errno != 0) {
    return ErrnoToStatus(errno, absl::StrCat("getpriority(thread ", ThisThreadId(), ")"));
  }
  return nice;
}

absl::Status RaiseThisThreadPriority(int steps) {
  if (steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("RaiseThisThreadPriority: steps=", steps, " is negative"));
  }
  absl::StatusOr<int> now = ThisThreadNice();
  if (!now.ok()) return now.status();
  const int target = std::max(-20, *now - steps);
  if (target == *now) return absl::OkStatus();
  if (::setpriority(PRIO_PROCESS, ThisThreadId(), target) != 0) {
    const int error = errno;
    std::string what = absl::StrCat("setpriority(thread ", ThisThreadId(), ", nice ", *now,
                                    " -> ", target, ")");
    if (error == EPERM || error == EACCES) {
      return absl::PermissionDeniedError(
          absl::StrCat(what, ": ", StrError(error), " (needs CAP_SYS_NICE or RLIMIT_NICE)"));
    }
    return ErrnoToStatus(error, what);
  }
  return absl::OkStatus();
}

}  // namespace loom
