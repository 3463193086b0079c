#include "collectives/transport/gloo/internal/sigpipe.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <cerrno>

namespace loom {
namespace gloo_internal {
namespace {

sigset_t SigpipeSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPIPE);
  return set;
}

bool SigpipePending() {
  sigset_t pending;
  sigemptyset(&pending);
  return sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
}

}  // namespace

ScopedSigpipeBlock::ScopedSigpipeBlock() {
  const sigset_t pipe = SigpipeSet();
  sigemptyset(&old_mask_);
  // pthread_sigmask fails only for a bad `how`; the mask then stays as it was.
  if (pthread_sigmask(SIG_BLOCK, &pipe, &old_mask_) != 0) return;
  if (sigismember(&old_mask_, SIGPIPE) == 1) return;  // blocked already: leave it so
  restores_ = true;
  was_pending_ = SigpipePending();
}

ScopedSigpipeBlock::~ScopedSigpipeBlock() {
  if (!restores_) return;
  if (!was_pending_ && SigpipePending()) {
    // A write in this scope raised it: take it off before unblocking, or it would be
    // delivered right then, with its default action.
    const sigset_t pipe = SigpipeSet();
    const timespec zero = {0, 0};
    while (sigtimedwait(&pipe, nullptr, &zero) == -1 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

}  // namespace gloo_internal
}  // namespace loom
