#include "collectives/transport/shm/internal/endpoint.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/fixed_array.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/transport/shm/internal/doorbell.h"
#include "collectives/transport/shm/shared_buffer.h"
#include "collectives/transport/shm/internal/liveness.h"
#include "core/clock.h"
#include "core/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace loom {
namespace shm_internal {
namespace {

// How often a waiting rank probes its peers' liveness mutexes, and the longest it
// sleeps on its doorbell between looks: together they bound how late a dead peer is
// noticed, at a few wake-ups per millisecond for a rank that waits long.
constexpr absl::Duration kPeerCheckInterval = absl::Milliseconds(1);
constexpr absl::Duration kMaxSleep = absl::Milliseconds(2);
// The longest sleep while a send waits for a free cell: receivers ring a sender
// only when they free many cells at once (see Inbox::Progress), so a sender may
// also have to look for itself.
constexpr absl::Duration kMaxSleepWithQueuedSends = absl::Microseconds(50);

// Idle polls between looks at the clock while spinning.
constexpr uint32_t kPollsPerClockRead = 64;
// Idle polls before each further poll pauses the core: a pause (up to ~140 cycles
// on recent Intel cores) would add to the latency of a message that arrives in it,
// and a small message usually arrives within the first polls.
constexpr int kPollsWithoutPause = 256;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

bool AllFinished(absl::Span<Operation* const> ops) {
  for (const Operation* op : ops) {
    if (op != nullptr && !op->finished()) return false;
  }
  return true;
}

}  // namespace

ShmEndpoint::ShmEndpoint(ConnectedGroup group, int spin_iterations, int host_ranks)
    : group_(std::move(group)),
      rank_(group_.config.rank),
      world_(group_.config.world_size),
      spin_iterations_(spin_iterations),
      yield_while_spinning_(host_ranks > UsableCpus()),
      self_header_(group_.header(rank_)),
      links_(world_) {
  void* own_segment = group_.segments[rank_].base();
  for (int peer = 0; peer < world_; ++peer) {
    PeerLink& link = links_[peer];
    link.rank = peer;
    link.pid = group_.pids[peer];
    link.header = &group_.header(peer);
    link.identity.world_rank = link.header->world_rank;
    link.identity.pid = link.pid;
    link.identity.host = ReadHostName(link.header->host);
    link.outgoing = group_.layout.channel(group_.segments[peer].base(), rank_);
    link.incoming = group_.layout.channel(own_segment, peer);
    if (peer == rank_) {
      link.large_kind = PayloadKind::kDirect;
    } else {
      link.large_kind = group_.peer_pulls[peer] && !group_.config.stage_ordinary
                            ? PayloadKind::kPull
                            : PayloadKind::kStaged;
      link.may_map = group_.peer_pulls[peer];
    }
    outboxes_.push_back(std::make_unique<Outbox>(link));
    inboxes_.push_back(std::make_unique<Inbox>(link, links_));
  }
}

ShmEndpoint::~ShmEndpoint() {
  // Requests never waited on must not be left for peers to read or write.
  std::vector<Request> pending;
  for (const Request request : requests_.Live()) {
    const Operation* op = requests_.Find(request);
    if (op != nullptr && !op->finished()) pending.push_back(request);
  }
  if (!pending.empty()) Wait(pending, absl::InfinitePast()).IgnoreError();
  // Departed before the liveness mutex is released: a peer that finds the mutex free
  // knows the endpoint closed, rather than crashed.
  self_header_.departed.store(1, std::memory_order_release);
  for (int peer = 0; peer < world_; ++peer) {
    if (peer != rank_) Ring(*links_[peer].header);
  }
  group_.liveness.reset();
}

absl::Status ShmEndpoint::PostableError(int peer) {
  if (peer < 0 || peer >= world_) {
    return absl::InvalidArgumentError(
        absl::StrCat("shm rank ", rank_, ": peer ", peer, " is outside the group of ", world_));
  }
  if (abort_requested_.load(std::memory_order_acquire)) {
    MutexLock lock(&abort_mu_);
    return abort_status_;
  }
  return links_[peer].failure;
}

absl::StatusOr<Request> ShmEndpoint::PostSend(int peer, Tag tag, absl::Span<const std::byte> data,
                                              const Stamp& stamp) {
  const absl::Status postable = CheckPostable(peer);
  if (!postable.ok()) return postable;
  const auto [request, op] = requests_.Add();
  op->is_send = true;
  op->self = rank_;
  op->peer = peer;
  op->tag = tag;
  op->stamp = stamp;
  op->send_data = data.data();
  op->bytes = data.size();
  // A peer asleep on this message is rung from the next Progress (in Wait), not
  // here: by then the stores into its cell have drained, and the fence that must
  // precede the look at its `sleeping` flag costs little.
  outboxes_[peer]->Enqueue(op);
  return request;
}

absl::StatusOr<Request> ShmEndpoint::PostRecv(int peer, Tag tag, absl::Span<std::byte> data,
                                              Combiner combiner, const Stamp& stamp) {
  const absl::Status postable = CheckPostable(peer);
  if (!postable.ok()) return postable;
  const auto [request, op] = requests_.Add();
  op->self = rank_;
  op->peer = peer;
  op->tag = tag;
  op->stamp = stamp;
  op->recv_data = data.data();
  op->bytes = data.size();
  op->combiner = combiner;
  inboxes_[peer]->Post(op);
  return request;
}

void ShmEndpoint::FindNamed(absl::Span<const Request> requests, absl::Span<Operation*> ops) {
  for (size_t i = 0; i < requests.size(); ++i) {
    Operation* op = requests_.Find(requests[i]);
    if (op != nullptr && op->named_by_wait) op = nullptr;  // Named twice.
    if (op != nullptr) op->named_by_wait = true;
    ops[i] = op;
  }
}

absl::Status ShmEndpoint::Wait(absl::Span<const Request> requests, absl::Time deadline) {
  // nullptr marks a request that is unknown or named twice. Inline storage of the
  // final size: a Wait is on the latency path of every small message.
  absl::FixedArray<Operation*, 16> ops(requests.size());
  FindNamed(requests, absl::MakeSpan(ops));  // Erased below, so never unmarked.
  WaitUntilFinished(ops, deadline, WaitEnd::kCancelAtDeadline);
  absl::Status first_error;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (ops[i] == nullptr) {
      if (first_error.ok()) {
        first_error = absl::NotFoundError(absl::StrCat(
            "shm rank ", rank_, ": request ", requests[i].id, " is unknown or already waited"));
      }
      continue;
    }
    if (first_error.ok() && !ops[i]->status.ok()) first_error = ops[i]->status;
    requests_.Remove(requests[i]);
  }
  return first_error;
}

