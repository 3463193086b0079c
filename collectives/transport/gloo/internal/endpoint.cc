#include "collectives/transport/gloo/internal/endpoint.h"

#include <algorithm>
#include <chrono>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/transport/gloo/internal/gloo_call.h"
#include "collectives/transport/gloo/internal/sigpipe.h"

namespace loom {
namespace gloo_internal {
namespace {

// gloo closes every pair of a context when one of its waits times out, so the
// threads' waits get none that could expire: they end when closing aborts them.
constexpr std::chrono::milliseconds kForever = std::chrono::hours(24 * 365);

// The clock of pings and arrival times: monotonic, so a step of the wall clock
// never makes a round trip or a rate (the meter would keep a false shortest one).
int64_t SteadyNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::Status Mismatch(int source, size_t sent, Tag tag, int destination, size_t posted) {
  return absl::FailedPreconditionError(
      absl::StrCat("rank ", source, " sent ", sent, " bytes with tag ", tag, " to rank ",
                   destination, ", which posted a receive of ", posted, " bytes"));
}

}  // namespace

int FramesWanted(const PathEstimate& path) {
  const size_t wanted = (2 * path.BytesInFlight() + kFrameBytes - 1) / kFrameBytes + 1;
  return static_cast<int>(std::clamp<size_t>(wanted, kLeastFramesPosted, kMostFramesPosted));
}

std::string Endpoint::Op::Describe() const {
  return absl::StrCat(is_send ? "send to rank " : "receive from rank ", peer, " (tag ", tag, ", ",
                      bytes, " bytes)");
}

Endpoint::Endpoint(GlooContexts contexts, const GlooOptions& options,
                   std::vector<PeerIdentity> peers, std::vector<absl::Duration> peer_intervals)
    : context_(std::move(contexts.frames)),
      upward_(std::move(contexts.upward)),
      downward_(std::move(contexts.downward)),
      poster_(std::move(contexts.poster)),
      options_(options),
      rank_(options.rank),
      size_(options.size),
      watch_("gloo", rank_, std::move(peers), options.heartbeat_timeout,
             std::move(peer_intervals)),
      paths_(options.size) {
  {
    MutexLock lock(&mu_);
    posted_.resize(size_);
    unexpected_.resize(size_);
    peer_gone_.assign(size_, absl::OkStatus());
    echoes_.assign(size_, 0);
    waiting_on_.assign(size_ + 2, nullptr);
  }
  // The threads post receives (gloo then writes "ready" notices to the peer) and may
  // find a closed socket at any time: they start with SIGPIPE blocked and keep it so
  // (sigpipe.h); the caller's mask comes back when the guard ends.
  const ScopedSigpipeBlock no_sigpipe;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_) threads_.emplace_back([this, peer] { ReceiveLoop(peer); });
  }
  threads_.emplace_back([this] { CompleteSends(); });
  if (size_ > 1) threads_.emplace_back([this] { BeatLoop(); });
}

Endpoint::~Endpoint() {
  {
    MutexLock lock(&mu_);
    leaving_ = true;
    // A goodbye to every peer, so that the end of the connections below is no failure
    // to them (and not recorded as this process's death).
    Envelope goodbye;
    goodbye.kind = Kind::kClose;
    for (int peer = 0; peer < size_; ++peer) {
      if (peer != rank_) Post(peer, goodbye, {});
    }
    // Acknowledgements, buffered sends, abort notices and goodbyes handed over last
    // still leave.
    const absl::Time flush_deadline = absl::Now() + options_.close_grace;
    while (!in_flight_.empty()) {
      if (!changed_.WaitWithDeadline(&mu_, flush_deadline)) break;
    }
    // Then every peer's goodbye (or its end), within the same grace: a pair closed
    // with bytes in it this rank has not read (a beat, a ready notice) is reset, and
    // the peer's kernel then drops what the peer had not read yet, this rank's last
    // messages and goodbye included. A peer still waiting for this rank's last
    // message (a barrier's) failed with "connection reset by peer" where this rank
    // had sent it (integrations/torch two_level_test, once in a run of the suite).
    for (int peer = 0; peer < size_; ++peer) {
      while (peer != rank_ && peer_gone_[peer].ok() &&
             changed_.WaitWithDeadline(&mu_, flush_deadline)) {
      }
    }
    closing_ = true;
    changed_.SignalAll();
    closing_changed_.SignalAll();
    for (int thread = 0; thread < size_ + 2; ++thread) {
      gloo::transport::UnboundBuffer* buffer = waiting_on_[thread];
      if (buffer == nullptr) continue;
      if (thread < size_) {
        buffer->abortWaitRecv();
      } else {
        buffer->abortWaitSend();
      }
    }
  }
  for (std::thread& thread : threads_) thread.join();
  // Nothing is posted any more; what was queued and not yet run is dropped (its
  // buffers are freed after the pairs close, with the rest).
  poster_->Stop();
  // Closing the pairs tells the peers' receivers that this rank is gone. Messages
  // gloo never sent, and the receive buffers, are freed after it (in_flight_,
  // abandoned_ and retired_ go before context_).
  (void)GlooCall("closeConnections", [&] {
    context_->closeConnections();
    upward_->closeConnections();
    downward_->closeConnections();
  });
}

