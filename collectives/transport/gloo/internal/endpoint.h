// Endpoint: one rank's gloo Transport (the protocol is described in
// gloo_transport.h). It owns a connected gloo context and one receiver thread per
// peer, which keeps receives of frames posted (as many as the path to the peer
// needs, FramesWanted), so a peer's small messages land at once and gloo's sends
// never wait on the application. Every gloo send and receive is posted on gloo's own
// loop thread (LoopPoster), queued under the endpoint's lock (so the order on the
// wire is the posting order); one completion thread waits for gloo to
// finish sending each message and frees it. All matching happens under that lock, in Deliver.
// One beat thread sends every peer a heartbeat each beat interval and judges the
// peers' silence (PeerWatch); every frame a receiver thread takes counts as a beat.
// Each heartbeat is also a ping, whose echo times the round trip to the peer; the
// receiver threads time the frames and payloads that come in back to back. Both go
// to a PathMeter (EstimatePath), from which the algorithms size their windows and
// the receivers the frames they keep posted.
#ifndef LOOM_COLLECTIVES_TRANSPORT_GLOO_INTERNAL_ENDPOINT_H_
#define LOOM_COLLECTIVES_TRANSPORT_GLOO_INTERNAL_ENDPOINT_H_

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collectives/transport/gloo/gloo_transport.h"
#include "collectives/transport/gloo/internal/envelope.h"
#include "collectives/transport/gloo/internal/loop_poster.h"
#include "collectives/transport/path_meter.h"
#include "collectives/transport/peer_failure.h"
#include "collectives/transport/peer_watch.h"
#include "collectives/transport/transport.h"
#include "core/mutex.h"

namespace loom {
namespace gloo_internal {

// Receives of frames each receiver thread keeps posted, at least and at most: a
// peer can send this many messages of up to kInlineBytes back to back before one
// of them waits for this rank's thread. A frame is busy for a round trip and more
// (it lands, is read, is posted again, and gloo's "ready" notice goes back), so
// over a 2 Gbit/s link with 4 ms round trips 4 frames (1 MiB) held the gloo ring at
// 0.54-0.59 of the link. The receiver adds frames as the path's estimate asks
// (FramesWanted), up to kMostFramesPosted x kFrameBytes (8 MiB) per peer.
inline constexpr int kLeastFramesPosted = 4;
inline constexpr int kMostFramesPosted = 32;

// FramesWanted: the frames to keep posted for a path: twice its bandwidth-delay
// product in frames, plus one, within [kLeastFramesPosted, kMostFramesPosted].
int FramesWanted(const PathEstimate& path);

// Pings sent back to back when an endpoint starts, each when the last one's echo
// came (after them, one with each heartbeat): the first one may wait for the peer
// to start its receivers, and algorithms size their windows from the first calls on.
inline constexpr int kStartPings = 4;

// gloo slots of the two per-pair streams: prefix 0x4C ("L") in the top byte, as
// gloo::Slot::build would make it, clear of gloo's collectives (0x01..0x08).
inline constexpr uint64_t kEnvelopeSlot = (uint64_t{0x4C} << 56) | 1;
inline constexpr uint64_t kPayloadSlot = (uint64_t{0x4C} << 56) | 2;

// A receiver thread keeps the memory of its largest payload up to this size for the
// next one; the sends keep as much of theirs in all.
inline constexpr size_t kKeptPayloadBytes = size_t{64} << 20;

// Combining receives see pieces of at most this many bytes (a multiple of
// kCombineAlignment), so a large reduction walks the message in cache-sized steps.
inline constexpr size_t kCombinePiece = size_t{1} << 20;
static_assert(kCombinePiece % kCombineAlignment == 0);

// GlooContexts: the endpoint's gloo contexts, each fully connected over one device,
// so a pair of ranks has a socket in each. gloo sends a message only once the
// receiver's "ready to receive" notice has come back, and that notice leaves behind
// whatever data the receiver has already handed the same socket. Over one socket,
// two ranks sending each other large payloads took turns: a 32 MiB exchange between
// two hosts at 2 Gbit/s took 190..340 ms, not 140. So frames go over `frames`,
// payloads from a lower rank to a higher one over `upward` and the other way over
// `downward`: a payload socket carries data one way and only notices the other.
// `poster` runs on the loop thread of the device the three share (loop_poster.h).
struct GlooContexts {
  std::shared_ptr<gloo::Context> frames, upward, downward;
  std::unique_ptr<LoopPoster> poster;
};

class Endpoint final : public Transport {
 public:
  // `contexts` are fully connected (connectFullMesh done); `peers` and
  // `peer_intervals` hold every rank's identity and beat interval, by group rank (this
  // one included), as the ranks told each other at connect.
  Endpoint(GlooContexts contexts, const GlooOptions& options, std::vector<PeerIdentity> peers,
           std::vector<absl::Duration> peer_intervals);
  ~Endpoint() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "gloo"; }
  // The shortest ping echo and the fastest arrivals from `peer` so far.
  PathEstimate EstimatePath(int peer) const override { return paths_.Estimate(peer); }

