// Outbox: the sending side of one ordered pair (this rank -> peer). It publishes a
// descriptor per send into the pair's cells, in posting order (which is what makes
// same-tag messages arrive first-in first-out).
//
// Small sends (up to eager_bytes) carry their bytes in the cell and are complete as
// soon as the cell is written: buffered, like MPI's eager protocol, so that a small
// message costs one cache-line transfer and no reply. Large sends are tracked
// through a slot until the receiver has matched them, so both sides see a size
// mismatch: they either wait while the receiver pulls them with CMA (or memcpy, for
// a self-send), or, staged, are streamed by this side in chunks through the pair's
// ring once the receiver has matched them: streaming only matched messages means a
// chunk never waits for a receive that is not posted, so the ring cannot deadlock.
#ifndef LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_OUTBOX_H_
#define LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_OUTBOX_H_

#include <cstdint>
#include <deque>
#include <vector>

#include "absl/status/status.h"
#include "collectives/transport/shm/internal/operation.h"

namespace loom {
namespace shm_internal {

class Outbox {
 public:
  explicit Outbox(PeerLink& peer);

  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  // Enqueue takes a new send and publishes it if a cell (and, for a large send, a
  // slot) is free; an eager send that is published is finished.
  void Enqueue(Operation* op);

  // Progress publishes queued sends, collects the receiver's verdicts and streams
  // staged chunks. Returns whether anything changed. Inline for the usual case of a
  // poll: eager sends finish when posted, so there is nothing to do.
  bool Progress() {
    if (queued_.empty() && published_.empty() && streams_.empty()) return false;
    return ProgressPending();
  }

  // Cancel finishes an unfinished send with `status`, unless the receiver completed
  // it first (then with that outcome). A receiver that is copying the send buffer
  // is waited for, so that it is not read after Cancel returns; one stuck there past
  // a grace period is told the send was abandoned.
  void Cancel(Operation* op, const absl::Status& status);

  // has_queued: some send waits for a free cell or slot.
  bool has_queued() const { return !queued_.empty(); }

  // CancelAll cancels every unfinished send of this outbox.
  void CancelAll(const absl::Status& status);

 private:
  bool ProgressPending();
  bool TryPublish(Operation* op);
  // Collect applies the slot's state to a published send; true if it changed.
  bool Collect(Operation* op);
  bool StreamChunks();
  void Release(Operation* op);
  void Forget(Operation* op);
  bool WaitWhileCopying(Operation* op);

  PeerLink& peer_;
  std::deque<Operation*> queued_;      // Not yet published, in posting order.
  std::vector<Operation*> published_;  // Large sends holding a slot.
  std::deque<Operation*> streams_;     // Matched staged sends with chunks left to push.
  std::vector<uint32_t> free_slots_;
  std::vector<uint32_t> generations_;  // Per slot; bumped on every release.
  uint64_t cell_head_ = 0;
  uint64_t cell_tail_seen_ = 0;
  uint64_t chunk_head_ = 0;
  uint64_t chunk_tail_seen_ = 0;
};

}  // namespace shm_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_OUTBOX_H_