absl::StatusOr<bool> ShmEndpoint::TryWait(absl::Span<const Request> requests, absl::Time until) {
  absl::FixedArray<Operation*, 16> ops(requests.size());
  FindNamed(requests, absl::MakeSpan(ops));
  auto unmark = [&] {
    for (Operation* op : ops) {
      if (op != nullptr) op->named_by_wait = false;
    }
  };
  for (size_t i = 0; i < requests.size(); ++i) {
    if (ops[i] != nullptr) continue;
    unmark();
    return absl::NotFoundError(absl::StrCat("shm rank ", rank_, ": request ", requests[i].id,
                                            " is unknown, already waited or named twice"));
  }
  if (!WaitUntilFinished(ops, until, WaitEnd::kReturnAtUntilOrWake)) {
    unmark();
    return false;
  }
  absl::Status first_error;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (first_error.ok() && !ops[i]->status.ok()) first_error = ops[i]->status;
    requests_.Remove(requests[i]);
  }
  if (!first_error.ok()) return first_error;
  return true;
}

void ShmEndpoint::Wake() {
  wake_requested_.store(true, std::memory_order_release);
  Ring(self_header_);
}

bool ShmEndpoint::WaitUntilFinished(absl::Span<Operation* const> ops, absl::Time deadline,
                                    WaitEnd end) {
  const bool trying = end == WaitEnd::kReturnAtUntilOrWake;
  // A TryWait naming nothing waits for its Wake (or `until`) instead.
  const bool wait_for_wake = trying && ops.empty();
  auto finished = [&] { return !wait_for_wake && AllFinished(ops); };
  int idle_polls = 0;
  uint32_t polls = 0;
  // Set at the first look at the clock: most small waits end before it.
  absl::Time next_peer_check = absl::InfiniteFuture();
  // A TryWait with its `until` already past makes one pass.
  const bool one_pass = trying && loom::Now() >= deadline;
  while (true) {
    if (!abort_handled_ && abort_requested_.load(std::memory_order_acquire)) HandleAbort();
    if (Progress()) {
      idle_polls = 0;
    } else {
      ++idle_polls;
    }
    if (finished()) return true;
    if (trying && (one_pass || wake_requested_.exchange(false, std::memory_order_acq_rel))) {
      return false;
    }
    const bool spun_out = idle_polls > spin_iterations_;
    if (!spun_out && ++polls % kPollsPerClockRead != 0) {
      if (yield_while_spinning_) {
        sched_yield();
      } else if (idle_polls > kPollsWithoutPause) {
        CpuRelax();
      }
      continue;
    }
    const absl::Time now = loom::Now();
    if (next_peer_check == absl::InfiniteFuture()) next_peer_check = now + kPeerCheckInterval;
    if (now >= next_peer_check) {
      CheckPeers();
      next_peer_check = now + kPeerCheckInterval;
      if (finished()) return true;
    }
    if (now >= deadline) {
      if (trying) return false;
      CancelUnfinished(ops, deadline);
      return true;
    }
    // After a sleep without news the next idle poll sleeps again; news restarts the spin.
    if (spun_out) {
      bool sends_queued = false;
      for (const auto& outbox : outboxes_) sends_queued |= outbox->has_queued();
      Block(ops,
            std::min(deadline, now + (sends_queued ? kMaxSleepWithQueuedSends : kMaxSleep)),
            /*wakeable=*/trying);
    }
  }
}

