#include "collectives/transport/gloo/internal/endpoint.h"

#include <algorithm>
#include <chrono>
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

void Endpoint::Retire(Retired retired) {
  MutexLock lock(&mu_);
  retired_.push_back(std::move(retired));
}

absl::StatusOr<bool> Endpoint::ReceivePayload(int peer, const Envelope& envelope,
                                              std::vector<std::byte>* payload) {
  // The memory is kept from one payload to the next (ReceiveLoop): a fresh one is
  // zeroed and faulted in page by page, which cost a 32 MiB receive about 10 ms.
  const size_t bytes = envelope.bytes;
  if (payload->size() < bytes) payload->resize(bytes);
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  absl::Status status = GlooCall("createUnboundBuffer", [&] {
    buffer = PayloadContext(peer, /*sending=*/false).createUnboundBuffer(payload->data(), bytes);
  });
  if (!status.ok()) return status;
  if (!Track(peer, buffer.get())) return false;
  bool completed = false;
  const int64_t posted_at = SteadyNanos();
  PostReceive(peer, buffer.get(), kPayloadSlot, bytes);
  status = GlooCall(absl::StrCat("receive of ", bytes, " bytes from rank ", peer),
                    [&] { completed = buffer->waitRecv(nullptr, kForever); });
  Track(peer, nullptr);
  if (status.ok() && completed) {
    // The receive's "ready" went to the peer and the payload came back: a round trip,
    // then the bytes at the path's rate. The pings' round trip can be longer than
    // gloo's own (threads wake up for them), so at most half the time is taken off.
    const absl::Duration elapsed = absl::Nanoseconds(SteadyNanos() - posted_at);
    paths_.NoteTransfer(peer, bytes,
                        std::max(elapsed - paths_.Estimate(peer).round_trip, elapsed / 2));
  }
  if (!status.ok() || !completed) {
    // Still posted, or signalled by the loop thread: kept with its memory (Retired).
    Retired retired;
    retired.memory.push_back(std::move(*payload));
    retired.buffers.push_back(std::move(buffer));
    Retire(std::move(retired));
    return status.ok() ? absl::StatusOr<bool>(false) : status;
  }
  watch_.Heard(peer);
  return true;
}