std::vector<std::byte> Endpoint::TakePayloadMemory(size_t bytes) {
  for (auto it = payload_memory_.begin(); it != payload_memory_.end(); ++it) {
    if (it->capacity() < bytes) continue;
    std::vector<std::byte> memory = std::move(*it);
    payload_memory_.erase(it);
    kept_payload_bytes_ -= memory.capacity();
    return memory;
  }
  return {};
}

void Endpoint::KeepPayloadMemory(std::vector<std::byte> memory) {
  if (kept_payload_bytes_ + memory.capacity() > kKeptPayloadBytes) return;
  kept_payload_bytes_ += memory.capacity();
  payload_memory_.push_back(std::move(memory));
}

gloo::Context& Endpoint::PayloadContext(int peer, bool sending) const {
  const bool upward = sending ? rank_ < peer : peer < rank_;
  return upward ? *upward_ : *downward_;
}

bool Endpoint::Track(size_t thread, gloo::transport::UnboundBuffer* buffer) {
  MutexLock lock(&mu_);
  if (buffer != nullptr && closing_) return false;
  waiting_on_[thread] = buffer;
  return true;
}

// --- The threads -------------------------------------------------------------------

void Endpoint::NoteArrival(int peer, ArrivalTrain& train, int64_t wait_began, int64_t arrived,
                           size_t bytes) {
  if (bytes > 0 && train.began != 0 && 2 * (arrived - wait_began) >= arrived - train.last_arrival) {
    train.bytes += bytes;
    if (train.bytes >= PathMeter::kMinRateSampleBytes) {
      paths_.NoteTransfer(peer, train.bytes, absl::Nanoseconds(arrived - train.began));
      train.began = arrived;
      train.bytes = 0;
    }
  } else {
    train.began = bytes > 0 ? arrived : 0;
    train.bytes = 0;
  }
  train.last_arrival = arrived;
}