bool ShmEndpoint::Progress() {
  bool changed = false;
  for (int peer = 0; peer < world_; ++peer) {
    if (!links_[peer].failure.ok()) continue;
    changed |= inboxes_[peer]->Progress();
    changed |= outboxes_[peer]->Progress();
  }
  RingPeersWithNews();
  return changed;
}

void ShmEndpoint::Block(absl::Span<Operation* const> ops, absl::Time until, bool wakeable) {
  Sleeper sleeper(self_header_);
  const uint32_t ticket = sleeper.Prepare();
  // The re-check after announcing the sleep: anything published before a producer
  // saw the flag down is visible here (a Wake included: it raises its flag, then
  // rings).
  const bool progressed = Progress();
  const bool ops_done = !(wakeable && ops.empty()) && AllFinished(ops);
  if (!progressed && !ops_done && !abort_requested_.load(std::memory_order_acquire) &&
      !(wakeable && wake_requested_.load(std::memory_order_acquire))) {
    sleeper.Sleep(ticket, until - loom::Now());
  }
  sleeper.Finish();
}

void ShmEndpoint::RingNews() {
  StoreLoadFence();
  for (PeerLink& link : links_) {
    if (!link.news) continue;
    link.news = false;
    if (link.rank != rank_ && link.header->sleeping.load(std::memory_order_relaxed) != 0) {
      RingAlways(*link.header);
    }
  }
}

void ShmEndpoint::CheckPeers() {
  const int64_t now_ns = MonotonicNanos();
  // Heartbeats are judged only while this process's own beat is fresh: if it is
  // stale, this process did not run either (it was stopped, or the host starved it),
  // and its peers' beats are old for the same reason.
  const absl::Duration timeout = group_.config.heartbeat_timeout;
  const bool judge_beats =
      timeout != absl::InfiniteDuration() &&
      absl::Nanoseconds(now_ns - self_header_.heartbeat_ns.load(std::memory_order_acquire)) <
          timeout / 2;
  for (int peer = 0; peer < world_; ++peer) {
    PeerLink& link = links_[peer];
    if (peer == rank_ || !link.failure.ok()) continue;
    if (link.header->aborted.load(std::memory_order_acquire) != 0) {
      FailPeer(peer,
               absl::UnavailableError(
                   absl::StrCat("shm: ", DescribePeer(link.identity),
                                " aborted: ", ReadMessage(link.header->abort_message))),
               PeerFault::kAborted);
      continue;
    }
    switch (ProbeLiveness(&link.header->liveness)) {
      case Liveness::kDied:
        FailPeer(
            peer,
            absl::UnavailableError(absl::StrCat("shm: ", DescribePeer(link.identity), " died")),
            PeerFault::kDied);
        break;
      case Liveness::kHeld: {
        if (!judge_beats) break;
        // A peer that beats more slowly than this rank expects gets three of its beats.
        const absl::Duration allowed =
            std::max(timeout, 3 * absl::Nanoseconds(link.header->heartbeat_interval_ns));
        const absl::Duration silent =
            absl::Nanoseconds(now_ns - link.header->heartbeat_ns.load(std::memory_order_acquire));
        if (silent <= allowed) break;
        FailPeer(peer,
                 absl::UnavailableError(absl::StrCat(
                     "shm: ", DescribePeer(link.identity), " stopped responding: no heartbeat for ",
                     absl::FormatDuration(absl::Trunc(silent, absl::Milliseconds(10))),
                     " (heartbeat timeout ", absl::FormatDuration(timeout), ")",
                     ProcessStateNote(link.pid))),
                 PeerFault::kUnresponsive);
        break;
      }
      case Liveness::kReleased:
        // Closing an endpoint is no failure (a rank may finish before its peers, as
        // an inproc thread may): requests that still need it run into their deadline.
        break;
    }
  }
}