void Endpoint::ReceiveLoop(int peer) {
  // Frames, each with a receive posted; gloo fills them in posting order, so the
  // front of `order` holds the next message from `peer`, and a frame that was read
  // goes to its back. They start at kLeastFramesPosted and grow with the path
  // (FramesWanted). They outlive the thread (Retired).
  Retired posted;
  std::vector<std::vector<std::byte>>& frames = posted.memory;
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>>& buffers = posted.buffers;
  std::deque<size_t> order;
  auto post_new_frame = [&] {
    absl::Status created = GlooCall("createUnboundBuffer", [&] {
      frames.emplace_back(kFrameBytes);
      buffers.push_back(context_->createUnboundBuffer(frames.back().data(), kFrameBytes));
    });
    if (!created.ok()) return created;
    PostReceive(peer, buffers.back().get(), kEnvelopeSlot, kFrameBytes);
    order.push_back(frames.size() - 1);
    return absl::OkStatus();
  };
  absl::Status status;
  for (int i = 0; i < kLeastFramesPosted && status.ok(); ++i) status = post_new_frame();
  std::vector<std::byte> separate;  // a payload too large for the frame, kept for the next
  // A train of data frames that came in back to back, each one after the first
  // waited for (so the link brought it, not a queue in front of this thread): the
  // bytes after the first over the time since it came are a rate sample. (The
  // first's own time may hold the sender's pause before it.)
  int64_t last_arrival = 0;
  int64_t train_began = 0;  // 0: no train
  size_t train_bytes = 0;
  for (;;) {
    const size_t i = order.front();
    if (separate.size() > kKeptPayloadBytes) std::vector<std::byte>().swap(separate);
    Envelope envelope;
    bool received = false;
    const int64_t wait_began = SteadyNanos();
    if (status.ok() && Track(peer, buffers[i].get())) {
      status = GlooCall(absl::StrCat("receive of a frame from rank ", peer),
                        [&] { received = buffers[i]->waitRecv(nullptr, kForever); });
      Track(peer, nullptr);
    }
    const int64_t arrived = SteadyNanos();
    if (status.ok() && received) {
      watch_.Heard(peer);  // Every frame counts as a beat, whatever its kind.
      absl::StatusOr<Envelope> decoded = Decode(frames[i]);
      status = decoded.status();
      if (decoded.ok()) envelope = *decoded;
    }
    const bool data_frame =
        status.ok() && received && envelope.kind == Kind::kData && envelope.PayloadInline();
    if (data_frame && train_began != 0 && 2 * (arrived - wait_began) >= arrived - last_arrival) {
      train_bytes += FrameBytes(envelope);
      if (train_bytes >= PathMeter::kMinRateSampleBytes) {
        paths_.NoteTransfer(peer, train_bytes, absl::Nanoseconds(arrived - train_began));
        train_began = arrived;
        train_bytes = 0;
      }
    } else {
      train_began = data_frame ? arrived : 0;
      train_bytes = 0;
    }
    last_arrival = arrived;
    absl::Span<const std::byte> payload;
    if (status.ok() && received) {
      if (envelope.PayloadInline()) {
        payload = InlinePayload(frames[i], envelope);
      } else if (envelope.HasPayload()) {
        absl::StatusOr<bool> got = ReceivePayload(peer, envelope, &separate);
        status = got.status();
        received = got.ok() && *got;
        payload = absl::MakeConstSpan(separate.data(), envelope.bytes);
        train_began = 0;
        train_bytes = 0;
      }
    }
    {
      MutexLock lock(&mu_);
      const bool ended = closing_ || !status.ok() || !received;
      if (!closing_ && !status.ok()) LoseConnection(peer, status);
      if (ended) {
        retired_.push_back(std::move(posted));
        return;
      }
      // A posted receive takes the payload straight from the frame.
      Deliver(peer, envelope, payload);
    }
    // The frame is read: it goes back to the end of the line of posted receives, and
    // frames are added when the path has grown past them.
    order.pop_front();
    PostReceive(peer, buffers[i].get(), kEnvelopeSlot, kFrameBytes);
    order.push_back(i);
    const int wanted = FramesWanted(paths_.Estimate(peer));
    while (status.ok() && static_cast<int>(frames.size()) < wanted) status = post_new_frame();
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
          if (sent && message->payload_buffer != nullptr) {
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
    message->payload = TakePayloadMemory(payload.size());
    message->payload.assign(payload.begin(), payload.end());
  }
  const absl::Status created = GlooCall("createUnboundBuffer", [&] {
    message->frame_buffer =
        context_->createUnboundBuffer(message->frame.data(), message->frame.size());
    if (separate) {
      message->payload_buffer =
          PayloadContext(peer, /*sending=*/true)
              .createUnboundBuffer(message->payload.data(), message->payload.size());
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
  const size_t payload_bytes = message->payload.size();
  poster_->Run([this, peer, frame, separate_payload, frame_bytes, payload_bytes] {
    const absl::Status status = GlooCall("send", [&] {
      frame->send(peer, kEnvelopeSlot, 0, frame_bytes);
      if (separate_payload != nullptr) {
        separate_payload->send(peer, kPayloadSlot, 0, payload_bytes);
      }
    });
    if (!status.ok()) {
      SendFailed(peer, frame, separate_payload,
                 absl::Status(status.code(), absl::StrCat("send of ", frame_bytes + payload_bytes,
                                                          " bytes to rank ", peer, ": ",
                                                          status.message())));
    }
  });
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

}  // namespace gloo_internal
}  // namespace loom
