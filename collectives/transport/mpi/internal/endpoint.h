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

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collectives/transport/mpi/internal/envelope.h"
#include "collectives/transport/mpi/mpi_transport.h"
#include "collectives/transport/peer_failure.h"
#include "collectives/transport/peer_watch.h"
#include "collectives/transport/transport.h"

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
                                   const Stamp& stamp) override;
  absl::StatusOr<Request> PostRecv(int peer, Tag tag, absl::Span<std::byte> data,
                                   Combiner combiner, const Stamp& stamp) override;
  absl::Status Wait(absl::Span<const Request> requests, absl::Time deadline) override;
  void Abort(const absl::Status& reason) override;
  NativeCollectives* native() override { return native_.get(); }

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
    size_t next_to_post = 0;  // receives through slots post a window ahead
    std::vector<bool> landed;
    std::vector<std::unique_ptr<std::vector<std::byte>>> slots;  // piece i uses slots[i % size]
    int in_flight = 0;  // MPI requests of this op not yet completed
  };

  // Describe: "send to world rank 3 (pid P on h) (tag 5, 64 bytes)".
  std::string Describe(const Op& op) const;

  // What an MPI request in requests_ belongs to.
  struct InFlight {
    enum class What { kControl, kDataSend, kDataRecv } what = What::kControl;
    uint64_t op = 0;
    size_t piece = 0;
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
  static void ProgressAll();
  void Progress();
  absl::Status PollEnvelopes();
  absl::Status TestRequests();
  absl::Status HandleEnvelope(int source, absl::Span<const std::byte> message);
  void HandleCompletion(InFlight& done, const MPI_Status& status);

  absl::Status PostControl(int peer, const Envelope& envelope,
                           absl::Span<const std::byte> payload = {});
  absl::Status PostData(Op& op, uint64_t id, size_t piece, bool send);
  uint64_t NewOp(Op op);
  void Finish(Op& op, absl::Status status);
  // Match pairs a posted receive with an arrival (eager or request to send).
  absl::Status Match(uint64_t id, Op& op, Arrival& arrival);
  absl::Status StartTransfer(uint64_t id, Op& op, uint64_t send_id, uint64_t bytes);
  absl::Status CombineLanded(uint64_t id, Op& op);
  // FailPeer fails every unfinished op with `peer` (it aborted or went silent).
  void FailPeer(int peer, const absl::Status& status);
  // JudgePeers fails the peers of `requests` that stopped beating; an op whose data
  // MPI still holds then breaks the endpoint, so that Wait returns now.
  void JudgePeers(absl::Span<const Request> requests);
  // The beat thread: SendBeats every interval until the endpoint closes.
  void BeatLoop();
  void SendBeats();
  void CancelDataReceives(uint64_t id);
  void Expire(uint64_t id, Op& op);
  // Break marks the endpoint unusable with `status` (the first one sticks).
  void Break(absl::Status status);
  uint64_t DataTagCounter(int peer, size_t count);
  int DataTag(uint64_t counter) const;
  std::unique_ptr<std::vector<std::byte>> TakeBuffer();
  void GiveBuffer(std::unique_ptr<std::vector<std::byte>> buffer);

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
  std::mutex beat_mu_;
  std::condition_variable beat_wake_;
  bool beat_stop_ = false;  // guarded by beat_mu_
  std::vector<MPI_Request> beat_requests_;
  // Kept alive past the endpoint when MPI still holds a beat at close.
  std::unique_ptr<std::vector<std::byte>> beat_message_;

  // Everything below is guarded by MpiLock().
  uint64_t next_id_ = 1;
  std::map<uint64_t, Op> ops_;
  std::vector<std::deque<uint64_t>> posted_;     // by peer: unmatched receives, in order
  std::vector<std::deque<Arrival>> unexpected_;  // by peer: unmatched arrivals, in order
  std::vector<uint64_t> next_data_tag_;          // by peer: data tags it sends to us
  std::vector<absl::Status> peer_gone_;          // by peer: set once it aborted or went silent
  std::vector<bool> peer_closed_;                // by peer: it closed its endpoint
  std::vector<MPI_Request> requests_;
  std::vector<InFlight> in_flight_;
  std::vector<std::unique_ptr<std::vector<std::byte>>> free_buffers_;
  std::vector<std::byte> probe_buffer_;
  std::vector<int> done_indices_;
  std::vector<MPI_Status> done_statuses_;
  uint64_t events_ = 0;  // envelopes handled and requests completed, to reset idling
  absl::Status aborted_;
  absl::Status broken_;
};

}  // namespace mpi_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_MPI_INTERNAL_ENDPOINT_H_