absl::Status Endpoint::Grow(int peer, Line& line, int wanted) {
  while (static_cast<int>(line.size()) < wanted) {
    std::vector<std::byte> memory(line.bytes);
    std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
    const absl::Status created = GlooCall("createUnboundBuffer", [&] {
      buffer = line.context->createUnboundBuffer(memory.data(), line.bytes);
    });
    if (!created.ok()) return created;
    line.posted.memory.push_back(std::move(memory));  // the heap block stays where it is
    line.posted.buffers.push_back(std::move(buffer));
    PostReceive(peer, line.posted.buffers.back().get(), line.slot, line.bytes);
    line.order.push_back(line.size() - 1);
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> Endpoint::WaitFront(int peer, Line& line) {
  gloo::transport::UnboundBuffer* buffer = line.posted.buffers[line.order.front()].get();
  if (!Track(peer, buffer)) return false;
  bool landed = false;
  const absl::Status status =
      GlooCall(absl::StrCat("receive of a ", line.what, " from rank ", peer),
               [&] { landed = buffer->waitRecv(nullptr, kForever); });
  Track(peer, nullptr);
  if (!status.ok()) return status;
  return landed;
}

void Endpoint::Repost(int peer, Line& line) {
  const size_t i = line.order.front();
  line.order.pop_front();
  PostReceive(peer, line.posted.buffers[i].get(), line.slot, line.bytes);
  line.order.push_back(i);
}

absl::StatusOr<bool> Endpoint::ReceivePieces(int peer, const Envelope& envelope, Line& pieces,
                                             std::vector<std::byte>* payload) {
  // Receives for pieces are posted when the first large payload from the peer comes
  // (its first pieces wait a round trip for them), and added as the path grows: a
  // peer that never sends one costs no memory for them.
  const absl::Status grown = Grow(peer, pieces, FramesWanted(paths_.Estimate(peer)));
  if (!grown.ok()) return grown;
  // The memory is kept from one payload to the next (ReceiveLoop), and filled without
  // being zeroed first: a fresh one is faulted in page by page, which cost a 32 MiB
  // receive about 10 ms.
  payload->clear();
  try {
    payload->reserve(envelope.bytes);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat("no memory for a payload of ",
                                                     envelope.bytes, " bytes from rank ", peer));
  }
  for (size_t offset = 0; offset < envelope.bytes; offset += kPieceBytes) {
    const size_t bytes = std::min(kPieceBytes, envelope.bytes - offset);
    const int64_t wait_began = SteadyNanos();
    absl::StatusOr<bool> landed = WaitFront(peer, pieces);
    if (!landed.ok() || !*landed) return landed;
    NoteArrival(peer, pieces.train, wait_began, SteadyNanos(), bytes);
    watch_.Heard(peer);
    const absl::Span<const std::byte> piece = pieces.Front();
    payload->insert(payload->end(), piece.begin(), piece.begin() + bytes);
    Repost(peer, pieces);
  }
  return true;
}

void Endpoint::ReceiveLoop(int peer) {
  // Frames: kLeastFramesPosted at first, more as the path grows (FramesWanted).
  // Payload pieces: posted with the first large payload (ReceivePieces). Both lines
  // outlive the thread (Retired).
  Line frames;
  frames.context = context_.get();
  frames.slot = kEnvelopeSlot;
  frames.bytes = kFrameBytes;
  frames.what = "frame";
  Line pieces;
  pieces.context = &PayloadContext(peer, /*sending=*/false);
  pieces.slot = kPayloadSlot;
  pieces.bytes = kPieceBytes;
  pieces.what = "payload piece";
  absl::Status status = Grow(peer, frames, kLeastFramesPosted);
  std::vector<std::byte> separate;  // a payload too large for the frame, kept for the next
  for (;;) {
    if (separate.capacity() > kKeptPayloadBytes) std::vector<std::byte>().swap(separate);
    Envelope envelope;
    bool received = false;
    const int64_t wait_began = SteadyNanos();
    if (status.ok()) {
      absl::StatusOr<bool> landed = WaitFront(peer, frames);
      status = landed.status();
      received = landed.ok() && *landed;
    }
    const int64_t arrived = SteadyNanos();
    if (status.ok() && received) {
      watch_.Heard(peer);  // Every frame counts as a beat, whatever its kind.
      absl::StatusOr<Envelope> decoded = Decode(frames.Front());
      status = decoded.status();
      if (decoded.ok()) envelope = *decoded;
    }
    const bool data_frame =
        status.ok() && received && envelope.kind == Kind::kData && envelope.PayloadInline();
    NoteArrival(peer, frames.train, wait_began, arrived, data_frame ? FrameBytes(envelope) : 0);
    absl::Span<const std::byte> payload;
    if (status.ok() && received) {
      if (envelope.PayloadInline()) {
        payload = InlinePayload(frames.Front(), envelope);
      } else if (envelope.HasPayload()) {
        absl::StatusOr<bool> got = ReceivePieces(peer, envelope, pieces, &separate);
        status = got.status();
        received = got.ok() && *got;
        payload = absl::MakeConstSpan(separate);
      }
    }
    {
      MutexLock lock(&mu_);
      const bool ended = closing_ || !status.ok() || !received;
      if (!closing_ && !status.ok()) LoseConnection(peer, status);
      if (ended) {
        retired_.push_back(std::move(frames.posted));
        retired_.push_back(std::move(pieces.posted));
        return;
      }
      // A posted receive takes the payload straight from the frame.
      Deliver(peer, envelope, payload);
    }
    // The frame is read: it goes back to the end of the line, and frames are added
    // when the path has grown past them.
    Repost(peer, frames);
    status = Grow(peer, frames, FramesWanted(paths_.Estimate(peer)));
  }
}

void Endpoint::CompleteSends() {
  for (;;) {
    Outgoing* message = nullptr;
    {
      MutexLock lock(&mu_);
      while (!closing_ && in_flight_.empty()) changed_.Wait(&mu_);
      if (closing_) return;
      message = in_flight_.front().get();  // only this thread removes it
      if (!peer_gone_[message->peer].ok()) {
        // Nobody waits for it any more, and gloo may never finish it (FailPeer).
        abandoned_.push_back(std::move(in_flight_.front()));
        in_flight_.pop_front();
        changed_.SignalAll();
        continue;
      }
      waiting_on_[size_] = message->frame_buffer.get();
      waiting_on_[size_ + 1] = message->payload_buffer.get();
    }
    bool sent = false;
    const absl::Status status = GlooCall(
        absl::StrCat("send of ", message->payload.size(), " bytes to rank ", message->peer), [&] {
          sent = message->frame_buffer->waitSend(nullptr, kForever);
          if (message->payload_buffer == nullptr) return;
          for (size_t piece = PieceCount(message->payload.size()); sent && piece > 0; --piece) {
            sent = message->payload_buffer->waitSend(nullptr, kForever);
          }
        });
    MutexLock lock(&mu_);
    waiting_on_[size_] = nullptr;
    waiting_on_[size_ + 1] = nullptr;
    if (closing_) return;  // what gloo still holds is freed after closing its pairs
    const int peer = message->peer;
    // Not sent: gloo failed it, or FailPeer gave up on it. gloo may still hold it in a
    // broken pair's queue, so it is freed only after the pairs close.
    if (!sent) {
      abandoned_.push_back(std::move(in_flight_.front()));
    } else {
      KeepPayloadMemory(std::move(message->payload));
    }
    in_flight_.pop_front();
    changed_.SignalAll();
    if (!status.ok()) {
      LoseConnection(peer, status);
    }
  }
}

void Endpoint::BeatLoop() {
  // PeerWatch takes a gap between two Listens longer than the beat interval for this
  // process having been stopped, so the thread listens twice per beat.
  const auto half_interval = absl::ToChronoNanoseconds(watch_.interval() / 2);
  MutexLock lock(&mu_);
  for (uint64_t tick = 0; !closing_; ++tick) {
    BeatAndJudge(/*beat=*/tick % 2 == 0);
    const auto next = std::chrono::steady_clock::now() + half_interval;
    while (!closing_) {
      if (!closing_changed_.WaitUntil(&mu_, next)) break;
    }
  }
}

void Endpoint::Ping(int peer) {
  Envelope ping;
  ping.kind = Kind::kBeat;
  ping.send_id = static_cast<uint64_t>(SteadyNanos());
  Post(peer, ping, {});  // Post skips gone peers.
}

void Endpoint::BeatAndJudge(bool beat) {
  if (beat) {
    for (int peer = 0; peer < size_; ++peer) {
      if (peer != rank_) Ping(peer);
    }
  }
  // Listening under the lock: a thread that held it for long kept this one from
  // listening, and the receivers from delivering, so the silence is not the peers'.
  watch_.Listen();
  // After an abort every request fails anyway, and what peers do next is its echo;
  // once closing, nobody waits on a request.
  if (!aborted_.ok() || leaving_) return;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_ || !peer_gone_[peer].ok()) continue;
    // A peer that closed its endpoint or died is gone already, so it is never called
    // silent as well. Judge records its own verdict.
    absl::Status verdict = watch_.Judge(peer);
    if (!verdict.ok()) FailPeer(peer, verdict);
  }
}

