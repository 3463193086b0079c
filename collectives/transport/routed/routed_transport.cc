#include "collectives/transport/routed/routed_transport.h"

#include <algorithm>
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
    if (!Drive(routes, deadline)) {
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
    if (!Drive(routes, until)) return false;
    if (requests.empty()) return false;  // Woken, or `until` came.
    LOOM_RETURN_IF_ERROR(Collect(requests, routes));
    return true;
  }

  void Wake() override { near_->Wake(); }

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
      const bool twice = std::any_of(requests.begin(), requests.begin() + i,
                                     [&](const Request& r) { return r.id == requests[i].id; });
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

  // MarkFinished records that `via` finished its unfinished routes, the first of
  // them carrying `status` (a transport reports only the first error of a group).
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

  // Drive moves both transports until every route has finished (true) or `until`
  // passes or a Wake came (false); with no route, until either of those (false).
  bool Drive(absl::Span<Route* const> routes, absl::Time until) {
    Transport* const far = far_.get();
    Transport* const near = near_.get();
    while (true) {
      std::vector<Request> far_pending = Unfinished(routes, far);
      if (!far_pending.empty()) {
        // Far requests finish on the far transport's threads: a look, no wait.
        const absl::StatusOr<bool> done = far->TryWait(far_pending, absl::InfinitePast());
        if (!done.ok() || *done) MarkFinished(routes, far, done.status());
      }
      std::vector<Request> near_pending = Unfinished(routes, near);
      if (!routes.empty() && near_pending.empty() && Unfinished(routes, far).empty()) return true;
      // Sleep in the near endpoint, moving its messages, until its requests finish, a
      // far request finishes (its listener Wakes it) or `until`.
      const absl::StatusOr<bool> done = near->TryWait(near_pending, until);
      if (!near_pending.empty() && (!done.ok() || *done)) {
        MarkFinished(routes, near, done.status());
        continue;
      }
      if (routes.empty() || absl::Now() >= until) {
        // One last look at the far requests, so a TryWait past its `until` still
        // reports what finished.
        far_pending = Unfinished(routes, far);
        if (!far_pending.empty()) {
          const absl::StatusOr<bool> last = far->TryWait(far_pending, absl::InfinitePast());
          if (!last.ok() || *last) MarkFinished(routes, far, last.status());
        }
        return !routes.empty() && Unfinished(routes, near).empty() &&
               Unfinished(routes, far).empty();
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
