// ScopedSigpipeBlock: a write into a pipe nobody reads fails with EPIPE instead of
// ending the test (exit status 141), in the guarded thread and in threads started
// inside the guard; the thread's mask and pending set are as before afterwards.
#include "collectives/transport/gloo/internal/sigpipe.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "gtest/gtest.h"

namespace loom {
namespace gloo_internal {
namespace {

bool Blocked() {
  sigset_t mask;
  sigemptyset(&mask);
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  return sigismember(&mask, SIGPIPE) == 1;
}

bool Pending() {
  sigset_t pending;
  sigemptyset(&pending);
  sigpending(&pending);
  return sigismember(&pending, SIGPIPE) == 1;
}

// A pipe whose read end is closed: every write raises SIGPIPE.
class BrokenPipe {
 public:
  BrokenPipe() {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    close(fds[0]);
    write_fd_ = fds[1];
  }
  ~BrokenPipe() { close(write_fd_); }
  // Write returns errno of a one-byte write, or 0 when it succeeded.
  int Write() const {
    const char byte = 'x';
    return write(write_fd_, &byte, 1) == 1 ? 0 : errno;
  }

 private:
  int write_fd_ = -1;
};

TEST(ScopedSigpipeBlockTest, WriteFailsWithEpipeAndNothingIsLeftPending) {
  ASSERT_FALSE(Blocked());
  const BrokenPipe broken;
  {
    const ScopedSigpipeBlock guard;
    EXPECT_TRUE(Blocked());
    EXPECT_EQ(broken.Write(), EPIPE);
    EXPECT_EQ(broken.Write(), EPIPE);
    EXPECT_TRUE(Pending());
  }
  EXPECT_FALSE(Blocked());
  EXPECT_FALSE(Pending());
}

TEST(ScopedSigpipeBlockTest, ThreadStartedInsideKeepsItBlockedForLife) {
  const BrokenPipe broken;
  std::thread thread;
  bool blocked_in_thread = false;
  int error_in_thread = 0;
  {
    const ScopedSigpipeBlock guard;
    thread = std::thread([&] {
      blocked_in_thread = Blocked();
      error_in_thread = broken.Write();
    });
  }
  thread.join();
  EXPECT_TRUE(blocked_in_thread);
  EXPECT_EQ(error_in_thread, EPIPE);
  EXPECT_FALSE(Blocked());
}

TEST(ScopedSigpipeBlockTest, LeavesAnAlreadyBlockedMaskAlone) {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &pipe_set, &old), 0);
  const BrokenPipe broken;
  {
    const ScopedSigpipeBlock guard;
    EXPECT_EQ(broken.Write(), EPIPE);
  }
  // Still blocked, and the signal raised stays the caller's to handle.
  EXPECT_TRUE(Blocked());
  EXPECT_TRUE(Pending());
  const timespec zero = {0, 0};
  EXPECT_EQ(sigtimedwait(&pipe_set, nullptr, &zero), SIGPIPE);
  ASSERT_EQ(pthread_sigmask(SIG_SETMASK, &old, nullptr), 0);
}

}  // namespace
}  // namespace gloo_internal
}  // namespace loom