// --- Posting -----------------------------------------------------------------------

uint64_t Endpoint::NewOp(Op op) {
  const uint64_t id = next_id_++;
  ops_.emplace(id, std::move(op));
  return id;
}

void Endpoint::Finish(Op& op, absl::Status status) {
  op.done = true;
  op.waiting_ack = false;
  op.status = std::move(status);
  finished_.SignalAll();
  if (finish_listener_) finish_listener_();
}

void Endpoint::Post(int peer, const Envelope& envelope, absl::Span<const std::byte> payload) {
  if (peer == rank_) {
    Deliver(rank_, envelope, payload);
    return;
  }
  if (!peer_gone_[peer].ok()) return;
  auto message = std::make_unique<Outgoing>();
  message->peer = peer;
  message->frame = Encode(envelope, payload);
  const bool separate = envelope.HasPayload() && !envelope.PayloadInline();
  if (separate) {
    // Room for the whole payload (its address is the buffer's), filled piece by piece
    // below.
    message->payload = TakePayloadMemory(payload.size());
    message->payload.clear();
    message->payload.reserve(payload.size());
  }
  const absl::Status created = GlooCall("createUnboundBuffer", [&] {
    message->frame_buffer =
        context_->createUnboundBuffer(message->frame.data(), message->frame.size());
    if (separate) {
      message->payload_buffer =
          PayloadContext(peer, /*sending=*/true)
              .createUnboundBuffer(message->payload.data(), payload.size());
    }
  });
  if (!created.ok()) {
    LoseConnection(peer, created);
    return;
  }
  // Queued here, under the lock, so the order on the wire is the posting order; the
  // loop thread sends (loop_poster.h). The message stays in in_flight_ (and its
  // buffers with it) until gloo has sent it or, when it cannot, after the pairs close.
  gloo::transport::UnboundBuffer* frame = message->frame_buffer.get();
  gloo::transport::UnboundBuffer* separate_payload = message->payload_buffer.get();
  const size_t frame_bytes = message->frame.size();
  auto send = [this, peer, frame, separate_payload](uint64_t slot, size_t offset, size_t bytes) {
    return [=] {
      gloo::transport::UnboundBuffer* buffer = slot == kEnvelopeSlot ? frame : separate_payload;
      const absl::Status status = GlooCall("send", [&] { buffer->send(peer, slot, offset, bytes); });
      if (!status.ok()) {
        SendFailed(peer, frame, separate_payload,
                   absl::Status(status.code(), absl::StrCat("send of ", bytes, " bytes to rank ",
                                                            peer, ": ", status.message())));
      }
    };
  };
  poster_->Run(send(kEnvelopeSlot, 0, frame_bytes));
  // Each piece leaves as soon as it is copied: the loop thread writes one while this
  // thread copies the next.
  for (size_t offset = 0; separate && offset < payload.size(); offset += kPieceBytes) {
    const size_t bytes = std::min(kPieceBytes, payload.size() - offset);
    message->payload.insert(message->payload.end(), payload.begin() + offset,
                            payload.begin() + offset + bytes);
    poster_->Run(send(kPayloadSlot, offset, bytes));
  }
  in_flight_.push_back(std::move(message));
  changed_.SignalAll();
}

