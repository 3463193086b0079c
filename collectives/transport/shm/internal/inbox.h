// Inbox: the receiving side of one ordered pair (peer -> this rank). It drains the
// pair's descriptor cells in order, matches each message to the first posted receive
// with its tag (per-tag first-in first-out), and keeps the rest as unexpected, with
// eager payloads copied out so the sender's cells never fill up behind a message no
// one has asked for yet.
//
// An eager message is the receiver's as soon as it is in the cell. Claiming a large
// message is a compare-and-swap on the sender's slot, racing the sender's
// cancellation: the receiver only writes a receive buffer after winning it, and the
// sender only stops waiting for a pulled (CMA) send once the copy is over. Bytes
// always move receiver-side (copy out of a cell or chunk, process_vm_readv out of the
// sender, memcpy out of its mapped SharedBuffer), so no peer ever writes into this
// rank's buffers.
#ifndef LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_INBOX_H_
#define LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_INBOX_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "collectives/transport/shm/internal/layout.h"
#include "collectives/transport/shm/internal/operation.h"
#include "collectives/transport/shm/internal/peer_mappings.h"

namespace loom {
namespace shm_internal {

class Inbox {
 public:
  // `peer`: the sender this inbox receives from; `links`: every peer's link, by rank
  // (the endpoint's, never resized), read to name a rank whose death made `peer` give
  // up a send.
  Inbox(PeerLink& peer, absl::Span<const PeerLink> links);

  Inbox(const Inbox&) = delete;
  Inbox& operator=(const Inbox&) = delete;

  // Post takes a new receive. It is matched (to the earliest unexpected message with
  // its tag, or to a later arrival) in Progress, not here: a matched CMA message is
  // copied at once, and copying inside Recv would hold back the caller's next Send,
  // which the peer may be waiting to pull at the same time.
  void Post(Operation* op);

  // Progress matches new receives, drains new descriptors and staged chunks, and
  // notices senders that cancelled a staged message mid-stream. Returns whether anything changed.
  // Inline, and each step only where its cheap test says there is work: an idle
  // poll, which a waiting rank repeats until a message lands, costs a few loads.
  bool Progress() {
    bool changed = !fresh_.empty() && MatchFresh();
    if (CellArrived()) changed |= DrainCells();
    if (ChunksArrived()) changed |= DrainChunks();
    if (!streaming_.empty()) changed |= WatchStreams();
    return changed;
  }

  // Cancel finishes an unfinished receive with `status`; a staged message it had
  // matched is given up, so its sender stops streaming.
  void Cancel(Operation* op, const absl::Status& status, GiveUpReason reason);

  // CancelAll cancels every unfinished receive and drops unexpected messages.
  void CancelAll(const absl::Status& status, GiveUpReason reason);

 private:
  struct Unexpected {
    MessageDescriptor descriptor;
    std::vector<std::byte> payload;  // Eager messages only.
  };

  // Match delivers (or starts delivering) `descriptor` into `op`; false if the
  // sender withdrew the message first, which then never happened.
  bool Match(Operation* op, const MessageDescriptor& descriptor, const std::byte* payload);
  // WithdrawnError: what a streamed receive reports when its sender took the message
  // back (`when`: how far it got). If the sender aborted, its reason (Unavailable,
  // as CheckPeers reports an aborted peer). Otherwise, if some other rank died or
  // aborted, that rank (Unavailable): an algorithm cancels its sends as soon as a call
  // fails, before its Communicator aborts, so a sender that saw a third rank die
  // withdraws unmarked, and the death it saw is already visible here (a dead owner's
  // liveness word is set before any peer can see it gone). Otherwise the sender gave
  // up at a deadline.
  absl::Status WithdrawnError(const Operation& op, absl::string_view when) const;
  void Deliver(const MessageDescriptor& descriptor, const std::byte* payload);
  bool MatchFresh();
  bool CellArrived() const {
    return peer_.incoming.cell(cell_tail_)->sequence.load(std::memory_order_acquire) ==
           cell_tail_ + 1;
  }
  bool DrainCells();
  bool ChunksArrived() const {
    return peer_.incoming.control->chunk_head.load(std::memory_order_acquire) != chunk_tail_;
  }
  bool DrainChunks();
  // PullFromPeer copies a CMA message from the sender's memory at `address` into
  // op's buffer, through op's combiner.
  absl::Status PullFromPeer(const Operation& op, uint64_t address);
  bool WatchStreams();

  PeerLink& peer_;
  absl::Span<const PeerLink> links_;
  uint64_t cell_tail_ = 0;
  uint64_t chunk_tail_ = 0;
  std::vector<Operation*> fresh_;  // Posted since the last Progress, in order.
  // Unmatched receives and messages, each in arrival order; matching takes the first
  // of the tag. Linear scans, because a pair rarely has more than a few outstanding,
  // and per-tag queues would allocate and free one for every step of an algorithm.
  // (A vector for the receives: erasing its usual single entry is a store, where a
  // deque's erase is an out-of-line call on every message.)
  std::vector<Operation*> posted_;
  std::deque<Unexpected> unexpected_;
  absl::flat_hash_map<uint32_t, Operation*> streaming_;  // By slot.
  PeerMappings mappings_;  // The peer's SharedBuffers this rank has mapped.
  // A combining receive pulls a CMA message in pieces of this size, each combined
  // while still in cache; a multiple of kCombineAlignment, and as large as the
  // algorithms' default chunk, so a chunk is one system call.
  static constexpr size_t kPullPieceBytes = size_t{256} << 10;
  std::vector<std::byte> pull_bounce_;  // Pieces of combiners that do not land in place.
};

}  // namespace shm_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_INBOX_H_
