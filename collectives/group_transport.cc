#include "collectives/group_transport.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace loom {

absl::StatusOr<std::unique_ptr<GroupTransport>> GroupTransport::Create(
    std::shared_ptr<Transport> parent, absl::Span<const int> ranks) {
  if (parent == nullptr) return absl::InvalidArgumentError("group of a null transport");
  std::vector<bool> seen(parent->size(), false);
  int self = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    if (r < 0 || r >= parent->size()) {
      return absl::InvalidArgumentError(absl::StrCat("group [", absl::StrJoin(ranks, ","),
                                                     "] names rank ", r, ", outside a ",
                                                     parent->name(), " group of ",
                                                     parent->size()));
    }
    if (seen[r]) {
      return absl::InvalidArgumentError(
          absl::StrCat("group [", absl::StrJoin(ranks, ","), "] names rank ", r, " twice"));
    }
    seen[r] = true;
    if (r == parent->rank()) self = static_cast<int>(i);
  }
  if (self < 0) {
    return absl::InvalidArgumentError(absl::StrCat("group [", absl::StrJoin(ranks, ","),
                                                   "] does not contain this rank, ",
                                                   parent->rank()));
  }
  return std::unique_ptr<GroupTransport>(
      new GroupTransport(std::move(parent), std::vector<int>(ranks.begin(), ranks.end()), self));
}

std::string GroupTransport::name() const { return parent_->name(); }

absl::StatusOr<int> GroupTransport::MapPeer(int peer) const {
  if (peer < 0 || peer >= size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("peer ", peer, " is outside a group of ", size()));
  }
  return ranks_[peer];
}

absl::StatusOr<Request> GroupTransport::PostSend(int peer, Tag tag,
                                                 absl::Span<const std::byte> data,
                                                 const Stamp& stamp) {
  LOOM_ASSIGN_OR_RETURN(const int parent_peer, MapPeer(peer));
  return parent_->PostSend(parent_peer, tag, data, stamp);
}

absl::StatusOr<Request> GroupTransport::PostRecv(int peer, Tag tag, absl::Span<std::byte> data,
                                                 Combiner combiner, const Stamp& stamp) {
  LOOM_ASSIGN_OR_RETURN(const int parent_peer, MapPeer(peer));
  return parent_->PostRecv(parent_peer, tag, data, combiner, stamp);
}

absl::Status GroupTransport::Wait(absl::Span<const Request> requests, absl::Time deadline) {
  return parent_->Wait(requests, deadline);
}

void GroupTransport::Abort(const absl::Status& reason) { parent_->Abort(reason); }

}  // namespace loom
