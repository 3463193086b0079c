// GlooCall: the boundary between gloo, which throws, and Loom, which returns Status.
// Every gloo call of the backend runs inside one, and what it throws comes back as a
// Status naming the call and carrying gloo's own text. Any gloo call may write to a
// socket a peer has closed, so each runs with SIGPIPE blocked in the calling thread
// (sigpipe.h): the write fails with EPIPE, gloo throws, and the process lives.
#ifndef LOOM_COLLECTIVES_TRANSPORT_GLOO_INTERNAL_GLOO_CALL_H_
#define LOOM_COLLECTIVES_TRANSPORT_GLOO_INTERNAL_GLOO_CALL_H_

#include <exception>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "collectives/transport/gloo/internal/sigpipe.h"

namespace loom {
namespace gloo_internal {

// GlooExceptionStatus converts the exception `error` thrown by `call`:
// DeadlineExceeded when gloo's text says it timed out, Unavailable for any other
// gloo::IoException (a broken or closed TCP pair), Internal otherwise
// (gloo::EnforceNotMet, std::exception, anything else).
absl::Status GlooExceptionStatus(std::exception_ptr error, absl::string_view call);

// GlooCall runs `fn` with SIGPIPE blocked in this thread and returns OK, or the
// status of what it threw. Threads `fn` starts (gloo's event loop, when it creates a
// device) keep SIGPIPE blocked for life.
template <typename Fn>
absl::Status GlooCall(absl::string_view call, Fn&& fn) {
  const ScopedSigpipeBlock no_sigpipe;
  try {
    std::forward<Fn>(fn)();
  } catch (...) {
    return GlooExceptionStatus(std::current_exception(), call);
  }
  return absl::OkStatus();
}

}  // namespace gloo_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_GLOO_INTERNAL_GLOO_CALL_H_