void Endpoint::PostReceive(int peer, gloo::transport::UnboundBuffer* buffer, uint64_t slot,
                           size_t bytes) {
  poster_->Run([this, peer, buffer, slot, bytes] {
    const absl::Status status =
        GlooCall("receive", [&] { buffer->recv(peer, slot, 0, bytes); });
    if (status.ok()) return;
    buffer->abortWaitRecv();  // its thread's wait ends, and the thread with it
    MutexLock lock(&mu_);
    if (!closing_) {
      LoseConnection(peer, absl::Status(status.code(),
                                        absl::StrCat("posting a receive of ", bytes,
                                                     " bytes from rank ", peer, ": ",
                                                     status.message())));
    }
  });
}

void Endpoint::SendFailed(int peer, gloo::transport::UnboundBuffer* frame,
                          gloo::transport::UnboundBuffer* payload, const absl::Status& status) {
  // Sticky: a later waitSend on them returns false at once, so the message is
  // abandoned rather than waited for.
  frame->abortWaitSend();
  if (payload != nullptr) payload->abortWaitSend();
  MutexLock lock(&mu_);
  if (!closing_) LoseConnection(peer, status);
}

absl::StatusOr<Request> Endpoint::PostSend(int peer, Tag tag, absl::Span<const std::byte> data,
                                           const Stamp& stamp) {
  if (peer < 0 || peer >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo rank ", rank_, ": send to peer ", peer, ", outside [0, ", size_, ")"));
  }
  MutexLock lock(&mu_);
  if (!aborted_.ok()) return aborted_;
  Op op;
  op.is_send = true;
  op.peer = peer;
  op.tag = tag;
  op.stamp = stamp;
  op.bytes = data.size();
  const uint64_t id = NewOp(std::move(op));
  Op& posted = ops_.at(id);  // std::map: stays put while other ops come and go.
  if (!peer_gone_[peer].ok()) {
    Finish(posted, peer_gone_[peer]);
    return Request{id};
  }
  Envelope envelope;
  envelope.kind = Kind::kData;
  envelope.tag = tag;
  envelope.stamp = stamp;
  envelope.bytes = data.size();
  envelope.send_id = id;
  envelope.wants_ack = data.size() > options_.eager_bytes;
  posted.waiting_ack = envelope.wants_ack;
  posted.posted_at = SteadyNanos();
  Post(peer, envelope, data);
  if (!envelope.wants_ack && !posted.done) Finish(posted, absl::OkStatus());  // Buffered.
  return Request{id};
}

