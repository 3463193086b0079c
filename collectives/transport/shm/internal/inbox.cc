#include "collectives/transport/shm/internal/inbox.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "collectives/transport/peer_failure.h"
#include "collectives/transport/shm/internal/cma.h"
#include "collectives/transport/shm/internal/layout.h"
#include "collectives/transport/shm/internal/liveness.h"
#include "collectives/transport/shm/internal/shared_regions.h"
#include "core/status_macros.h"

namespace loom {
namespace shm_internal {
namespace {

bool Claim(SendSlot& slot, const MessageDescriptor& descriptor, SlotState to) {
  uint64_t expected = PackSlot(descriptor.generation, SlotState::kPosted);
  return slot.word.compare_exchange_strong(expected, PackSlot(descriptor.generation, to),
                                           std::memory_order_acq_rel);
}

}  // namespace

Inbox::Inbox(PeerLink& peer, absl::Span<const PeerLink> links)
    : peer_(peer), links_(links), mappings_(peer.pid) {}

void Inbox::Post(Operation* op) {
  op->stage = Operation::Stage::kQueued;
  fresh_.push_back(op);
}

bool Inbox::MatchFresh() {
  // Unexpected messages precede every descriptor still in the cells, so a new
  // receive takes from them first; with none there, it waits behind older receives
  // of its tag (which then have no unexpected message either).
  for (Operation* op : fresh_) {
    bool matched = false;
    for (auto it = unexpected_.begin(); !matched && it != unexpected_.end();) {
      if (!Pairs(it->descriptor.tag, it->descriptor.stamp, op->tag, op->stamp)) {
        ++it;
        continue;
      }
      // Matched or withdrawn by its sender: either way the message is used up.
      matched = Match(op, it->descriptor, it->payload.data());
      it = unexpected_.erase(it);
    }
    if (!matched) posted_.push_back(op);
  }
  fresh_.clear();
  return true;
}

bool Inbox::DrainCells() {
  bool changed = false;
  const ChannelView& channel = peer_.incoming;
  const uint64_t first = cell_tail_;
  while (true) {
    const CellHeader* cell = channel.cell(cell_tail_);
    if (cell->sequence.load(std::memory_order_acquire) != cell_tail_ + 1) break;
    // A copy: the cell is the sender's again once the tail moves past it.
    MessageDescriptor descriptor{};
    descriptor.tag = cell->tag;
    descriptor.stamp = cell->stamp;
    descriptor.bytes = cell->bytes;
    descriptor.kind = cell->kind;
    const std::byte* payload = channel.cell_payload(cell_tail_);
    if (descriptor.kind != PayloadKind::kEager) {
      CellLargeFields large;
      std::memcpy(&large, payload, sizeof(large));
      descriptor.slot = cell->slot;
      descriptor.address = large.address;
      descriptor.generation = large.generation;
      if (descriptor.kind == PayloadKind::kMapped) {
        descriptor.region_fd = large.region_fd;
        descriptor.region_id = large.region_id;
        descriptor.region_bytes = large.region_bytes;
        descriptor.region_offset = large.region_offset;
      }
    }
    Deliver(descriptor, payload);
    ++cell_tail_;
  }
  if (cell_tail_ != first) {
    channel.control->cell_tail.store(cell_tail_, std::memory_order_release);
    changed = true;
    // A sender can only be waiting for a free cell when the ring was full, so a
    // pass that freed few cells does not ring it: ringing costs a fence, on every
    // small message. (A sender that misjudged the ring from a stale tail looks
    // again within kMaxSleepWithQueuedSends.)
    if (cell_tail_ - first >= kCellsPerChannel / 2) peer_.news = true;
  }
  return changed;
}

void Inbox::Deliver(const MessageDescriptor& descriptor, const std::byte* payload) {
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    // Conflicting stamps pair up too, to fail (transport.h).
    if (!Pairs(descriptor.tag, descriptor.stamp, (*it)->tag, (*it)->stamp)) continue;
    // A withdrawn message is dropped and the receive stays posted for the next one.
    if (Match(*it, descriptor, payload)) posted_.erase(it);
    return;
  }
  Unexpected message{descriptor, {}};
  if (descriptor.kind == PayloadKind::kEager) {
    message.payload.assign(payload, payload + descriptor.bytes);
  }
  unexpected_.push_back(std::move(message));
}

bool Inbox::Match(Operation* op, const MessageDescriptor& descriptor, const std::byte* payload) {
  if (descriptor.stamp.ConflictsWith(op->stamp)) {
    const absl::Status mismatch = StampMismatchError(
        "shm", StampMismatch{op->peer, op->self, descriptor.tag, descriptor.stamp, op->stamp});
    if (descriptor.kind != PayloadKind::kEager) {
      // Tell the sender, as for a size mismatch, with this receive's stamp.
      SendSlot& slot = peer_.incoming.slots[descriptor.slot];
      slot.receiver_stamp = op->stamp;
      slot.receiver_bytes.store(kStampMismatchMarker, std::memory_order_relaxed);
      if (!Claim(slot, descriptor, SlotState::kMismatch)) return false;
      peer_.news = true;
    }
    op->Finish(mismatch);
    return true;
  }
  if (descriptor.kind == PayloadKind::kEager) {
    // The bytes are already this rank's (cell or unexpected copy), and the sender
    // completed when it buffered them: nothing to claim, nothing to tell it, and a
    // size mismatch is this side's alone to report.
    if (descriptor.bytes != op->bytes) {
      op->Finish(MismatchError(op->peer, op->self, op->tag, descriptor.bytes, op->bytes));
    } else {
      if (op->bytes > 0) op->combiner.Apply(op->recv_data, payload, 0, op->bytes);
      op->Finish(absl::OkStatus());
    }
    return true;
  }
  SendSlot& slot = peer_.incoming.slots[descriptor.slot];
  if (descriptor.bytes != op->bytes) {
    slot.receiver_bytes.store(op->bytes, std::memory_order_relaxed);
    if (!Claim(slot, descriptor, SlotState::kMismatch)) return false;
    op->Finish(MismatchError(op->peer, op->self, op->tag, descriptor.bytes, op->bytes));
    peer_.news = true;
    return true;
  }
  switch (descriptor.kind) {
    case PayloadKind::kPull:
    case PayloadKind::kDirect:
    case PayloadKind::kMapped: {
      if (!Claim(slot, descriptor, SlotState::kCopying)) return false;
      absl::Status copied;
      const std::byte* mapped = nullptr;
      if (descriptor.kind == PayloadKind::kMapped) {
        absl::StatusOr<const std::byte*> region = mappings_.Map(
            descriptor.region_fd, descriptor.region_id, descriptor.region_bytes);
        // Refused (old kernel, no permission): the same bytes are there for CMA.
        if (region.ok()) mapped = *region + descriptor.region_offset;
        CountMappedReceive(mapped != nullptr);
      }
      if (descriptor.kind == PayloadKind::kDirect) {
        op->combiner.Apply(op->recv_data, reinterpret_cast<const std::byte*>(descriptor.address),
                           0, op->bytes);
      } else if (mapped != nullptr) {
        op->combiner.Apply(op->recv_data, mapped, 0, op->bytes);
      } else {
        copied = PullFromPeer(*op, descriptor.address);
      }
      uint64_t copying = PackSlot(descriptor.generation, SlotState::kCopying);
      if (!copied.ok()) {
        slot.receiver_bytes.store(static_cast<uint64_t>(GiveUpReason::kCopyFailed),
                                  std::memory_order_relaxed);
        slot.word.compare_exchange_strong(
            copying, PackSlot(descriptor.generation, SlotState::kReceiverCancelled),
            std::memory_order_acq_rel);
        const bool died =
            copied.code() == absl::StatusCode::kUnavailable || !ProcessAlive(peer_.pid);
        if (died) {
          const absl::Status gone = absl::UnavailableError(
              absl::StrCat("shm: ", DescribePeer(peer_.identity), " died: ", copied.message()));
          // Recorded here too, not only by the liveness check, which may come later:
          // the job must know its failure was a peer's (fault_test caught a launcher
          // blaming the survivor that found the death through a failed copy).
          RecordPeerFailure(
              {peer_.identity, PeerFault::kDied, absl::Now(), std::string(gone.message())});
          op->Finish(gone);
        } else {
          op->Finish(absl::Status(
              copied.code(),
              absl::StrCat("shm rank ", op->self, ": ", op->Describe(), ": ", copied.message())));
        }
      } else if (!slot.word.compare_exchange_strong(
                     copying, PackSlot(descriptor.generation, SlotState::kDone),
                     std::memory_order_acq_rel)) {
        // The sender stopped waiting mid-copy; what arrived may be torn.
        op->Finish(absl::DeadlineExceededError(
            absl::StrCat("shm rank ", op->self, ": ", op->Describe(), " failed: rank ", peer_.rank,
                         " abandoned the send while this rank was copying it")));
      } else {
        op->Finish(absl::OkStatus());
      }
      break;
    }
    case PayloadKind::kStaged:
      if (!Claim(slot, descriptor, SlotState::kStreaming)) return false;
      op->stage = Operation::Stage::kStreaming;
      op->slot = descriptor.slot;
      op->generation = descriptor.generation;
      op->streamed = 0;
      streaming_[descriptor.slot] = op;
      break;
    default:
      op->Finish(absl::InternalError(absl::StrCat("shm rank ", op->self, ": descriptor from rank ",
                                                  peer_.rank, " has unknown payload kind ",
                                                  static_cast<uint32_t>(descriptor.kind))));
      break;
  }
  peer_.news = true;
  return true;
}

absl::Status Inbox::PullFromPeer(const Operation& op, uint64_t address) {
  if (op.combiner.copies()) {
    return ReadFromProcess(peer_.pid, address, absl::MakeSpan(op.recv_data, op.bytes));
  }
  // The kernel copies into this process only, so a combining receive pulls the
  // message in pieces, each combined while still in cache: straight into the receive
  // buffer where the combiner allows it (measured 10-20% faster than through a
  // buffer of the inbox's own), otherwise into that buffer.
  const bool in_place = op.combiner.lands_in_place;
  if (!in_place && pull_bounce_.empty()) pull_bounce_.resize(kPullPieceBytes);
  for (size_t offset = 0; offset < op.bytes; offset += kPullPieceBytes) {
    const size_t bytes = std::min(kPullPieceBytes, op.bytes - offset);
    std::byte* piece = op.recv_data + offset;
    std::byte* landing = in_place ? piece : pull_bounce_.data();
    LOOM_RETURN_IF_ERROR(
        ReadFromProcess(peer_.pid, address + offset, absl::MakeSpan(landing, bytes)));
    op.combiner.Apply(piece, landing, offset, bytes);
  }
  return absl::OkStatus();
}

bool Inbox::DrainChunks() {
  const ChannelView& channel = peer_.incoming;
  const uint64_t head = channel.control->chunk_head.load(std::memory_order_acquire);
  while (chunk_tail_ < head) {
    const ChunkHeader* chunk = channel.chunk(chunk_tail_);
    auto it = streaming_.find(chunk->slot);
    // Chunks of a message this rank no longer waits for (cancelled) are dropped.
    if (it != streaming_.end() && it->second->generation == chunk->generation) {
      Operation* op = it->second;
      if (chunk->offset + chunk->bytes <= op->bytes) {
        // Chunk offsets are multiples of the chunk size, itself of kCombineAlignment.
        op->combiner.Apply(op->recv_data + chunk->offset, channel.chunk_payload(chunk_tail_),
                           chunk->offset, chunk->bytes);
      }
      op->streamed += chunk->bytes;
      if (op->streamed >= op->bytes) {
        uint64_t streaming = PackSlot(op->generation, SlotState::kStreaming);
        if (channel.slots[op->slot].word.compare_exchange_strong(
                streaming, PackSlot(op->generation, SlotState::kDone), std::memory_order_acq_rel)) {
          op->Finish(absl::OkStatus());
        } else {
          op->Finish(WithdrawnError(*op, "as its last bytes arrived"));
        }
        streaming_.erase(it);
      }
    }
    ++chunk_tail_;
    channel.control->chunk_tail.store(chunk_tail_, std::memory_order_release);
  }
  peer_.news = true;
  return true;
}

absl::Status Inbox::WithdrawnError(const Operation& op, absl::string_view when) const {
  // A sender marks itself aborted before it withdraws its sends (Endpoint::Abort, then
  // the withdrawal in its next Wait), and this rank saw the withdrawal: the mark is
  // visible by now.
  if (peer_.header->aborted.load(std::memory_order_acquire) != 0) {
    return absl::UnavailableError(absl::StrCat("shm: ", DescribePeer(peer_.identity),
                                               " aborted: ", ReadMessage(peer_.header->abort_message)));
  }
  for (const PeerLink& other : links_) {
    if (other.rank == op.self || other.rank == peer_.rank) continue;
    const bool aborted = other.header->aborted.load(std::memory_order_acquire) != 0;
    if (!aborted && ProbeLiveness(&other.header->liveness) != Liveness::kDied) continue;
    return absl::UnavailableError(absl::StrCat(
        "shm: ", DescribePeer(other.identity),
        aborted ? absl::StrCat(" aborted: ", ReadMessage(other.header->abort_message))
                : std::string(" died"),
        " (rank ", peer_.rank, " withdrew its send to rank ", op.self, " ", when, ")"));
  }
  return absl::DeadlineExceededError(absl::StrCat("shm rank ", op.self, ": ", op.Describe(),
                                                  " failed: rank ", peer_.rank,
                                                  " withdrew the send ", when));
}

bool Inbox::WatchStreams() {
  bool changed = false;
  for (auto it = streaming_.begin(); it != streaming_.end();) {
    Operation* op = it->second;
    const uint64_t word = peer_.incoming.slots[op->slot].word.load(std::memory_order_acquire);
    if (word == PackSlot(op->generation, SlotState::kStreaming)) {
      ++it;
      continue;
    }
    op->Finish(WithdrawnError(
        *op, absl::StrCat("after ", op->streamed, " of ", op->bytes, " bytes arrived")));
    streaming_.erase(it++);
    changed = true;
  }
  return changed;
}

void Inbox::Cancel(Operation* op, const absl::Status& status, GiveUpReason reason) {
  if (op->finished()) return;
  if (op->stage == Operation::Stage::kQueued) {
    auto fresh = std::find(fresh_.begin(), fresh_.end(), op);
    if (fresh != fresh_.end()) fresh_.erase(fresh);
    auto posted = std::find(posted_.begin(), posted_.end(), op);
    if (posted != posted_.end()) posted_.erase(posted);
    op->Finish(status);
    return;
  }
  // Matched and streaming: tell the sender to stop. If it withdrew first the swap
  // fails, and the receive fails all the same.
  SendSlot& slot = peer_.incoming.slots[op->slot];
  slot.receiver_bytes.store(static_cast<uint64_t>(reason), std::memory_order_relaxed);
  uint64_t streaming = PackSlot(op->generation, SlotState::kStreaming);
  slot.word.compare_exchange_strong(streaming,
                                    PackSlot(op->generation, SlotState::kReceiverCancelled),
                                    std::memory_order_acq_rel);
  streaming_.erase(op->slot);
  op->Finish(status);
  peer_.news = true;
}

void Inbox::CancelAll(const absl::Status& status, GiveUpReason reason) {
  std::vector<Operation*> ops = fresh_;
  ops.insert(ops.end(), posted_.begin(), posted_.end());
  for (const auto& [slot, op] : streaming_) ops.push_back(op);
  for (Operation* op : ops) Cancel(op, status, reason);
  unexpected_.clear();
}

}  // namespace shm_internal
}  // namespace loom
