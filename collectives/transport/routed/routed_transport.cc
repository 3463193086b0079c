#include "collectives/transport/routed/routed_transport.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/mutex.h"
#include "core/status_macros.h"

namespace loom {
namespace {

// WakeTarget: what the far transport's finish listener wakes. The listener may run
// on the far transport's threads after this endpoint is gone (a far endpoint shared
// with others outlives it), so it reaches the near endpoint only through this, which
// the destructor empties first.
class WakeTarget {
 public:
  explicit WakeTarget(Transport* near) : near_(near) {}
  void Wake() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    if (near_ != nullptr) near_->Wake();
  }
  void Clear() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    near_ = nullptr;
  }

 private:
  Mutex mu_;
  Transport* near_ ABSL_GUARDED_BY(mu_);
};

class RoutedTransport final : public Transport {
 public:
  RoutedTransport(std::shared_ptr<Transport> far, std::unique_ptr<Transport> near,
                  std::vector<int> near_of_rank)
      : near_(std::move(near)),
        far_(std::move(far)),
        near_of_rank_(std::move(near_of_rank)),
        wake_target_(std::make_shared<WakeTarget>(near_.get())) {}

  ~RoutedTransport() override {
    wake_target_->Clear();
    // Requests never waited on: cancel them (the contract's rule for a closing
    // endpoint), near and far.
    std::vector<Request> pending;
    for (const auto& [id, route] : routes_) pending.push_back(Request{id});
    if (!pending.empty()) Wait(pending, absl::InfinitePast()).IgnoreError();
  }

  // Connects the far transport's listener; false when it has none.
  bool ListenToFar() {
    std::shared_ptr<WakeTarget> target = wake_target_;
    return far_->SetFinishListener([target] { target->Wake(); });
  }

  int rank() const override { return far_->rank(); }
  int size() const override { return far_->size(); }
  std::string name() const override { return absl::StrCat(far_->name(), "+", near_->name()); }

  absl::StatusOr<Request> PostSend(int peer, Tag tag, absl::Span<const std::byte> data,
                                   const Stamp& stamp) override {
    LOOM_ASSIGN_OR_RETURN(const Hop hop, HopTo(peer));
    LOOM_ASSIGN_OR_RETURN(Request inner, hop.via->PostSend(hop.peer, tag, data, stamp));
    return Remember(hop.via, inner);
  }

  absl::StatusOr<Request> PostRecv(int peer, Tag tag, absl::Span<std::byte> data, Combiner combiner,
                                   const Stamp& stamp) override {
    LOOM_ASSIGN_OR_RETURN(const Hop hop, HopTo(peer));
    LOOM_ASSIGN_OR_RETURN(Request inner, hop.via->PostRecv(hop.peer, tag, data, combiner, stamp));
    return Remember(hop.via, inner);
  }

  absl::Status Wait(absl::Span<const Request> requests, absl::Time deadline) override {
    LOOM_ASSIGN_OR_RETURN(std::vector<Route*> routes, Find(requests));
    // Near requests alone: the near endpoint's own Wait (the far one moves by itself).
    if (std::all_of(routes.begin(), routes.end(),
                    [&](const Route* r) { return r->via == near_.get() && !r->finished; })) {
      std::vector<Request> inner;
      inner.reserve(routes.size());
      for (const Route* route : routes) inner.push_back(route->inner);
      const absl::Status status = near_->Wait(inner, deadline);
      Forget(requests);
      return status;
    }
    if (!Drive(routes, deadline, /*trying=*/false)) {
      // At the deadline: each transport cancels what it still holds.
      for (Transport* via : {near_.get(), static_cast<Transport*>(far_.get())}) {
        std::vector<Request> inner = Unfinished(routes, via);
        if (inner.empty()) continue;
        const absl::Status cancelled = via->Wait(inner, absl::InfinitePast());
        MarkFinished(routes, via, cancelled);
      }
    }
    return Collect(requests, routes);
  }

  absl::StatusOr<bool> TryWait(absl::Span<const Request> requests, absl::Time until) override {
    LOOM_ASSIGN_OR_RETURN(std::vector<Route*> routes, Find(requests));
    if (!Drive(routes, until, /*trying=*/true)) return false;
    if (requests.empty()) return false;  // Woken, or `until` came.
    LOOM_RETURN_IF_ERROR(Collect(requests, routes));
    return true;
  }

