// GroupTransport: a Transport over a subset of another Transport's ranks, renumbered
// 0..k-1 in the order given. Sub-communicators (Communicator::Split: the dp, tp, pp
// and cp groups of a mesh) and the phases of the hierarchical algorithm (the ranks of
// one node; the same local rank on every node) run the unchanged algorithms over it.
//
// Example (world of 8, this is world rank 5, its tensor-parallel group {4, 5}):
//   LOOM_ASSIGN_OR_RETURN(auto tp, GroupTransport::Create(world, {4, 5}));
//   tp->rank();   // 1
//   tp->size();   // 2
//   tp->Send(0, tag, bytes);   // goes to world rank 4
//
// Tags pass through unchanged: streams of different groups stay apart because the
// Communicator puts its own id into the high bits of every tag. Errors keep the
// parent's rank numbers ("rank 4 aborted"), so they name the real process. The view
// shares the parent endpoint: like the endpoint itself, one thread at a time drives
// the parent and all views of it.
#ifndef LOOM_COLLECTIVES_GROUP_TRANSPORT_H_
#define LOOM_COLLECTIVES_GROUP_TRANSPORT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/transport/transport.h"

namespace loom {

class GroupTransport final : public Transport {
 public:
  // Create views `ranks` (parent ranks, distinct, each in [0, parent.size())) of
  // `parent`, which must contain the parent's own rank. InvalidArgument naming the
  // offending rank otherwise. `parent` is shared: the view keeps it alive.
  static absl::StatusOr<std::unique_ptr<GroupTransport>> Create(std::shared_ptr<Transport> parent,
                                                                absl::Span<const int> ranks);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(ranks_.size()); }
  std::string name() const override;
  absl::StatusOr<Request> PostSend(int peer, Tag tag, absl::Span<const std::byte> data,
                                   const Stamp& stamp) override;
  absl::StatusOr<Request> PostRecv(int peer, Tag tag, absl::Span<std::byte> data,
                                   Combiner combiner, const Stamp& stamp) override;
  absl::Status Wait(absl::Span<const Request> requests, absl::Time deadline) override;
  // Abort aborts the shared parent endpoint, and so every view of it.
  void Abort(const absl::Status& reason) override;
  // ReserveTags reserves on the parent: the view's tags are the parent's.
  absl::StatusOr<TagReservation> ReserveTags(Tag first, Tag last,
                                             absl::string_view user) override {
    return parent_->ReserveTags(first, last, user);
  }
  // AllocateBuffer is the parent's: the view moves data through it.
  absl::StatusOr<CommBuffer> AllocateBuffer(size_t bytes) override {
    return parent_->AllocateBuffer(bytes);
  }

  // EstimatePath is the parent's, for the peer's parent rank.
  PathEstimate EstimatePath(int peer) const override {
    if (peer < 0 || peer >= size()) return {};
    return parent_->EstimatePath(ranks_[peer]);
  }

  // ParentRank maps a rank of this view to the parent's numbering.
  int ParentRank(int rank) const { return ranks_[rank]; }
  const std::vector<int>& ranks() const { return ranks_; }

 private:
  GroupTransport(std::shared_ptr<Transport> parent, std::vector<int> ranks, int rank)
      : parent_(std::move(parent)), ranks_(std::move(ranks)), rank_(rank) {}
  absl::StatusOr<int> MapPeer(int peer) const;

  std::shared_ptr<Transport> parent_;
  std::vector<int> ranks_;
  int rank_;
};

}  // namespace loom

#endif  // LOOM_COLLECTIVES_GROUP_TRANSPORT_H_
