// LoopPoster: runs functions on gloo's event-loop thread, in the order they were
// handed in, so that the endpoint's sends and receive postings never take a gloo
// pair's lock from another thread.
//
// Why: gloo's loop thread handles a readable socket only if it gets the pair's lock
// at once (try_lock); otherwise it returns to epoll_wait, which reports the same
// level-triggered event again at once. Every gloo send and receive posting takes
// that lock and writes to the socket under it. When the posting thread shared a CPU
// with the loop thread and was preempted by it inside that write, the loop thread
// spun through epoll_wait until the scheduler ended its slice: measured on a 2-CPU
// KVM guest, 2 ranks over loopback, all-reduce of 4 KiB by the ring, 0.22 ms in some
// processes and 0.8..1.2 ms in others, with 15 thousand failed try_locks per 1,000
// calls in the fast ones and 0.5..1.0 million in the slow ones. Posted here, every
// pair call is made by the loop thread itself, and nothing else takes a pair's lock
// while bytes move.
//
// The loop thread learns of new functions through an eventfd it watches, registered
// with the device as one more descriptor (gloo's public Device::registerDescriptor).
//
// Example:
//   absl::StatusOr<std::unique_ptr<LoopPoster>> poster = LoopPoster::Create(device);
//   (*poster)->Run([buffer] { buffer->send(peer, slot, 0, bytes); });  // returns at once
//   ...
//   (*poster)->Stop();  // no function runs after this returns; unrun ones are dropped
#ifndef LOOM_COLLECTIVES_TRANSPORT_GLOO_INTERNAL_LOOP_POSTER_H_
#define LOOM_COLLECTIVES_TRANSPORT_GLOO_INTERNAL_LOOP_POSTER_H_

#include <gloo/transport/device.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/loop.h>

#include <atomic>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "core/mutex.h"

namespace loom {
namespace gloo_internal {

class LoopPoster final : public gloo::transport::tcp::Handler {
 public:
  // A poster on `device`'s loop thread; `device` must be gloo's TCP device
  // (InvalidArgument otherwise), and the poster must be stopped before it goes.
  static absl::StatusOr<std::unique_ptr<LoopPoster>> Create(
      std::shared_ptr<gloo::transport::Device> device);
  ~LoopPoster() override;  // Stop()s

  LoopPoster(const LoopPoster&) = delete;
  LoopPoster& operator=(const LoopPoster&) = delete;

  // Queues `fn` to run on the loop thread after every function queued before it;
  // never waits for the loop thread. `fn` must not throw (run gloo calls inside
  // GlooCall) and must not wait for the loop thread. After Stop, `fn` is dropped.
  void Run(absl::AnyInvocable<void()> fn) ABSL_LOCKS_EXCLUDED(mu_);

  // Takes the eventfd off the loop and waits for the loop's next tick, so that no
  // function runs once it returns; functions not run by then are dropped. Call it
  // from a thread other than the loop thread, holding no lock a queued function
  // takes (the tick waits for a running function to end).
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // The loop thread's side (gloo::transport::tcp::Handler): runs what is queued.
  void handleEvents(int events) override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  LoopPoster(std::shared_ptr<gloo::transport::tcp::Device> device, int event_fd);

  const std::shared_ptr<gloo::transport::tcp::Device> device_;
  const int event_fd_;
  Mutex mu_;
  std::vector<absl::AnyInvocable<void()>> queued_ ABSL_GUARDED_BY(mu_);
  // The eventfd was written since the loop thread last took the queue: later
  // functions need no second wake-up.
  bool signalled_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // stopped_ for the loop thread between the functions of a batch it took.
  std::atomic<bool> stopping_{false};
};

}  // namespace gloo_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_GLOO_INTERNAL_LOOP_POSTER_H_