absl::StatusOr<Request> Endpoint::PostRecv(int peer, Tag tag, absl::Span<std::byte> data,
                                           Combiner combiner, const Stamp& stamp) {
  if (peer < 0 || peer >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("gloo rank ", rank_, ": receive from peer ",
                                                   peer, ", outside [0, ", size_, ")"));
  }
  MutexLock lock(&mu_);
  if (!aborted_.ok()) return aborted_;
  Op op;
  op.peer = peer;
  op.tag = tag;
  op.stamp = stamp;
  op.bytes = data.size();
  op.recv_data = data.data();
  op.combiner = combiner;
  const uint64_t id = NewOp(std::move(op));
  Op& posted = ops_.at(id);
  auto& arrivals = unexpected_[peer];
  for (auto it = arrivals.begin(); it != arrivals.end(); ++it) {
    if (!Pairs(it->head.tag, it->head.stamp, tag, stamp)) continue;  // Conflicts pair, to fail.
    Arrival arrival = std::move(*it);
    arrivals.erase(it);
    Complete(posted, peer, arrival.head, arrival.payload);
    return Request{id};
  }
  if (!peer_gone_[peer].ok()) {
    Finish(posted, peer_gone_[peer]);
  } else {
    posted_[peer].push_back(id);
  }
  return Request{id};
}

// --- Matching ----------------------------------------------------------------------

void Endpoint::Complete(Op& op, int source, const Envelope& head,
                        absl::Span<const std::byte> payload) {
  Envelope answer;
  answer.tag = head.tag;
  answer.send_id = head.send_id;
  if (head.stamp.ConflictsWith(op.stamp)) {
    if (head.wants_ack) {
      answer.kind = Kind::kNack;
      answer.bytes = kStampConflict;
      answer.stamp = op.stamp;
      Post(source, answer, {});
    }
    Finish(op, StampMismatchError("gloo", StampMismatch{source, rank_, head.tag, head.stamp,
                                                        op.stamp}));
    return;
  }
  if (payload.size() != op.bytes) {
    if (head.wants_ack) {
      answer.kind = Kind::kNack;
      answer.bytes = op.bytes;
      Post(source, answer, {});
    }
    Finish(op, Mismatch(source, payload.size(), op.tag, rank_, op.bytes));
    return;
  }
  for (size_t offset = 0; offset < op.bytes; offset += kCombinePiece) {
    op.combiner.Apply(op.recv_data + offset, payload.data() + offset, offset,
                      std::min(kCombinePiece, op.bytes - offset));
  }
  if (head.wants_ack) {
    answer.kind = Kind::kAck;
    Post(source, answer, {});
  }
  Finish(op, absl::OkStatus());
}

