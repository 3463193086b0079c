#include "collectives/transport/inproc/inproc_transport.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/cpu_features.h"
#include "core/mutex.h"

namespace loom {
namespace inproc_internal {

// One posted send or receive. A message's pending send and receive both wait in the
// destination rank's mailbox until matched; the side that matches copies the bytes.
struct Op {
  bool is_send = false;
  int src = 0;  // Message source rank.
  int dst = 0;  // Message destination rank.
  Tag tag = 0;
  const std::byte* send_data = nullptr;
  std::byte* recv_data = nullptr;
  size_t bytes = 0;
  Combiner combiner;  // Receives: how the bytes are written.
  Stamp stamp;

  std::atomic<bool> done{false};
  // `done` is set under `mu`, so that a waiter blocked on `cv` cannot miss it.
  Mutex mu;
  CondVar cv;
  absl::Status status;  // Written once, before `done` is set.
  // The owning endpoint's finish listener (Transport::SetFinishListener), if any:
  // called under `mu` after `done` is set, so an owner that takes `mu` once after
  // seeing `done` knows the call has returned. Shared, so it outlives the endpoint.
  std::shared_ptr<const std::function<void()>> listener;

  void Finish(absl::Status result) ABSL_LOCKS_EXCLUDED(mu) {
    status = std::move(result);
    {
      MutexLock lock(&mu);
      done.store(true, std::memory_order_release);
      if (listener != nullptr) (*listener)();
    }
    cv.SignalAll();
  }

  std::string Describe() const {
    return absl::StrCat(is_send ? "send to rank " : "receive from rank ", is_send ? dst : src,
                        " (tag ", tag, ", ", bytes, " bytes)");
  }
};

struct Mailbox {
  Mutex mu;
  // Unmatched sends to this rank, and unmatched receives posted by this rank.
  std::deque<std::shared_ptr<Op>> sends ABSL_GUARDED_BY(mu);
  std::deque<std::shared_ptr<Op>> recvs ABSL_GUARDED_BY(mu);
};

class GroupState {
 public:
  GroupState(int size, InprocOptions options)
      : options_(options), mailboxes_(size), dead_(size), taken_(size) {
    for (auto& flag : dead_) flag.store(false);
    for (auto& flag : taken_) flag.store(false);
  }

  int size() const { return static_cast<int>(mailboxes_.size()); }
  const InprocOptions& options() const { return options_; }
  Mailbox& mailbox(int rank) { return mailboxes_[rank]; }
  bool is_dead(int rank) const { return dead_[rank].load(); }
  bool Take(int rank) { return !taken_[rank].exchange(true); }

  absl::Status DeadStatus(int rank) ABSL_LOCKS_EXCLUDED(abort_mu_) {
    MutexLock lock(&abort_mu_);
    return abort_reasons_[rank];
  }

  // MarkDead records that `rank` aborted with `reason`, then fails every unmatched
  // request that involves it: its own with `reason`, its peers' with Unavailable.
  void MarkDead(int rank, const absl::Status& reason) ABSL_LOCKS_EXCLUDED(abort_mu_) {
    {
      MutexLock lock(&abort_mu_);
      if (dead_[rank].load()) return;
      abort_reasons_[rank] = reason;
      dead_[rank].store(true);  // Enqueuers check this under the mailbox lock.
    }
    const absl::Status peer_status = absl::UnavailableError(
        absl::StrCat("rank ", rank, " aborted: ", reason.message()));
    for (Mailbox& box : mailboxes_) {
      std::vector<std::shared_ptr<Op>> failed;
      {
        MutexLock lock(&box.mu);
        for (auto* queue : {&box.sends, &box.recvs}) {
          for (auto it = queue->begin(); it != queue->end();) {
            if ((*it)->src == rank || (*it)->dst == rank) {
              failed.push_back(std::move(*it));
              it = queue->erase(it);
            } else {
              ++it;
            }
          }
        }
      }
      for (auto& op : failed) {
        const int owner = op->is_send ? op->src : op->dst;
        op->Finish(owner == rank ? reason : peer_status);
      }
    }
  }