  // The near endpoint is where a TryWait sleeps; woken_ tells this Wake from the far
  // listener's, which only make Drive look again.
  void Wake() override {
    woken_.store(true);
    near_->Wake();
  }

  void Abort(const absl::Status& reason) override {
    near_->Abort(reason);
    far_->Abort(reason);
  }

  absl::StatusOr<CommBuffer> AllocateBuffer(size_t bytes) override {
    return near_->AllocateBuffer(bytes);
  }

  PathEstimate EstimatePath(int peer) const override {
    if (peer < 0 || peer >= size()) return {};
    const int near = near_of_rank_[peer];
    return near >= 0 ? near_->EstimatePath(near) : far_->EstimatePath(peer);
  }

  NativeCollectives* native() override { return far_->native(); }

 private:
  // Where a message to a peer goes: which transport, and the peer's rank there.
  struct Hop {
    Transport* via;
    int peer;
  };
  // A posted request: its transport's request, and once that transport has
  // finished it (and forgotten it) inside a TryWait of this endpoint, its status.
  struct Route {
    Transport* via = nullptr;
    Request inner;
    bool finished = false;
    absl::Status status;
  };

  absl::StatusOr<Hop> HopTo(int peer) const {
    if (peer < 0 || peer >= size()) {
      return absl::InvalidArgumentError(absl::StrCat(name(), " rank ", rank(), ": peer ", peer,
                                                     " is outside the group of ", size()));
    }
    const int near = near_of_rank_[peer];
    if (near >= 0) return Hop{near_.get(), near};
    return Hop{far_.get(), peer};
  }

  Request Remember(Transport* via, Request inner) {
    const Request request{next_id_++};
    Route& route = routes_[request.id];
    route.via = via;
    route.inner = inner;
    return request;
  }

  absl::StatusOr<std::vector<Route*>> Find(absl::Span<const Request> requests) {
    std::vector<Route*> routes;
    routes.reserve(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      auto it = routes_.find(requests[i].id);
      const bool twice = NamedBefore(requests, i);
      if (it == routes_.end() || twice) {
        return absl::NotFoundError(absl::StrCat(name(), " rank ", rank(), ": request ",
                                                requests[i].id,
                                                " is unknown, already waited or named twice"));
      }
      routes.push_back(&it->second);
    }
    return routes;
  }

  static std::vector<Request> Unfinished(absl::Span<Route* const> routes, const Transport* via) {
    std::vector<Request> inner;
    for (const Route* route : routes) {
      if (route->via == via && !route->finished) inner.push_back(route->inner);
    }
    return inner;
  }

  // MarkFinished records that `via` finished its unfinished routes (cancelled at
  // the deadline), the first of them carrying `status`: what Wait reports is the
  // group's first error anyway.
  static void MarkFinished(absl::Span<Route* const> routes, const Transport* via,
                           const absl::Status& status) {
    bool first = true;
    for (Route* route : routes) {
      if (route->via != via || route->finished) continue;
      route->finished = true;
      if (first) route->status = status;
      first = false;
    }
  }

  static bool AllFinished(absl::Span<Route* const> routes) {
    return std::all_of(routes.begin(), routes.end(), [](const Route* r) { return r->finished; });
  }

  // LookAtFar takes each far request that has finished, with its own status (one at
  // a time: a transport reports only the first error of a group). No waiting: far
  // requests finish on the far transport's threads.
  void LookAtFar(absl::Span<Route* const> routes) {
    for (Route* route : routes) {
      if (route->via != far_.get() || route->finished) continue;
      const absl::StatusOr<bool> done = far_->TryWait({route->inner}, absl::InfinitePast());
      if (!done.ok() || *done) {
        route->finished = true;
        route->status = done.status();
      }
    }
  }