void Endpoint::Deliver(int source, const Envelope& envelope, absl::Span<const std::byte> payload) {
  // A peer judged gone stays gone: what a stopped peer sends once it runs again is
  // not matched by later receives, which fail as the verdict said.
  if (!peer_gone_[source].ok()) return;
  switch (envelope.kind) {
    case Kind::kData: {
      auto& receives = posted_[source];
      for (auto it = receives.begin(); it != receives.end(); ++it) {
        Op& op = ops_.at(*it);
        if (!Pairs(envelope.tag, envelope.stamp, op.tag, op.stamp)) continue;
        receives.erase(it);
        Complete(op, source, envelope, payload);
        return;
      }
      unexpected_[source].push_back(
          Arrival{envelope, std::vector<std::byte>(payload.begin(), payload.end())});
      return;
    }
    case Kind::kAck:
    case Kind::kNack: {
      auto it = ops_.find(envelope.send_id);
      // A send that expired at its deadline was answered too late: nothing to do.
      if (it == ops_.end() || !it->second.waiting_ack || it->second.peer != source) return;
      Op& op = it->second;
      if (envelope.kind == Kind::kAck) {
        // Posted, moved, matched, answered: the bytes at the path's rate, and a round
        // trip (or more: the receive may have come late, which only slows the sample).
        // The pings' round trip can be longer than gloo's own (threads wake up for
        // them), so at most half the time is taken off. The receiver's own samples
        // need pieces it waited for (NoteArrival), which a busy receiver never has.
        const absl::Duration elapsed = absl::Nanoseconds(SteadyNanos() - op.posted_at);
        paths_.NoteTransfer(source, op.bytes,
                            std::max(elapsed - paths_.Estimate(source).round_trip, elapsed / 2));
        Finish(op, absl::OkStatus());
      } else if (envelope.bytes == kStampConflict) {
        Finish(op, StampMismatchError("gloo", StampMismatch{rank_, source, op.tag, op.stamp,
                                                            envelope.stamp}));
      } else {
        Finish(op, Mismatch(rank_, op.bytes, op.tag, source, envelope.bytes));
      }
      return;
    }
    case Kind::kWithdraw: {
      auto& arrivals = unexpected_[source];
      arrivals.erase(std::remove_if(arrivals.begin(), arrivals.end(),
                                    [&](const Arrival& arrival) {
                                      return arrival.head.send_id == envelope.send_id;
                                    }),
                     arrivals.end());
      return;
    }
    case Kind::kAbort: {
      const std::string reason(reinterpret_cast<const char*>(payload.data()), payload.size());
      FailPeer(source,
               absl::UnavailableError(
                   absl::StrCat("gloo: ", watch_.Describe(source), " aborted: ", reason)),
               PeerFault::kAborted);
      return;
    }
    case Kind::kBeat:
      // Heard already, by the receiver thread; a ping is echoed.
      if (envelope.send_id != 0) {
        Envelope echo;
        echo.kind = Kind::kEcho;
        echo.send_id = envelope.send_id;
        Post(source, echo, {});
      }
      return;
    case Kind::kEcho:
      // This rank's clock when it pinged: the round trip, frames in front of the ping
      // or its echo included (the meter keeps the shortest).
      paths_.NoteRoundTrip(source, absl::Nanoseconds(SteadyNanos() -
                                                      static_cast<int64_t>(envelope.send_id)));
      if (++echoes_[source] < kStartPings) Ping(source);
      return;
    case Kind::kClose:
      // Closing is no failure of the peer's: not recorded. Its requests fail all the
      // same, as nothing more comes from it.
      FailPeer(source,
               absl::UnavailableError(absl::StrCat(
                   "gloo rank ", rank_, ": ", watch_.Describe(source), " closed its endpoint")));
      return;
  }
}

// --- Failure -----------------------------------------------------------------------

void Endpoint::FailPeer(int peer, const absl::Status& status, std::optional<PeerFault> fault) {
  changed_.SignalAll();  // a closing endpoint waits for its peers to be gone
  if (peer_gone_[peer].ok()) {
    peer_gone_[peer] = status;
    // After this endpoint aborted, a peer's end is an echo of that, not a cause; once
    // it is closing, peers that close too (a peer that had this one's goodbye sends
    // none back) are no news.
    if (fault.has_value() && aborted_.ok() && !leaving_) {
      RecordPeerFailure(
          {watch_.identity(peer), *fault, absl::Now(), std::string(status.message())});
    }
  }
  posted_[peer].clear();
  for (auto& [id, op] : ops_) {
    if (op.peer == peer && !op.done) Finish(op, peer_gone_[peer]);
  }
  // gloo never completes nor fails a send that was queued on a pair when it broke
  // (its pair signals the error to pinned buffers only: a send racing the peer's
  // close, a goodbye or a beat, waited forever), so the completion thread stops
  // waiting for one to a gone peer.
  if (waiting_on_[size_] != nullptr && in_flight_.front()->peer == peer) {
    waiting_on_[size_]->abortWaitSend();
    if (waiting_on_[size_ + 1] != nullptr) waiting_on_[size_ + 1]->abortWaitSend();
  }
}

void Endpoint::LoseConnection(int peer, const absl::Status& gloo_error) {
  // After a goodbye, an abort or a verdict of silence the end of the connection is
  // expected, and no news.
  if (!peer_gone_[peer].ok()) return;
  FailPeer(peer,
           absl::Status(gloo_error.code(),
                        absl::StrCat("gloo rank ", rank_, ": connection to ", watch_.Describe(peer),
                                     " lost: ", gloo_error.message())),
           PeerFault::kDied);
}

