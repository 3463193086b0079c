// Endpoint: one rank's MPI Transport (the protocol is described in mpi_transport.h).
// Every endpoint of the process registers itself in a process-wide list, and a Wait
// on any of them moves the messages of all of them, as MPI's own progress does: a
// rank waiting on one group must still answer "clear to send" on another, or two
// groups could wait on each other.
//
// Liveness: each endpoint runs a beat thread that sends every peer a kBeat envelope
// every HeartbeatInterval (on the endpoint's communicator, under MpiLock, which every
// Wait lets go between polls). Any envelope from a peer counts as a beat (PeerWatch); a Wait fails
// the requests with a peer silent past the heartbeat timeout with Unavailable, and
// a closed endpoint says so (kClose), so that its silence is no failure.
#ifndef LOOM_COLLECTIVES_TRANSPORT_MPI_INTERNAL_ENDPOINT_H_
#define LOOM_COLLECTIVES_TRANSPORT_MPI_INTERNAL_ENDPOINT_H_

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collectives/transport/mpi/internal/envelope.h"
#include "collectives/transport/mpi/internal/mpi_call.h"
#include "collectives/transport/mpi/mpi_transport.h"
#include "collectives/transport/path_meter.h"
#include "collectives/transport/peer_failure.h"
#include "collectives/transport/peer_watch.h"
#include "collectives/transport/transport.h"
#include "core/mutex.h"

namespace loom {
namespace mpi_internal {

// The control tag: every envelope travels on it; data uses tags 1..tag_ub.
inline constexpr int kControlTag = 0;

class Endpoint final : public Transport {
 public:
  // `comm` is the endpoint's own communicator (a duplicate it frees), `epoch` the
  // generation every rank agreed on, `tag_ub` the communicator's MPI_TAG_UB.
  // `native` runs MPI's own collectives (on a communicator of its own); `peers`
  // names every rank of the group (by group rank) for errors and verdicts.
  Endpoint(MPI_Comm comm, uint64_t epoch, int tag_ub, const MpiTransportOptions& options,
           std::unique_ptr<NativeCollectives> native, std::vector<PeerIdentity> peers);
  ~Endpoint() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }

  absl::StatusOr<Request> PostSend(int peer, Tag tag, absl::Span<const std::byte> data,
                                   const Stamp& stamp) ABSL_LOCKS_EXCLUDED(MpiLock()) override;
  absl::StatusOr<Request> PostRecv(int peer, Tag tag, absl::Span<std::byte> data,
                                   Combiner combiner, const Stamp& stamp)
      ABSL_LOCKS_EXCLUDED(MpiLock()) override;
  absl::Status Wait(absl::Span<const Request> requests, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(MpiLock()) override;
  void Abort(const absl::Status& reason) ABSL_LOCKS_EXCLUDED(MpiLock()) override;
  NativeCollectives* native() override { return native_.get(); }
  // EstimatePath: the shortest round trip to `peer` ("request to send" -> "clear to
  // send" on a send, "clear to send" -> first piece on a receive), and the fastest
  // rate at which a transfer's pieces came in from it (zero for a peer this rank
  // only sends to).
  PathEstimate EstimatePath(int peer) const ABSL_LOCKS_EXCLUDED(MpiLock()) override;

 private:
  enum class State { kPosted, kAwaitingClear, kTransferring, kDone };

  struct Op {
    bool is_send = false;
    int peer = 0;
    Tag tag = 0;
    Stamp stamp;
    size_t bytes = 0;
    const std::byte* send_data = nullptr;
    std::byte* recv_data = nullptr;
    Combiner combiner;
    State state = State::kPosted;
    absl::Status status;
    bool waited = false;  // Wait is done with it: erase once no MPI request is left
    // The rendezvous, once cleared to send:
    uint64_t send_id = 0;     // a receive's: the sender's op id
    uint64_t data_tag = 0;    // counter of the first data message's tag
    size_t piece = 0;         // bytes per data message
    size_t pieces = 0;        // data messages in all
    size_t pieces_done = 0;   // sends: pieces MPI has taken; receives: combined
    size_t next_to_post = 0;  // sends, and receives through slots, post a window ahead
    std::vector<bool> landed;
    absl::Time asked_at;    // a send's: when it asked to send (a round trip's start)
    absl::Time cleared_at;  // a receive's: when it cleared the send (the same, seen here)
    // A receive's pieces landed so far, when the first did, and the bytes after it
    // (the path's rate, NoteLanded).
    size_t landed_pieces = 0;
    absl::Time first_landed_at;
    size_t landed_bytes_after_first = 0;
    std::vector<size_t> idle_slots;  // a send's slots MPI does not hold (PumpSends)
    // A send's pieces are staged here (MPI never holds the caller's send buffer): the
    // next piece takes the slot its last one freed. A combining receive's piece i
    // lands in slots[i % size]. Kept while MPI holds any (in_flight > 0), and leaked
    // if the endpoint closes then.
    std::vector<std::unique_ptr<std::vector<std::byte>>> slots;
    int in_flight = 0;  // MPI requests of this op not yet completed
  };

  // Describe: "send to world rank 3 (pid P on h) (tag 5, 64 bytes)".
  std::string Describe(const Op& op) const;

  // What an MPI request in requests_ belongs to.
  struct InFlight {
    enum class What { kControl, kDataSend, kDataRecv } what = What::kControl;
    uint64_t op = 0;
    size_t piece = 0;
    size_t slot = 0;  // a data message's: its index in the op's slots
    int peer = -1;    // a data send's: its peer and bytes, for the peer's send window
    size_t bytes = 0;
    std::unique_ptr<std::vector<std::byte>> buffer;  // a control send's bytes
  };

  // A message that arrived before its receive was posted.
  struct Arrival {
    Kind kind = Kind::kEager;
    Tag tag = 0;
    Stamp stamp;
    uint64_t bytes = 0;
    uint64_t send_id = 0;
    std::vector<std::byte> payload;
  };

  // ProgressAll moves every registered endpoint's messages (caller holds MpiLock);
  // an endpoint whose MPI calls fail is broken.
  static void ProgressAll() ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  void Progress() ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  absl::Status PollEnvelopes() ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  absl::Status TestRequests() ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  absl::Status HandleEnvelope(int source, absl::Span<const std::byte> message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  void HandleCompletion(InFlight& done, const MPI_Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  // HandleDataCompletion: a data message's op moves on (HandleCompletion did the
  // peer's send window, and pumps it after).
  void HandleDataCompletion(InFlight& done, const MPI_Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());

  absl::Status PostControl(int peer, const Envelope& envelope,
                           absl::Span<const std::byte> payload = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  // PostData hands MPI piece `piece` of `op` in op.slots[slot] (a send copies it in).
  absl::Status PostData(Op& op, uint64_t id, size_t piece, bool send, size_t slot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  // TakeSlots gives a transferring op up to `window` slots; returns how many.
  size_t TakeSlots(Op& op, size_t window) ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  // WindowPieces: the slots of a transfer in pieces of `piece` bytes: the peer's send
  // window, and at least kWindow pieces.
  static size_t WindowPieces(size_t piece);
  // NoteLanded samples the path to a peer (paths_, EstimatePath).
  void NoteLanded(Op& op, size_t piece) ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  // Direct: a receive whose pieces land in the caller's buffer itself (copies, and
  // combiners that may read their destination), all posted at once.
  static bool Direct(const Op& op);
  // RecycleSlots returns an op's slots to the pool, once MPI holds none of them.
  void RecycleSlots(Op& op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  uint64_t NewOp(Op op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  void Finish(Op& op, absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  // Match pairs a posted receive with an arrival (eager or request to send).
  absl::Status Match(uint64_t id, Op& op, Arrival& arrival)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  absl::Status StartTransfer(uint64_t id, Op& op, uint64_t send_id, uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  absl::Status CombineLanded(uint64_t id, Op& op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  // PumpSends posts the pieces of the sends to `peer` that are cleared to send, oldest
  // send first, while the peer's window has room (kSendWindowBytes, or fewer than
  // kWindow pieces).
  absl::Status PumpSends(int peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  // FailPeer fails every unfinished op with `peer` (it aborted or went silent).
  void FailPeer(int peer, const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  // JudgePeers fails the peers of `requests` that stopped beating; an op whose data
  // MPI still holds then breaks the endpoint, so that Wait returns now.
  void JudgePeers(absl::Span<const Request> requests) ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  // The beat thread: SendBeats every interval until the endpoint closes.
  void BeatLoop() ABSL_LOCKS_EXCLUDED(beat_mu_, MpiLock());
  void SendBeats() ABSL_LOCKS_EXCLUDED(MpiLock());
  void CancelDataReceives(uint64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  void Expire(uint64_t id, Op& op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  // Break marks the endpoint unusable with `status` (the first one sticks).
  void Break(absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  uint64_t DataTagCounter(int peer, size_t count) ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  int DataTag(uint64_t counter) const;
  std::unique_ptr<std::vector<std::byte>> TakeBuffer() ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());
  void GiveBuffer(std::unique_ptr<std::vector<std::byte>> buffer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock());

  MPI_Comm comm_;
  const uint64_t epoch_;
  const int tag_ub_;
  const MpiTransportOptions options_;
  const std::unique_ptr<NativeCollectives> native_;
  int rank_ = 0;
  int size_ = 1;
  PeerWatch watch_;

  // The beat thread's own: its requests (one per peer at most) and the beat message.
  std::thread beater_;
  Mutex beat_mu_;
  CondVar beat_wake_;
  bool beat_stop_ ABSL_GUARDED_BY(beat_mu_) = false;
  std::vector<MPI_Request> beat_requests_ ABSL_GUARDED_BY(MpiLock());
  // Kept alive past the endpoint when MPI still holds a beat at close.
  std::unique_ptr<std::vector<std::byte>> beat_message_;

  // Everything below is guarded by MpiLock().
  uint64_t next_id_ ABSL_GUARDED_BY(MpiLock()) = 1;
  std::map<uint64_t, Op> ops_ ABSL_GUARDED_BY(MpiLock());
  // By peer: unmatched receives and unmatched arrivals, in order.
  std::vector<std::deque<uint64_t>> posted_ ABSL_GUARDED_BY(MpiLock());
  std::vector<std::deque<Arrival>> unexpected_ ABSL_GUARDED_BY(MpiLock());
  // By peer: sends cleared to send with pieces not yet posted, oldest first, and the
  // data bytes and pieces posted to it that MPI has not completed (its send window).
  std::vector<std::deque<uint64_t>> sending_ ABSL_GUARDED_BY(MpiLock());
  std::vector<size_t> send_bytes_in_flight_ ABSL_GUARDED_BY(MpiLock());
  std::vector<size_t> send_pieces_in_flight_ ABSL_GUARDED_BY(MpiLock());
  // By peer: whether it runs on another host (smaller pieces, kAcrossHostsPiece),
  // and what is measured of the path to it.
  std::vector<bool> across_hosts_ ABSL_GUARDED_BY(MpiLock());
  std::unique_ptr<PathMeter> paths_ ABSL_GUARDED_BY(MpiLock());
  // By peer: the data tags it sends to us.
  std::vector<uint64_t> next_data_tag_ ABSL_GUARDED_BY(MpiLock());
  // By peer: set once it aborted or went silent.
  std::vector<absl::Status> peer_gone_ ABSL_GUARDED_BY(MpiLock());
  std::vector<bool> peer_closed_ ABSL_GUARDED_BY(MpiLock());  // by peer: it closed its endpoint
  std::vector<MPI_Request> requests_ ABSL_GUARDED_BY(MpiLock());
  std::vector<InFlight> in_flight_ ABSL_GUARDED_BY(MpiLock());
  std::vector<std::unique_ptr<std::vector<std::byte>>> free_buffers_ ABSL_GUARDED_BY(MpiLock());
  // Idle data slots by size (control buffers are another pool), and their bytes.
  std::map<size_t, std::vector<std::unique_ptr<std::vector<std::byte>>>> free_slots_
      ABSL_GUARDED_BY(MpiLock());
  size_t pooled_slot_bytes_ ABSL_GUARDED_BY(MpiLock()) = 0;
  std::vector<std::byte> probe_buffer_ ABSL_GUARDED_BY(MpiLock());
  std::vector<int> done_indices_ ABSL_GUARDED_BY(MpiLock());
  std::vector<MPI_Status> done_statuses_ ABSL_GUARDED_BY(MpiLock());
  // Envelopes handled and requests completed, to reset idling.
  uint64_t events_ ABSL_GUARDED_BY(MpiLock()) = 0;
  absl::Status aborted_ ABSL_GUARDED_BY(MpiLock());
  absl::Status broken_ ABSL_GUARDED_BY(MpiLock());
};

}  // namespace mpi_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_MPI_INTERNAL_ENDPOINT_H_