  absl::StatusOr<Request> PostSend(int peer, Tag tag, absl::Span<const std::byte> data,
                                   const Stamp& stamp) ABSL_LOCKS_EXCLUDED(mu_) override;
  absl::StatusOr<Request> PostRecv(int peer, Tag tag, absl::Span<std::byte> data,
                                   Combiner combiner, const Stamp& stamp)
      ABSL_LOCKS_EXCLUDED(mu_) override;
  absl::Status Wait(absl::Span<const Request> requests, absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(mu_) override;
  absl::StatusOr<bool> TryWait(absl::Span<const Request> requests, absl::Time until)
      ABSL_LOCKS_EXCLUDED(mu_) override;
  void Wake() ABSL_LOCKS_EXCLUDED(mu_) override;
  // Every request finishes on a receiver thread or the caller's (in Finish): the
  // listener is called there, under mu_.
  bool SetFinishListener(std::function<void()> listener) ABSL_LOCKS_EXCLUDED(mu_) override;
  void Abort(const absl::Status& reason) ABSL_LOCKS_EXCLUDED(mu_) override;

 private:
  struct Op {
    bool is_send = false;
    int peer = 0;
    Tag tag = 0;
    Stamp stamp;
    size_t bytes = 0;
    std::byte* recv_data = nullptr;
    Combiner combiner;
    bool done = false;
    bool waiting_ack = false;  // a large send: done once the receiver answers
    int64_t posted_at = 0;     // a large send: when it was posted (SteadyNanos)
    absl::Status status;

    std::string Describe() const;
  };

  // A message that arrived before a receive for it was posted.
  struct Arrival {
    Envelope head;
    std::vector<std::byte> payload;
  };

  // A message handed to gloo, kept until gloo has sent it.
  struct Outgoing {
    int peer = 0;
    std::vector<std::byte> frame;    // head and inline payload
    std::vector<std::byte> payload;  // when it does not fit in the frame
    // The payload goes as PieceCount(payload.size()) sends of this one buffer.
    std::unique_ptr<gloo::transport::UnboundBuffer> frame_buffer, payload_buffer;
  };

  // Receive buffers and the memory they receive into, freed only after the pairs
  // close: until then gloo's loop thread may touch a posted receive (it signals a
  // broken pair's error to each). A buffer's destructor waits for that inside
  // libgloo, where TSan cannot see it, so buffers freed when their receiver thread
  // ended were reported as racing with the loop thread.
  struct Retired {
    std::vector<std::vector<std::byte>> memory;  // destroyed after the buffers
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> buffers;
  };
  void Retire(Retired retired) ABSL_LOCKS_EXCLUDED(mu_);

  // Rate samples from messages that come in back to back on one line: a train of
  // arrivals, each after the first waited for (so the link brought it, not a queue
  // in front of the thread); the bytes after the first over the time since it came.
  // (The first's own time may hold the sender's pause before it.)
  struct ArrivalTrain {
    int64_t last_arrival = 0;
    int64_t began = 0;  // 0: no train
    size_t bytes = 0;
  };
  // NoteArrival adds an arrival of `bytes` (0: one that breaks the train, not data)
  // at `arrived`, waited for since `wait_began`, to `train`, and a sample of the
  // path to `peer` when the train holds enough bytes.
  void NoteArrival(int peer, ArrivalTrain& train, int64_t wait_began, int64_t arrived,
                   size_t bytes);

  // A line of receives that a receiver thread keeps posted from its peer on one slot,
  // each of `bytes` into memory of its own: frames on kEnvelopeSlot, payload pieces
  // on kPayloadSlot. gloo fills them in posting order, so the front of `order` holds
  // the next message; one that was read goes back to the end (Repost).
  struct Line {
    gloo::Context* context = nullptr;
    uint64_t slot = 0;
    size_t bytes = 0;
    const char* what = "";  // "frame", "payload piece": for errors
    Retired posted;  // memory[i] and buffers[i]: receive i
    std::deque<size_t> order;
    ArrivalTrain train;

    size_t size() const { return posted.buffers.size(); }
    absl::Span<const std::byte> Front() const { return posted.memory[order.front()]; }
  };
  // Grow posts receives on `line` from `peer` until it holds `wanted`.
  absl::Status Grow(int peer, Line& line, int wanted) ABSL_LOCKS_EXCLUDED(mu_);
  // WaitFront waits for the front receive of `line` to land: true when it did, false
  // when closing aborted the wait, gloo's error when it failed.
  absl::StatusOr<bool> WaitFront(int peer, Line& line) ABSL_LOCKS_EXCLUDED(mu_);
  // Repost posts the front receive of `line` again, at the end of the line.
  void Repost(int peer, Line& line) ABSL_LOCKS_EXCLUDED(mu_);

  void ReceiveLoop(int peer) ABSL_LOCKS_EXCLUDED(mu_);
  void CompleteSends() ABSL_LOCKS_EXCLUDED(mu_);
  // BeatLoop: the beat thread, until closing.
  void BeatLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Beats (and pings) every peer that is not gone, listens, and fails each one
  // silent past its allowed time (PeerWatch::Judge).
  void BeatAndJudge(bool beat) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Receives the pieces of the payload that follows `envelope` from `peer` (not
  // inline) from `pieces`, into `payload` (resized to it); false once closing aborted
  // the wait; a status when gloo failed.
  absl::StatusOr<bool> ReceivePieces(int peer, const Envelope& envelope, Line& pieces,
                                     std::vector<std::byte>* payload) ABSL_LOCKS_EXCLUDED(mu_);

  // Ping sends `peer` a heartbeat that asks for an echo of this rank's clock.
  void Ping(int peer) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Post queues a message for gloo's loop thread to send to `peer`, or delivers it at
  // once when it is this rank; a gloo failure fails the peer (SendFailed).
  void Post(int peer, const Envelope& envelope, absl::Span<const std::byte> payload)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // PostReceive queues a receive into `buffer` (`bytes` long, on `slot`) from `peer`
  // for the loop thread; when gloo refuses it, the wait on `buffer` is aborted and
  // the peer fails.
  void PostReceive(int peer, gloo::transport::UnboundBuffer* buffer, uint64_t slot, size_t bytes)
      ABSL_LOCKS_EXCLUDED(mu_);
  // On the loop thread, after gloo refused to send `frame` (and `payload`, when there
  // is one) to `peer`: the completion thread stops waiting for them, and the peer fails.
  void SendFailed(int peer, gloo::transport::UnboundBuffer* frame,
                  gloo::transport::UnboundBuffer* payload, const absl::Status& status)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Deliver matches a message from `source` (its payload is read during the call only:
  // it is copied when no receive is posted for it yet).
  void Deliver(int source, const Envelope& envelope, absl::Span<const std::byte> payload)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Complete finishes receive `op` with the message `head` + `payload` from `source`
  // (copy or combine, or fail on a size mismatch) and answers the sender if it waits
  // for that.
  void Complete(Op& op, int source, const Envelope& head, absl::Span<const std::byte> payload)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Finish(Op& op, absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FailPeer fails every unfinished op with `peer` and every later one. The first
  // failure of a peer is recorded as `fault` when one is given (peer_failure.h), so
  // that a job can blame the peer that failed first.
  void FailPeer(int peer, const absl::Status& status, std::optional<PeerFault> fault = std::nullopt)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // LoseConnection fails `peer` after gloo failed moving bytes to or from it: it died
  // (a peer that closed its endpoint said goodbye first, and is gone already).
  void LoseConnection(int peer, const absl::Status& gloo_error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint64_t NewOp(Op op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Registers `buffer` as the one `thread` waits on, so that closing can abort it;
  // false when the endpoint is closing already.
  bool Track(size_t thread, gloo::transport::UnboundBuffer* buffer) ABSL_LOCKS_EXCLUDED(mu_);

  // Memory for a payload being sent, of capacity >= bytes when one was kept (a fresh
  // one is faulted in page by page), and back when gloo has sent it.
  std::vector<std::byte> TakePayloadMemory(size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void KeepPayloadMemory(std::vector<std::byte> memory) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The context that carries payloads between this rank and `peer`, this way.
  gloo::Context& PayloadContext(int peer, bool sending) const;

  const std::shared_ptr<gloo::Context> context_;  // frames
  const std::shared_ptr<gloo::Context> upward_, downward_;  // payloads (GlooContexts)
  // Stopped in the destructor once the threads are gone and before the pairs close.
  const std::unique_ptr<LoopPoster> poster_;
  const GlooOptions options_;
  const int rank_;
  const int size_;
  // Who the peers are, and when each was last heard from. Thread-safe.
  PeerWatch watch_;
  // What is measured of the path to each peer. Thread-safe.
  PathMeter paths_;

  Mutex mu_;
  // Signalled when a message is handed to gloo or sent, a peer is gone, or closing
  // begins: what the completion thread and a closing endpoint wait for.
  CondVar changed_;
  // Signalled when an op finishes: what Wait sleeps on. Apart from changed_, so that
  // a caller waiting for its receive is not woken by every message the endpoint
  // hands to gloo or gloo finishes sending, nor the completion thread by every op.
  // On a host whose cores the ranks' threads share, each such wake-up is a context
  // switch on the critical path: with the two condition variables one, a 2-rank ring
  // all-reduce of 4 KiB over loopback took 0.89..0.99 ms, against 0.25..0.50 ms
  // apart (ranks bound to a core each).
  CondVar finished_;
  // Set by Wake, taken by the TryWait it ends.
  bool woken_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> finish_listener_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Op> ops_ ABSL_GUARDED_BY(mu_);
  std::vector<std::deque<uint64_t>> posted_ ABSL_GUARDED_BY(mu_);     // by peer, in order
  std::vector<std::deque<Arrival>> unexpected_ ABSL_GUARDED_BY(mu_);  // by peer, in order
  std::vector<absl::Status> peer_gone_ ABSL_GUARDED_BY(mu_);          // by peer
  std::vector<int> echoes_ ABSL_GUARDED_BY(mu_);  // by peer: pings answered so far
  // Handed to gloo and not yet sent, oldest first (the completion thread waits on
  // the front).
  std::deque<std::unique_ptr<Outgoing>> in_flight_ ABSL_GUARDED_BY(mu_);
  // Messages gloo did not send (their peer is gone), which it may still hold: freed
  // after the pairs close.
  std::vector<std::unique_ptr<Outgoing>> abandoned_ ABSL_GUARDED_BY(mu_);
  std::vector<Retired> retired_ ABSL_GUARDED_BY(mu_);  // see Retired
  // Sent payloads' memory, kept for the next (at most kKeptPayloadBytes in all).
  std::vector<std::vector<std::byte>> payload_memory_ ABSL_GUARDED_BY(mu_);
  size_t kept_payload_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status aborted_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  // The destructor began (before closing_, which ends the threads).
  bool leaving_ ABSL_GUARDED_BY(mu_) = false;
  // Signalled when closing begins only: the beat thread sleeps on it between beats
  // (changed_, signalled on every message, would wake it for nothing).
  CondVar closing_changed_;
  // The gloo buffer each thread waits on (receivers by peer; the completion thread's
  // frame and payload last).
  std::vector<gloo::transport::UnboundBuffer*> waiting_on_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

}  // namespace gloo_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_GLOO_INTERNAL_ENDPOINT_H_