void Endpoint::Abort(const absl::Status& reason) {
  MutexLock lock(&mu_);
  if (!aborted_.ok()) return;
  aborted_ =
      reason.ok() ? absl::AbortedError(absl::StrCat("gloo rank ", rank_, ": aborted")) : reason;
  const std::string message(aborted_.message());
  Envelope abort;
  abort.kind = Kind::kAbort;
  abort.bytes = message.size();
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    Post(peer, abort,
         absl::MakeConstSpan(reinterpret_cast<const std::byte*>(message.data()), message.size()));
  }
  for (auto& receives : posted_) receives.clear();
  for (auto& [id, op] : ops_) {
    if (!op.done) Finish(op, aborted_);
  }
}

// --- Waiting -----------------------------------------------------------------------

absl::Status Endpoint::Wait(absl::Span<const Request> requests, absl::Time deadline) {
  MutexLock lock(&mu_);
  for (const Request& request : requests) {
    if (ops_.find(request.id) == ops_.end()) {
      return absl::NotFoundError(absl::StrCat("gloo rank ", rank_, ": unknown request ", request.id,
                                              " (never posted, or already waited)"));
    }
  }
  auto all_done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const Request& request : requests) {
      if (!ops_.at(request.id).done) return false;
    }
    return true;
  };
  while (!all_done()) {
    if (!finished_.WaitWithDeadline(&mu_, deadline)) break;
  }
  absl::Status result;
  for (const Request& request : requests) {
    auto it = ops_.find(request.id);
    if (it == ops_.end()) continue;  // Named twice.
    Op& op = it->second;
    if (!op.done) {
      if (op.is_send) {
        // gloo cannot take the bytes back: tell the receiver to drop them unmatched.
        Envelope withdraw;
        withdraw.kind = Kind::kWithdraw;
        withdraw.tag = op.tag;
        withdraw.bytes = op.bytes;
        withdraw.send_id = request.id;
        Post(op.peer, withdraw, {});
      } else {
        auto& receives = posted_[op.peer];
        receives.erase(std::remove(receives.begin(), receives.end(), request.id), receives.end());
      }
      std::string message =
          absl::StrCat("gloo rank ", rank_, ": ", op.Describe(), " still pending at its deadline");
      if (op.peer != rank_) {
        absl::StrAppend(&message, "; rank ", op.peer, " is ",
                        DescribePeer(watch_.identity(op.peer)));
      }
      Finish(op, absl::DeadlineExceededError(message));
    }
    if (result.ok() && !op.status.ok()) result = op.status;
    ops_.erase(it);
  }
  return result;
}

absl::StatusOr<bool> Endpoint::TryWait(absl::Span<const Request> requests, absl::Time until) {
  MutexLock lock(&mu_);
  for (size_t i = 0; i < requests.size(); ++i) {
    const bool twice = NamedBefore(requests, i);
    if (twice || ops_.find(requests[i].id) == ops_.end()) {
      return absl::NotFoundError(absl::StrCat("gloo rank ", rank_, ": request ", requests[i].id,
                                              " is unknown, already waited or named twice"));
    }
  }
  // With nothing named, only a Wake or `until` ends the wait.
  auto all_done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (requests.empty()) return false;
    for (const Request& request : requests) {
      if (!ops_.at(request.id).done) return false;
    }
    return true;
  };
  while (!all_done()) {
    if (woken_) {
      woken_ = false;
      return false;
    }
    // Requests move on gloo's and this endpoint's threads: nothing to do but sleep.
    if (!finished_.WaitWithDeadline(&mu_, until) && !all_done()) return false;
  }
  absl::Status result;
  for (const Request& request : requests) {
    auto it = ops_.find(request.id);
    if (result.ok() && !it->second.status.ok()) result = it->second.status;
    ops_.erase(it);
  }
  if (!result.ok()) return result;
  return true;
}

void Endpoint::Wake() {
  MutexLock lock(&mu_);
  woken_ = true;
  finished_.SignalAll();
}

bool Endpoint::SetFinishListener(std::function<void()> listener) {
  MutexLock lock(&mu_);
  finish_listener_ = std::move(listener);
  return true;
}

}  // namespace gloo_internal
}  // namespace loom
