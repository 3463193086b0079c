// ShmEndpoint: one rank's Transport over a connected group of shared-memory segments.
// It owns the requests, drives every peer's Outbox and Inbox from Wait (a Wait
// progresses all pending requests, named or not, so ranks waiting on each other in
// different orders cannot deadlock), turns deadlines into cancellations, and watches
// its peers: a peer that aborted or died fails every request that involves it.
#ifndef LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_ENDPOINT_H_
#define LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_ENDPOINT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collectives/transport/shm/internal/inbox.h"
#include "collectives/transport/shm/internal/operation.h"
#include "collectives/transport/shm/internal/outbox.h"
#include "collectives/transport/shm/internal/rendezvous.h"
#include "collectives/transport/shm/internal/request_table.h"
#include "collectives/transport/transport.h"
#include "core/mutex.h"

namespace loom {
namespace shm_internal {

class ShmEndpoint final : public Transport {
 public:
  // `spin_iterations`: idle polls before a Wait blocks on the doorbell; they yield
  // the CPU when `host_ranks` (processes sharing the host) exceed the usable CPUs.
  ShmEndpoint(ConnectedGroup group, int spin_iterations, int host_ranks);
  // Cancels requests never waited on, then tells the peers this endpoint is gone.
  ~ShmEndpoint() override;

  int rank() const override { return rank_; }
  int size() const override { return world_; }
  std::string name() const override { return "shm"; }

  absl::StatusOr<Request> PostSend(int peer, Tag tag, absl::Span<const std::byte> data,
                                   const Stamp& stamp) override;
  absl::StatusOr<Request> PostRecv(int peer, Tag tag, absl::Span<std::byte> data,
                                   Combiner combiner, const Stamp& stamp) override;
  absl::Status Wait(absl::Span<const Request> requests, absl::Time deadline) override;
  absl::StatusOr<bool> TryWait(absl::Span<const Request> requests, absl::Time until) override;
  // Wake raises wake_requested_ and rings this rank's own doorbell if it sleeps.
  void Wake() override;
  void Abort(const absl::Status& reason) ABSL_LOCKS_EXCLUDED(abort_mu_) override;
  // AllocateBuffer returns a SharedBuffer: peers map it and copy with memcpy.
  absl::StatusOr<CommBuffer> AllocateBuffer(size_t bytes) override;

 private:
  // CheckPostable returns OK when a request to `peer` may be posted, else why not.
  // Inline for the usual answer, which every Send and Recv asks for.
  absl::Status CheckPostable(int peer) {
    if (peer >= 0 && peer < world_ && !abort_requested_.load(std::memory_order_acquire) &&
        links_[peer].failure.ok()) {
      return absl::OkStatus();
    }
    return PostableError(peer);
  }
  absl::Status PostableError(int peer) ABSL_LOCKS_EXCLUDED(abort_mu_);
  // FindNamed looks up the named requests, marking each named_by_wait; nullptr for one
  // that is unknown or named twice.
  void FindNamed(absl::Span<const Request> requests, absl::Span<Operation*> ops);
  // How WaitUntilFinished ends: Wait's way (cancel what is pending at the deadline)
  // or TryWait's (return false at `until` or at a Wake, cancelling nothing).
  enum class WaitEnd { kCancelAtDeadline, kReturnAtUntilOrWake };
  // WaitUntilFinished returns true once every op has finished (with kReturnAtUntilOrWake
  // and no op, never: it waits for a Wake or `until`).
  bool WaitUntilFinished(absl::Span<Operation* const> ops, absl::Time deadline, WaitEnd end);
  // Progress runs one pass over every live peer; true if anything changed.
  bool Progress();
  // Block sleeps on the doorbell until `until` unless the re-check after announcing
  // the sleep finds work: progress, `ops` all finished (with `wakeable`, a TryWait's
  // sleep, only when some are named), an abort or (`wakeable`) a Wake.
  void Block(absl::Span<Operation* const> ops, absl::Time until, bool wakeable);
  // RingPeersWithNews wakes the sleeping peers whose links have news. Inline: every
  // poll asks, and usually none has.
  void RingPeersWithNews() {
    bool any = false;
    for (const PeerLink& link : links_) any |= link.news;
    if (any) RingNews();
  }
  void RingNews();
  void CheckPeers();
  void FailPeer(int peer, const absl::Status& status, PeerFault fault);
  void HandleAbort() ABSL_LOCKS_EXCLUDED(abort_mu_);
  void CancelUnfinished(absl::Span<Operation* const> ops, absl::Time deadline);

  ConnectedGroup group_;
  const int rank_;
  const int world_;
  const int spin_iterations_;
  // With more ranks than CPUs, a spinning rank would hold a CPU that the rank it
  // waits for needs: it yields at each idle poll instead (measured on 2 cores: a
  // 4-rank ring step 650 us pausing, 4.4 us yielding; 2 ranks about equal).
  const bool yield_while_spinning_;
  RankHeader& self_header_;
  std::vector<PeerLink> links_;  // By rank; never resized (the boxes point into it).
  std::vector<std::unique_ptr<Outbox>> outboxes_;
  std::vector<std::unique_ptr<Inbox>> inboxes_;
  RequestTable requests_;

  // Abort may come from any thread; the driving thread acts on it in Wait.
  std::atomic<bool> abort_requested_{false};
  Mutex abort_mu_;
  absl::Status abort_status_ ABSL_GUARDED_BY(abort_mu_);
  bool abort_handled_ = false;  // Driving thread only.
  // Set by Wake (any thread), taken by the TryWait it ends.
  std::atomic<bool> wake_requested_{false};
};

}  // namespace shm_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_ENDPOINT_H_
