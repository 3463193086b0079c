#include "collectives/transport/shm/internal/outbox.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/transport/shm/internal/cache_hints.h"
#include "collectives/transport/shm/internal/layout.h"
#include "collectives/transport/shm/internal/liveness.h"
#include "collectives/transport/shm/internal/shared_regions.h"

namespace loom {
namespace shm_internal {
namespace {

// How long a cancelling sender waits for a receiver that is copying its buffer: a
// live receiver finishes one process_vm_readv well within this; one that does not
// is stopped or wedged, and is told the send was abandoned.
absl::Duration CopyGrace(size_t bytes) {
  constexpr double kSlowestBytesPerSecond = 100e6;
  return absl::Seconds(1) + absl::Seconds(static_cast<double>(bytes) / kSlowestBytesPerSecond);
}

template <typename Container>
void Erase(Container& container, Operation* op) {
  auto it = std::find(container.begin(), container.end(), op);
  if (it != container.end()) container.erase(it);
}

}  // namespace

Outbox::Outbox(PeerLink& peer) : peer_(peer), generations_(kSlotsPerChannel, 1) {
  free_slots_.reserve(kSlotsPerChannel);
  for (uint32_t slot = kSlotsPerChannel; slot > 0; --slot) free_slots_.push_back(slot - 1);
}

void Outbox::Enqueue(Operation* op) {
  op->stage = Operation::Stage::kQueued;
  // Publishing only behind earlier sends keeps the pair's posting order.
  if (!queued_.empty() || !TryPublish(op)) queued_.push_back(op);
}

bool Outbox::TryPublish(Operation* op) {
  const ChannelView& channel = peer_.outgoing;
  const bool eager = op->bytes <= channel.eager_bytes;
  if (!eager && free_slots_.empty()) return false;
  if (cell_head_ - cell_tail_seen_ >= kCellsPerChannel) {
    cell_tail_seen_ = channel.control->cell_tail.load(std::memory_order_acquire);
    if (cell_head_ - cell_tail_seen_ >= kCellsPerChannel) return false;
  }
  op->kind = eager ? PayloadKind::kEager : peer_.large_kind;
  CellHeader* cell = channel.cell(cell_head_);
  cell->tag = op->tag;
  cell->stamp = op->stamp;
  cell->bytes = op->bytes;
  cell->kind = op->kind;
  if (eager) {
    if (op->bytes > 0) std::memcpy(channel.cell_payload(cell_head_), op->send_data, op->bytes);
  } else {
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    op->slot = slot;
    op->generation = generations_[slot];
    cell->slot = slot;
    auto* large = reinterpret_cast<CellLargeFields*>(channel.cell_payload(cell_head_));
    large->address = reinterpret_cast<uint64_t>(op->send_data);
    large->generation = op->generation;
    // Where CMA works, so does taking a SharedBuffer's memfd (the same permission).
    if (op->kind == PayloadKind::kPull || (op->kind == PayloadKind::kStaged && peer_.may_map)) {
      if (const std::optional<SharedRegionRef> region = FindSharedRegion(op->send_data, op->bytes)) {
        op->kind = PayloadKind::kMapped;
        large->region_fd = region->fd;
        large->region_id = region->id;
        large->region_bytes = region->bytes;
        large->region_offset = region->offset;
      }
    }
    cell->kind = op->kind;
    channel.slots[slot].word.store(PackSlot(op->generation, SlotState::kPosted),
                                   std::memory_order_relaxed);
  }
  ++cell_head_;
  cell->sequence.store(cell_head_, std::memory_order_release);  // Publishes all above.
  // The receiver reads the cell next: from the shared cache, not from this core.
  DemoteLines(cell, sizeof(CellHeader) + (eager ? op->bytes : sizeof(CellLargeFields)));
  peer_.news = true;
  if (eager) {
    // Buffered: the bytes are in the cell, the caller's buffer is free again.
    op->Finish(absl::OkStatus());
  } else {
    op->stage = Operation::Stage::kPosted;
    published_.push_back(op);
  }
  return true;
}

bool Outbox::ProgressPending() {
  bool changed = false;
  while (!queued_.empty() && TryPublish(queued_.front())) {
    queued_.pop_front();
    changed = true;
  }
  for (size_t i = 0; i < published_.size();) {
    Operation* op = published_[i];
    changed |= Collect(op);
    if (op->finished()) {
      Release(op);
      published_[i] = published_.back();
      published_.pop_back();
    } else {
      ++i;
    }
  }
  changed |= StreamChunks();
  return changed;
}

bool Outbox::Collect(Operation* op) {
  const SendSlot& slot = peer_.outgoing.slots[op->slot];
  const uint64_t word = slot.word.load(std::memory_order_acquire);
  if (GenerationOf(word) != op->generation) {
    op->Finish(absl::InternalError(
        absl::StrCat("shm rank ", op->self, ": slot ", op->slot, " of ", op->Describe(),
                     " holds generation ", GenerationOf(word), ", expected ", op->generation)));
    Erase(streams_, op);
    return true;
  }
  switch (StateOf(word)) {
    case SlotState::kPosted:
    case SlotState::kCopying:
      return false;
    case SlotState::kStreaming:
      if (op->stage != Operation::Stage::kPosted) return false;
      op->stage = Operation::Stage::kStreaming;
      streams_.push_back(op);
      return true;
    case SlotState::kDone:
      op->Finish(absl::OkStatus());
      return true;
    case SlotState::kMismatch: {
      const uint64_t receiver_bytes = slot.receiver_bytes.load(std::memory_order_relaxed);
      op->Finish(receiver_bytes == kStampMismatchMarker
                     ? StampMismatchError("shm", StampMismatch{op->self, op->peer, op->tag,
                                                               op->stamp, slot.receiver_stamp})
                     : MismatchError(op->self, op->peer, op->tag, op->bytes, receiver_bytes));
      return true;
    }
    case SlotState::kReceiverCancelled: {
      const auto reason =
          static_cast<GiveUpReason>(slot.receiver_bytes.load(std::memory_order_relaxed));
      const std::string what =
          absl::StrCat("shm rank ", op->self, ": ", op->Describe(), " failed: rank ", op->peer,
                       " gave up on the matched receive");
      if (reason == GiveUpReason::kAborted) {
        op->Finish(absl::UnavailableError(absl::StrCat(what, " (it aborted)")));
      } else if (reason == GiveUpReason::kCopyFailed) {
        op->Finish(absl::InternalError(absl::StrCat(what, " (it could not copy the data)")));
      } else {
        op->Finish(absl::DeadlineExceededError(absl::StrCat(what, " at its deadline")));
      }
      Erase(streams_, op);
      return true;
    }
    case SlotState::kFree:
    case SlotState::kSenderCancelled:
    case SlotState::kAbandoned:
      break;
  }
  op->Finish(absl::InternalError(absl::StrCat("shm rank ", op->self, ": slot of ", op->Describe(),
                                              " is in sender-only state ",
                                              static_cast<uint32_t>(StateOf(word)))));
  Erase(streams_, op);
  return true;
}

bool Outbox::StreamChunks() {
  bool changed = false;
  const ChannelView& channel = peer_.outgoing;
  while (!streams_.empty()) {
    if (chunk_head_ - chunk_tail_seen_ >= kChunksPerChannel) {
      chunk_tail_seen_ = channel.control->chunk_tail.load(std::memory_order_acquire);
      if (chunk_head_ - chunk_tail_seen_ >= kChunksPerChannel) break;
    }
    Operation* op = streams_.front();
    const size_t bytes = std::min(channel.chunk_bytes, op->bytes - op->streamed);
    ChunkHeader* chunk = channel.chunk(chunk_head_);
    chunk->slot = op->slot;
    chunk->generation = op->generation;
    chunk->offset = op->streamed;
    chunk->bytes = bytes;
    std::memcpy(channel.chunk_payload(chunk_head_), op->send_data + op->streamed, bytes);
    ++chunk_head_;
    channel.control->chunk_head.store(chunk_head_, std::memory_order_release);
    op->streamed += bytes;
    if (op->streamed == op->bytes) streams_.pop_front();
    changed = true;
    peer_.news = true;
  }
  return changed;
}

void Outbox::Release(Operation* op) {
  // A new generation makes any late compare-and-swap on the old message fail.
  if (++generations_[op->slot] == 0) generations_[op->slot] = 1;
  free_slots_.push_back(op->slot);
}

void Outbox::Forget(Operation* op) {
  Erase(streams_, op);
  Erase(published_, op);
  Release(op);
}

bool Outbox::WaitWhileCopying(Operation* op) {
  SendSlot& slot = peer_.outgoing.slots[op->slot];
  const absl::Time give_up = absl::Now() + CopyGrace(op->bytes);
  while (true) {
    uint64_t word = slot.word.load(std::memory_order_acquire);
    if (StateOf(word) != SlotState::kCopying || GenerationOf(word) != op->generation) return true;
    // A dead receiver reads nothing more.
    if (peer_.dead || ProbeLiveness(&peer_.header->liveness) == Liveness::kDied) return false;
    if (absl::Now() >= give_up &&
        slot.word.compare_exchange_strong(word, PackSlot(op->generation, SlotState::kAbandoned),
                                          std::memory_order_acq_rel)) {
      peer_.news = true;
      return false;
    }
    absl::SleepFor(absl::Microseconds(50));
  }
}

void Outbox::Cancel(Operation* op, const absl::Status& status) {
  if (op->finished()) return;
  if (op->stage == Operation::Stage::kQueued) {
    Erase(queued_, op);
    op->Finish(status);
    return;
  }
  SendSlot& slot = peer_.outgoing.slots[op->slot];
  while (!op->finished()) {
    uint64_t word = slot.word.load(std::memory_order_acquire);
    const SlotState state = StateOf(word);
    if (GenerationOf(word) == op->generation &&
        (state == SlotState::kPosted || state == SlotState::kStreaming)) {
      // Wins against the receiver's claim (kPosted -> kCopying / kStreaming / kDone)
      // or completion (kStreaming -> kDone); whoever swaps first decides.
      if (slot.word.compare_exchange_strong(word,
                                            PackSlot(op->generation, SlotState::kSenderCancelled),
                                            std::memory_order_acq_rel)) {
        op->Finish(status);
        peer_.news = true;
      }
    } else if (state == SlotState::kCopying && GenerationOf(word) == op->generation) {
      if (!WaitWhileCopying(op)) op->Finish(status);
    } else {
      Collect(op);  // The receiver decided first; report its outcome.
    }
  }
  Forget(op);
}

void Outbox::CancelAll(const absl::Status& status) {
  const std::vector<Operation*> queued(queued_.begin(), queued_.end());
  for (Operation* op : queued) Cancel(op, status);
  const std::vector<Operation*> published = published_;
  for (Operation* op : published) Cancel(op, status);
}

}  // namespace shm_internal
}  // namespace loom