 private:
  const InprocOptions options_;
  std::vector<Mailbox> mailboxes_;
  std::vector<std::atomic<bool>> dead_;
  std::vector<std::atomic<bool>> taken_;
  Mutex abort_mu_;
  absl::flat_hash_map<int, absl::Status> abort_reasons_ ABSL_GUARDED_BY(abort_mu_);
};

namespace {

// Deliver copies (or combines) a matched message and completes both sides.
void Deliver(Op& send, Op& recv) {
  if (send.stamp.ConflictsWith(recv.stamp)) {
    const StampMismatch mismatch{send.src, send.dst, send.tag, send.stamp, recv.stamp};
    // One Status each, not one shared: see Wait on Status reps and threads.
    recv.Finish(StampMismatchError("inproc", mismatch));
    send.Finish(StampMismatchError("inproc", mismatch));
    return;
  }
  if (send.bytes != recv.bytes) {
    const absl::Status mismatch = absl::FailedPreconditionError(absl::StrCat(
        "rank ", send.src, " sent ", send.bytes, " bytes with tag ", send.tag, " to rank ",
        send.dst, ", which posted a receive of ", recv.bytes, " bytes"));
    recv.Finish(mismatch);
    send.Finish(mismatch);
    return;
  }
  // The whole message is one piece, read straight from the sender's buffer.
  if (send.bytes > 0) recv.combiner.Apply(recv.recv_data, send.send_data, 0, send.bytes);
  recv.Finish(absl::OkStatus());
  send.Finish(absl::OkStatus());
}

class InprocTransport final : public Transport {
 public:
  InprocTransport(std::shared_ptr<GroupState> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  ~InprocTransport() override {
    // Requests never waited on must not be left for peers to write into.
    std::vector<Request> pending;
    for (const auto& [id, op] : requests_) pending.push_back(Request{id});
    if (!pending.empty()) Wait(pending, absl::InfinitePast()).IgnoreError();
  }

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string name() const override { return "inproc"; }

  absl::StatusOr<Request> PostSend(int peer, Tag tag, absl::Span<const std::byte> data,
                                   const Stamp& stamp) override {
    auto op = std::make_shared<Op>();
    op->stamp = stamp;
    op->is_send = true;
    op->src = rank_;
    op->dst = peer;
    op->tag = tag;
    op->send_data = data.data();
    op->bytes = data.size();
    return Post(std::move(op));
  }

  absl::StatusOr<Request> PostRecv(int peer, Tag tag, absl::Span<std::byte> data,
                                   Combiner combiner, const Stamp& stamp) override {
    auto op = std::make_shared<Op>();
    op->stamp = stamp;
    op->src = peer;
    op->dst = rank_;
    op->tag = tag;
    op->recv_data = data.data();
    op->bytes = data.size();
    op->combiner = combiner;
    return Post(std::move(op));
  }

  absl::Status Wait(absl::Span<const Request> requests, absl::Time deadline) override {
    absl::Status first_error;
    for (const Request& request : requests) {
      auto it = requests_.find(request.id);
      if (it == requests_.end()) {
        if (first_error.ok()) {
          first_error = absl::NotFoundError(absl::StrCat("inproc rank ", rank_, ": request ",
                                                         request.id, " is unknown or already waited"));
        }
        continue;
      }
      std::shared_ptr<Op> op = std::move(it->second);
      requests_.erase(it);
      if (!WaitUntil(*op, deadline)) Cancel(*op, deadline);
      if (op->listener != nullptr) MutexLock lock(&op->mu);  // Its listener call has returned.
      // Moved, not copied: the peer thread may drop the last reference to `op` (its
      // match) later, and a Status rep shared between two threads is reference
      // counted inside the uninstrumented libabsl, where TSan cannot follow it.
      if (!op->status.ok() && first_error.ok()) first_error = std::move(op->status);
    }
    return first_error;
  }

  absl::StatusOr<bool> TryWait(absl::Span<const Request> requests, absl::Time until) override {
    std::vector<Op*> ops;
    ops.reserve(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      auto it = requests_.find(requests[i].id);
      const bool twice = NamedBefore(requests, i);
      if (it == requests_.end() || twice) {
        return absl::NotFoundError(absl::StrCat("inproc rank ", rank_, ": request ",
                                                requests[i].id,
                                                " is unknown, already waited or named twice"));
      }
      ops.push_back(it->second.get());
    }
    while (true) {
      Op* pending = ops.empty() ? idle_.get() : nullptr;
      for (Op* op : ops) {
        if (!op->done.load(std::memory_order_acquire)) {
          pending = op;
          break;
        }
      }
      if (pending == nullptr) break;
      if (woken_.exchange(false) || absl::Now() >= until) return false;
      // Sleep on the pending op (the idle one, never finished, when none is named) until
      // it finishes, `until`, or Wake signals it.
      {
        MutexLock lock(&blocked_mu_);
        blocked_on_ = pending;
      }
      {
        MutexLock lock(&pending->mu);
        if (!pending->done.load(std::memory_order_acquire) && !woken_.load()) {
          pending->cv.WaitWithDeadline(&pending->mu, until);
        }
      }
      MutexLock lock(&blocked_mu_);
      blocked_on_ = nullptr;
    }
    absl::Status first_error;
    for (const Request& request : requests) {
      auto it = requests_.find(request.id);
      std::shared_ptr<Op> op = std::move(it->second);
      requests_.erase(it);
      if (op->listener != nullptr) MutexLock lock(&op->mu);  // Its listener call has returned.
      if (!op->status.ok() && first_error.ok()) first_error = std::move(op->status);
    }
    if (!first_error.ok()) return first_error;
    return true;
  }

  void Wake() override {
    woken_.store(true);
    MutexLock lock(&blocked_mu_);
    if (blocked_on_ == nullptr) return;
    MutexLock op_lock(&blocked_on_->mu);
    blocked_on_->cv.SignalAll();
  }

  bool SetFinishListener(std::function<void()> listener) override {
    listener_ = listener ? std::make_shared<const std::function<void()>>(std::move(listener))
                         : nullptr;
    return true;
  }

  void Abort(const absl::Status& reason) override {
    group_->MarkDead(rank_, reason.ok() ? absl::AbortedError("aborted") : reason);
  }

 private:
  absl::StatusOr<Request> Post(std::shared_ptr<Op> op) {
    op->listener = listener_;
    const int peer = op->is_send ? op->dst : op->src;
    if (peer < 0 || peer >= size()) {
      return absl::InvalidArgumentError(absl::StrCat("inproc rank ", rank_, ": peer ", peer,
                                                     " is outside the group of ", size()));
    }
    std::shared_ptr<Op> match;
    {
      Mailbox& box = group_->mailbox(op->dst);
      MutexLock lock(&box.mu);
      if (group_->is_dead(rank_)) return group_->DeadStatus(rank_);
      if (group_->is_dead(peer)) {
        return absl::UnavailableError(absl::StrCat("rank ", peer, " aborted: ",
                                                   group_->DeadStatus(peer).message()));
      }
      auto& others = op->is_send ? box.recvs : box.sends;
      for (auto it = others.begin(); it != others.end(); ++it) {
        // First posted matches first; conflicting stamps pair up to fail (transport.h).
        if ((*it)->src == op->src && Pairs((*it)->tag, (*it)->stamp, op->tag, op->stamp)) {
          match = std::move(*it);
          others.erase(it);
          break;
        }
      }
      if (!match) (op->is_send ? box.sends : box.recvs).push_back(op);
    }
    if (match) {
      if (op->is_send) {
        Deliver(*op, *match);
      } else {
        Deliver(*match, *op);
      }
    }
    const Request request{next_id_++};
    requests_.emplace(request.id, std::move(op));
    return request;
  }

  // WaitUntil spins, then blocks, until `op` is done or the deadline passes.
  bool WaitUntil(Op& op, absl::Time deadline) {
    for (int i = 0; i < group_->options().spin_iterations; ++i) {
      if (op.done.load(std::memory_order_acquire)) return true;
      if (i % 64 == 63) std::this_thread::yield();
    }
    MutexLock lock(&op.mu);
    while (!op.done.load(std::memory_order_acquire)) {
      if (!op.cv.WaitWithDeadline(&op.mu, deadline)) {
        return op.done.load(std::memory_order_acquire);
      }
    }
    return true;
  }

  // Cancel withdraws a request that missed its deadline. If a peer already matched
  // it, the copy is under way and finishes shortly; wait for it instead, so that no
  // one writes into the buffer after Wait returns.
  void Cancel(Op& op, absl::Time deadline) {
    bool withdrawn = false;
    {
      Mailbox& box = group_->mailbox(op.dst);
      MutexLock lock(&box.mu);
      auto& queue = op.is_send ? box.sends : box.recvs;
      for (auto it = queue.begin(); it != queue.end(); ++it) {
        if (it->get() == &op) {
          queue.erase(it);
          withdrawn = true;
          break;
        }
      }
    }
    if (withdrawn) {
      op.Finish(absl::DeadlineExceededError(absl::StrCat(
          "inproc rank ", rank_, ": ", op.Describe(), " did not complete by the deadline ",
          absl::FormatTime(deadline), "; rank ", op.is_send ? op.dst : op.src,
          " never matched it")));
      return;
    }
    WaitUntil(op, absl::InfiniteFuture());
  }

  const std::shared_ptr<GroupState> group_;
  const int rank_;
  uint64_t next_id_ = 1;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Op>> requests_;
  std::shared_ptr<const std::function<void()>> listener_;
  // TryWait: an op never finished, slept on when no request is named; the op a
  // TryWait sleeps on, for Wake to signal; and Wake's flag.
  const std::unique_ptr<Op> idle_ = std::make_unique<Op>();
  Mutex blocked_mu_;
  Op* blocked_on_ ABSL_GUARDED_BY(blocked_mu_) = nullptr;
  std::atomic<bool> woken_{false};
};

}  // namespace
}  // namespace inproc_internal

InprocGroup::InprocGroup(std::shared_ptr<inproc_internal::GroupState> state)
    : state_(std::move(state)) {}

absl::StatusOr<std::shared_ptr<InprocGroup>> InprocGroup::Create(int size, InprocOptions options) {
  if (size < 1 || size > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("inproc group size ", size, " is not in [1, 4096]"));
  }
  if (options.spin_iterations < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spin_iterations=", options.spin_iterations, " is negative"));
  }
  if (options.host_threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("host_threads=", options.host_threads, " is negative"));
  }
  // Measured on the training job (8 thread ranks and their communication threads
  // on 2 CPUs): spinning waiters made the ranks wait 2.4 times as long for their
  // gathered parameters (tools/docs/memory.md).
  if (std::max(size, options.host_threads) > UsableCpus()) options.spin_iterations = 0;
  return std::shared_ptr<InprocGroup>(
      new InprocGroup(std::make_shared<inproc_internal::GroupState>(size, options)));
}

int InprocGroup::size() const { return state_->size(); }

int InprocGroup::spin_iterations() const { return state_->options().spin_iterations; }

absl::StatusOr<std::unique_ptr<Transport>> InprocGroup::Endpoint(int rank) {
  if (rank < 0 || rank >= size()) {
    return absl::OutOfRangeError(
        absl::StrCat("rank ", rank, " is outside the inproc group of ", size()));
  }
  if (!state_->Take(rank)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the endpoint of rank ", rank, " was already taken"));
  }
  return std::unique_ptr<Transport>(new inproc_internal::InprocTransport(state_, rank));
}

}  // namespace loom
