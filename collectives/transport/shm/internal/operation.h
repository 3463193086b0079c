// Operation: one posted send or receive of a shm endpoint, and the per-peer state
// its sender side (Outbox) and receiver side (Inbox) share.
#ifndef LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_OPERATION_H_
#define LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_OPERATION_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "collectives/transport/peer_failure.h"
#include "collectives/transport/shm/internal/layout.h"
#include "collectives/transport/transport.h"

namespace loom {
namespace shm_internal {

struct Operation {
  enum class Stage {
    kQueued,     // Send: waiting for a cell or slot. Receive: posted, unmatched.
    kPosted,     // Send: descriptor published, not yet matched.
    kStreaming,  // Staged message matched: chunks flow.
    kFinished,   // `status` is final; no one touches the buffer any more.
  };

  bool is_send = false;
  int self = 0;  // This endpoint's rank.
  int peer = 0;
  Tag tag = 0;
  const std::byte* send_data = nullptr;
  std::byte* recv_data = nullptr;
  size_t bytes = 0;
  Combiner combiner;  // Receives: how arriving bytes are written (default: copied).
  Stamp stamp;

  Stage stage = Stage::kQueued;
  PayloadKind kind = PayloadKind::kEager;
  uint32_t slot = 0;
  uint32_t generation = 0;
  size_t streamed = 0;         // Staged: bytes pushed (send) or arrived (receive).
  bool named_by_wait = false;  // Set while a Wait holds it, to catch a request named twice.
  absl::Status status;

  bool finished() const { return stage == Stage::kFinished; }
  void Finish(absl::Status result) {
    status = std::move(result);
    stage = Stage::kFinished;
  }
  std::string Describe() const {
    return absl::StrCat(is_send ? "send to rank " : "receive from rank ", peer, " (tag ", tag, ", ",
                        bytes, " bytes)");
  }
};

// What a peer sees when the receiver of a matched message gives up on it
// (SendSlot::receiver_bytes while the slot is kReceiverCancelled).
enum class GiveUpReason : uint64_t { kDeadline = 1, kCopyFailed = 2, kAborted = 3 };

// PeerLink is this endpoint's view of one peer (itself included).
struct PeerLink {
  int rank = 0;
  pid_t pid = 0;
  PeerIdentity identity;                          // For errors: world rank, pid, host.
  RankHeader* header = nullptr;                   // In the peer's segment.
  ChannelView outgoing;                           // This rank -> peer, in the peer's segment.
  ChannelView incoming;                           // Peer -> this rank, in this rank's segment.
  PayloadKind large_kind = PayloadKind::kStaged;  // For sends above eager_bytes.
  // The peer may map this rank's SharedBuffers (it may use CMA on this rank), so a
  // large send out of one travels kMapped whatever large_kind says.
  bool may_map = false;
  // Set when something the peer may be waiting for changed; the endpoint then rings it.
  bool news = false;
  // Non-OK once the peer is gone (died, closed, aborted); its requests fail with it.
  absl::Status failure;
  bool dead = false;  // The process is gone and can touch nothing any more.
};

// MismatchError is what both sides of a size mismatch report.
inline absl::Status MismatchError(int source, int destination, Tag tag, uint64_t send_bytes,
                                  uint64_t receive_bytes) {
  return absl::FailedPreconditionError(
      absl::StrCat("rank ", source, " sent ", send_bytes, " bytes with tag ", tag, " to rank ",
                   destination, ", which posted a receive of ", receive_bytes, " bytes"));
}

}  // namespace shm_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_OPERATION_H_