  // Drive moves both transports until every route has finished (true), or `until`
  // passes, or (`trying`: a TryWait's) this endpoint's Wake came (false); with no
  // route, until either of the last two (false).
  bool Drive(absl::Span<Route* const> routes, absl::Time until, bool trying) {
    while (true) {
      LookAtFar(routes);
      Route* near_next = nullptr;
      for (Route* route : routes) {
        if (route->via == near_.get() && !route->finished) {
          near_next = route;
          break;
        }
      }
      if (!routes.empty() && near_next == nullptr && AllFinished(routes)) return true;
      // Sleep in the near endpoint, moving all its messages, until its first pending
      // request here finishes (its own status, as above), a far request finishes (the
      // far listener Wakes it), a Wake, or `until`.
      std::vector<Request> named;
      if (near_next != nullptr) named.push_back(near_next->inner);
      const absl::StatusOr<bool> done = near_->TryWait(named, until);
      if (near_next != nullptr && (!done.ok() || *done)) {
        near_next->finished = true;
        near_next->status = done.status();
        continue;
      }
      const bool woken = trying && woken_.exchange(false);
      if (woken || absl::Now() >= until) {
        LookAtFar(routes);  // What finished meanwhile is reported.
        return !routes.empty() && AllFinished(routes);
      }
    }
  }

  // Collect forgets `requests` (all finished) and returns the first error among them.
  absl::Status Collect(absl::Span<const Request> requests, absl::Span<Route* const> routes) {
    absl::Status first_error;
    for (const Route* route : routes) {
      if (first_error.ok() && !route->status.ok()) first_error = route->status;
    }
    Forget(requests);
    return first_error;
  }

  void Forget(absl::Span<const Request> requests) {
    for (const Request& request : requests) routes_.erase(request.id);
  }

  // Destroyed last to first: the far transport (whose threads call the listener)
  // before the near one.
  const std::unique_ptr<Transport> near_;
  const std::shared_ptr<Transport> far_;
  // By group rank: its rank in the near transport, or -1 for a rank of another host.
  const std::vector<int> near_of_rank_;
  const std::shared_ptr<WakeTarget> wake_target_;
  uint64_t next_id_ = 1;
  absl::flat_hash_map<uint64_t, Route> routes_;
  std::atomic<bool> woken_{false};  // Set by Wake, taken by the TryWait it ends.
};

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> MakeRoutedTransport(std::shared_ptr<Transport> far,
                                                               std::unique_ptr<Transport> near,
                                                               std::vector<int> near_ranks) {
  if (far == nullptr || near == nullptr) {
    return absl::InvalidArgumentError("MakeRoutedTransport: a transport is missing");
  }
  const int size = far->size();
  if (static_cast<int>(near_ranks.size()) != near->size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("MakeRoutedTransport: ", near_ranks.size(), " near ranks (",
                     absl::StrJoin(near_ranks, ","), ") for a ", near->name(), " transport of ",
                     near->size()));
  }
  std::vector<int> near_of_rank(size, -1);
  for (size_t i = 0; i < near_ranks.size(); ++i) {
    const int rank = near_ranks[i];
    if (rank < 0 || rank >= size || near_of_rank[rank] >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MakeRoutedTransport: near rank ", i, " is group rank ", rank,
          ", which is outside the group of ", size, " or named twice (near ranks ",
          absl::StrJoin(near_ranks, ","), ")"));
    }
    near_of_rank[rank] = static_cast<int>(i);
  }
  if (near_ranks[near->rank()] != far->rank()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MakeRoutedTransport: near rank ", near->rank(), " is group rank ", near_ranks[near->rank()],
        ", but this endpoint is group rank ", far->rank(), " of the ", far->name(), " transport"));
  }
  const absl::StatusOr<bool> near_tries = near->TryWait({}, absl::InfinitePast());
  if (!near_tries.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "MakeRoutedTransport: the near transport (", near->name(),
        ") cannot wait without cancelling: ", near_tries.status().message()));
  }
  const std::string far_name = far->name();
  auto routed = std::make_unique<RoutedTransport>(std::move(far), std::move(near),
                                                  std::move(near_of_rank));
  if (!routed->ListenToFar()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "MakeRoutedTransport: the far transport (", far_name,
        ") finishes requests only inside its own waits, so it cannot be waited on beside "
        "another transport"));
  }
  return routed;
}

}  // namespace loom