void ShmEndpoint::FailPeer(int peer, const absl::Status& status, PeerFault fault) {
  PeerLink& link = links_[peer];
  const bool dead = fault == PeerFault::kDied;
  link.dead = dead;
  RecordPeerFailure({link.identity, fault, absl::Now(), std::string(status.message())});
  // Give the peer's last words a chance first: verdicts on sends it already matched
  // count, and an aborting peer may have answered before it went.
  if (!dead) {
    inboxes_[peer]->Progress();
    outboxes_[peer]->Progress();
  }
  link.failure = status;
  outboxes_[peer]->CancelAll(status);
  inboxes_[peer]->CancelAll(status, GiveUpReason::kAborted);
  RingPeersWithNews();
}

void ShmEndpoint::HandleAbort() {
  abort_handled_ = true;
  absl::Status status;
  {
    MutexLock lock(&abort_mu_);
    status = abort_status_;
  }
  for (int peer = 0; peer < world_; ++peer) {
    outboxes_[peer]->CancelAll(status);
    inboxes_[peer]->CancelAll(status, GiveUpReason::kAborted);
  }
  RingPeersWithNews();
}

void ShmEndpoint::CancelUnfinished(absl::Span<Operation* const> ops, absl::Time deadline) {
  for (Operation* op : ops) {
    if (op == nullptr || op->finished()) continue;
    std::string detail;
    if (op->stage == Operation::Stage::kStreaming) {
      detail = absl::StrCat("; rank ", op->peer, " matched it, but only ", op->streamed, " of ",
                            op->bytes, " bytes moved");
    } else {
      detail = absl::StrCat("; rank ", op->peer, " never matched it");
    }
    if (op->peer != rank_ &&
        links_[op->peer].header->departed.load(std::memory_order_acquire) != 0) {
      absl::StrAppend(&detail, " (it closed its endpoint)");
    }
    const absl::Status status = absl::DeadlineExceededError(
        absl::StrCat("shm rank ", rank_, ": ", op->Describe(), " did not complete by the deadline ",
                     absl::FormatTime(deadline), detail));
    if (op->is_send) {
      outboxes_[op->peer]->Cancel(op, status);
    } else {
      inboxes_[op->peer]->Cancel(op, status, GiveUpReason::kDeadline);
    }
  }
  RingPeersWithNews();
}

namespace {

// Keeps a SharedBuffer alive inside a CommBuffer.
class SharedBufferOwner final : public CommBuffer::Owner {
 public:
  explicit SharedBufferOwner(SharedBuffer buffer) : buffer_(std::move(buffer)) {}

 private:
  SharedBuffer buffer_;
};

}  // namespace

absl::StatusOr<CommBuffer> ShmEndpoint::AllocateBuffer(size_t bytes) {
  if (bytes == 0) return CommBuffer();
  absl::StatusOr<SharedBuffer> shared = SharedBuffer::Allocate(bytes);
  if (!shared.ok()) return shared.status();
  const absl::Span<std::byte> span = shared->bytes();
  return CommBuffer(span, /*zero_copy=*/true, std::make_unique<SharedBufferOwner>(std::move(*shared)));
}

void ShmEndpoint::Abort(const absl::Status& reason) {
  const absl::Status status = reason.ok() ? absl::AbortedError("aborted") : reason;
  {
    MutexLock lock(&abort_mu_);
    if (abort_requested_.load(std::memory_order_relaxed)) return;
    abort_status_ = status;
    self_header_.abort_code = static_cast<int32_t>(status.code());
    WriteMessage(self_header_.abort_message, status.message());
    self_header_.aborted.store(1, std::memory_order_release);
    abort_requested_.store(true, std::memory_order_release);
  }
  // links_ and the headers never change after construction: safe from any thread.
  for (const PeerLink& link : links_) RingAlways(*link.header);
}

}  // namespace shm_internal
}  // namespace loom
