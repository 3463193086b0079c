#include "collectives/transport/gloo/internal/loop_poster.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "collectives/transport/gloo/internal/gloo_call.h"

// gloo's Loop orders a handler's last run before unregisterDescriptor returns with a
// condition variable it signals without a lock, and annotates that for TSan only when
// gloo itself is built with it (Debian's is not). The poster says it itself, so the
// destruction that follows Stop is not reported as racing with the loop thread.
#if defined(__SANITIZE_THREAD__)
#define LOOM_LOOP_POSTER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LOOM_LOOP_POSTER_TSAN 1
#endif
#endif
#ifdef LOOM_LOOP_POSTER_TSAN
extern "C" void AnnotateHappensBefore(const char* file, int line, const volatile void* address);
extern "C" void AnnotateHappensAfter(const char* file, int line, const volatile void* address);
#define LOOM_HAPPENS_BEFORE(address) AnnotateHappensBefore(__FILE__, __LINE__, (address))
#define LOOM_HAPPENS_AFTER(address) AnnotateHappensAfter(__FILE__, __LINE__, (address))
#else
#define LOOM_HAPPENS_BEFORE(address) static_cast<void>(address)
#define LOOM_HAPPENS_AFTER(address) static_cast<void>(address)
#endif

namespace loom {
namespace gloo_internal {

absl::StatusOr<std::unique_ptr<LoopPoster>> LoopPoster::Create(
    std::shared_ptr<gloo::transport::Device> device) {
  auto tcp = std::dynamic_pointer_cast<gloo::transport::tcp::Device>(device);
  if (tcp == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: the loop poster needs a TCP device, got ",
                     device == nullptr ? std::string("none") : device->str()));
  }
  const int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("gloo: eventfd for the loop poster failed: ",
                                            std::strerror(errno)));
  }
  std::unique_ptr<LoopPoster> poster(new LoopPoster(std::move(tcp), fd));
  const absl::Status registered = GlooCall("registering the loop poster's eventfd", [&] {
    poster->device_->registerDescriptor(fd, EPOLLIN, poster.get());
  });
  if (!registered.ok()) {
    MutexLock lock(&poster->mu_);
    poster->stopped_ = true;  // never registered: nothing to take off the loop
    return registered;
  }
  return poster;
}

LoopPoster::LoopPoster(std::shared_ptr<gloo::transport::tcp::Device> device, int event_fd)
    : device_(std::move(device)), event_fd_(event_fd) {}

LoopPoster::~LoopPoster() {
  Stop();
  close(event_fd_);
}

void LoopPoster::Run(absl::AnyInvocable<void()> fn) {
  MutexLock lock(&mu_);
  if (stopped_) return;
  queued_.push_back(std::move(fn));
  if (signalled_) return;
  signalled_ = true;
  const uint64_t one = 1;
  // A full counter (2^64 - 2 unread wake-ups) cannot happen: the loop reads it to
  // zero each time it takes the queue, and signalled_ allows one write per take.
  while (write(event_fd_, &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

void LoopPoster::Stop() {
  {
    MutexLock lock(&mu_);
    if (stopped_) return;
    stopped_ = true;
    stopping_.store(true, std::memory_order_release);
    queued_.clear();
  }
  // Waits for the loop's next tick: a handleEvents under way ends first.
  (void)GlooCall("unregistering the loop poster's eventfd",
                 [&] { device_->unregisterDescriptor(event_fd_, this); });
  LOOM_HAPPENS_AFTER(this);
}

void LoopPoster::handleEvents(int /*events*/) {
  std::vector<absl::AnyInvocable<void()>> batch;
  {
    MutexLock lock(&mu_);
    uint64_t count = 0;
    while (read(event_fd_, &count, sizeof(count)) < 0 && errno == EINTR) {
    }
    signalled_ = false;
    batch.swap(queued_);
  }
  for (absl::AnyInvocable<void()>& fn : batch) {
    // Stop drops what has not begun, this batch's rest included.
    if (stopping_.load(std::memory_order_acquire)) break;
    fn();
  }
  LOOM_HAPPENS_BEFORE(this);
}

}  // namespace gloo_internal
}  // namespace loom
