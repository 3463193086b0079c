// ScopedSigpipeBlock: keeps SIGPIPE blocked in the calling thread while gloo may write
// to a socket, so that a write into a connection the peer has closed or reset fails
// with EPIPE (which gloo turns into an IoException on the pair, and Loom into
// Unavailable) instead of killing the process.
//
// gloo writes with writev(2), which has no MSG_NOSIGNAL, and it never blocks SIGPIPE
// itself. Under the default disposition a write into a reset socket therefore ends
// the whole program without a word (exit status 141); that was the flaky
// gloo_conformance_test. Changing the process-wide disposition (SIG_IGN) would change
// the user's program too (a pipe writer that relies on SIGPIPE to stop), so the
// backend only blocks the signal in the threads where gloo writes:
//   - gloo's event-loop thread (started when the tcp Device is created) and Loom's
//     receiver and completion threads are started inside a guard, inherit the
//     blocked mask and keep it for life;
//   - a caller's thread is inside a guard for the duration of each gloo call
//     (GlooCall); on leaving, a SIGPIPE that a write raised meanwhile is taken off
//     the thread's pending set (sigtimedwait) before the old mask comes back.
//
// Example:
//   {
//     ScopedSigpipeBlock guard;
//     write(closed_pipe_fd, "x", 1);  // -1 with errno EPIPE; the process lives
//     std::thread t(...);             // t starts with SIGPIPE blocked, for good
//   }                                 // the old mask is back, no SIGPIPE pending
#ifndef LOOM_COLLECTIVES_TRANSPORT_GLOO_INTERNAL_SIGPIPE_H_
#define LOOM_COLLECTIVES_TRANSPORT_GLOO_INTERNAL_SIGPIPE_H_

#include <signal.h>

namespace loom {
namespace gloo_internal {

class ScopedSigpipeBlock {
 public:
  // Blocks SIGPIPE in this thread (a no-op when it is blocked already).
  ScopedSigpipeBlock();
  // Discards a SIGPIPE raised in this thread during the scope, then restores the
  // thread's signal mask.
  ~ScopedSigpipeBlock();
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t old_mask_;
  // This guard blocked the signal (it was not blocked before): it restores the mask.
  bool restores_ = false;
  // A SIGPIPE was pending before the guard began: it is not this scope's to discard.
  bool was_pending_ = false;
};

}  // namespace gloo_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_GLOO_INTERNAL_SIGPIPE_H_
