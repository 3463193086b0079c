#include "collectives/transport/gloo/internal/endpoint.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/transport/gloo/internal/gloo_call.h"

namespace loom {
namespace gloo_internal {
namespace {

// gloo closes every pair of a context when one of its waits times out, so the
// threads' waits get none that could expire: they end when closing aborts them.
constexpr std::chrono::milliseconds kForever = std::chrono::hours(24 * 365);

absl::Status Mismatch(int source, size_t sent, Tag tag, int destination, size_t posted) {
  return absl::FailedPreconditionError(
      absl::StrCat("rank ", source, " sent ", sent, " bytes with tag ", tag, " to rank ",
                   destination, ", which posted a receive of ", posted, " bytes"));
}

}  // namespace

std::string Endpoint::Op::Describe() const {
  return absl::StrCat(is_send ? "send to rank " : "receive from rank ", peer, " (tag ", tag, ", ",
                      bytes, " bytes)");
}

Endpoint::Endpoint(std::shared_ptr<gloo::Context> context, const GlooOptions& options)
    : context_(std::move(context)), options_(options), rank_(options.rank), size_(options.size) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    posted_.resize(size_);
    unexpected_.resize(size_);
    peer_gone_.assign(size_, absl::OkStatus());
    waiting_on_.assign(size_ + 2, nullptr);
  }
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_) threads_.emplace_back([this, peer] { ReceiveLoop(peer); });
  }
  threads_.emplace_back([this] { SendLoop(); });
}

Endpoint::~Endpoint() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Acknowledgements, buffered sends and abort notices queued last still leave.
    auto flushed = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return outgoing_.empty() && !sending_;
    };
    changed_.wait_for(lock, absl::ToChronoNanoseconds(options_.close_grace), flushed);
    closing_ = true;
    changed_.notify_all();
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
  // Closing the pairs tells the peers' receivers that this rank is gone.
  (void)GlooCall("closeConnections", [&] { context_->closeConnections(); });
}

bool Endpoint::Track(size_t thread, gloo::transport::UnboundBuffer* buffer) {
  std::unique_lock<std::mutex> lock(mu_);
  if (buffer != nullptr && closing_) return false;
  waiting_on_[thread] = buffer;
  return true;
}

// --- The threads -------------------------------------------------------------------

absl::StatusOr<bool> Endpoint::ReceiveOne(int peer, gloo::transport::UnboundBuffer& envelope_buffer,
                                          const EnvelopeBytes& envelope_bytes, Envelope* envelope,
                                          std::vector<std::byte>* payload) {
  if (!Track(peer, &envelope_buffer)) return false;
  bool completed = false;
  absl::Status status = GlooCall(absl::StrCat("receive of an envelope from rank ", peer), [&] {
    envelope_buffer.recv(peer, kEnvelopeSlot, 0, kEnvelopeBytes);
    completed = envelope_buffer.waitRecv(nullptr, kForever);
  });
  Track(peer, nullptr);
  if (!status.ok()) return status;
  if (!completed) return false;
  absl::StatusOr<Envelope> decoded = Decode(envelope_bytes);
  if (!decoded.ok()) return decoded.status();
  *envelope = *decoded;
  payload->clear();
  if (!envelope->HasPayload()) return true;
  payload->resize(envelope->bytes);
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
  status = GlooCall("createUnboundBuffer", [&] {
    buffer = context_->createUnboundBuffer(payload->data(), payload->size());
  });
  if (!status.ok()) return status;
  if (!Track(peer, buffer.get())) return false;
  status = GlooCall(absl::StrCat("receive of ", payload->size(), " bytes from rank ", peer), [&] {
    buffer->recv(peer, kPayloadSlot, 0, payload->size());
    completed = buffer->waitRecv(nullptr, kForever);
  });
  Track(peer, nullptr);
  if (!status.ok()) return status;
  return completed;
}

void Endpoint::ReceiveLoop(int peer) {
  EnvelopeBytes envelope_bytes{};
  std::unique_ptr<gloo::transport::UnboundBuffer> envelope_buffer;
  absl::Status status = GlooCall("createUnboundBuffer", [&] {
    envelope_buffer = context_->createUnboundBuffer(envelope_bytes.data(), kEnvelopeBytes);
  });
  for (;;) {
    Envelope envelope;
    std::vector<std::byte> payload;
    absl::StatusOr<bool> received = false;
    if (status.ok()) {
      received = ReceiveOne(peer, *envelope_buffer, envelope_bytes, &envelope, &payload);
      if (!received.ok()) status = received.status();
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (closing_ || (status.ok() && !*received)) return;
    if (!status.ok()) {
      FailPeer(peer, absl::Status(status.code(),
                                  absl::StrCat("gloo rank ", rank_, ": connection to rank ", peer,
                                               " lost: ", status.message())));
      return;
    }
    Deliver(peer, envelope, std::move(payload));
  }
}

absl::Status Endpoint::SendOne(Outgoing& message) {
  std::unique_ptr<gloo::transport::UnboundBuffer> envelope_buffer, payload_buffer;
  absl::Status status = GlooCall("createUnboundBuffer", [&] {
    envelope_buffer = context_->createUnboundBuffer(message.envelope.data(), kEnvelopeBytes);
    if (!message.payload.empty()) {
      payload_buffer =
          context_->createUnboundBuffer(message.payload.data(), message.payload.size());
    }
  });
  if (!status.ok()) return status;
  if (!Track(size_, envelope_buffer.get()) || !Track(size_ + 1, payload_buffer.get())) {
    Track(size_, nullptr);
    return absl::OkStatus();  // Closing: the message is dropped.
  }
  status = GlooCall(
      absl::StrCat("send of ", message.payload.size(), " bytes to rank ", message.peer), [&] {
        envelope_buffer->send(message.peer, kEnvelopeSlot, 0, kEnvelopeBytes);
        if (payload_buffer != nullptr) {
          payload_buffer->send(message.peer, kPayloadSlot, 0, message.payload.size());
        }
        if (envelope_buffer->waitSend(nullptr, kForever) && payload_buffer != nullptr) {
          payload_buffer->waitSend(nullptr, kForever);
        }
      });
  Track(size_, nullptr);
  Track(size_ + 1, nullptr);
  return status;
}

void Endpoint::SendLoop() {
  for (;;) {
    Outgoing message;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return closing_ || !outgoing_.empty();
      };
      changed_.wait(lock, ready);
      if (closing_) return;
      message = std::move(outgoing_.front());
      outgoing_.pop_front();
      if (!peer_gone_[message.peer].ok()) continue;
      sending_ = true;
    }
    const absl::Status status = SendOne(message);
    std::unique_lock<std::mutex> lock(mu_);
    sending_ = false;
    changed_.notify_all();
    if (!status.ok() && !closing_) {
      FailPeer(message.peer, absl::Status(status.code(),
                                          absl::StrCat("gloo rank ", rank_, ": connection to rank ",
                                                       message.peer, " lost: ", status.message())));
    }
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
  changed_.notify_all();
}

void Endpoint::Post(int peer, const Envelope& envelope, std::vector<std::byte> payload) {
  if (peer == rank_) {
    Deliver(rank_, envelope, std::move(payload));
    return;
  }
  if (!peer_gone_[peer].ok()) return;
  Outgoing message;
  message.peer = peer;
  message.envelope = Encode(envelope);
  message.payload = std::move(payload);
  outgoing_.push_back(std::move(message));
  changed_.notify_all();
}

absl::StatusOr<Request> Endpoint::Send(int peer, Tag tag, absl::Span<const std::byte> data) {
  if (peer < 0 || peer >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo rank ", rank_, ": send to peer ", peer, ", outside [0, ", size_, ")"));
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!aborted_.ok()) return aborted_;
  Op op;
  op.is_send = true;
  op.peer = peer;
  op.tag = tag;
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
  envelope.bytes = data.size();
  envelope.send_id = id;
  envelope.wants_ack = data.size() > options_.eager_bytes;
  posted.waiting_ack = envelope.wants_ack;
  Post(peer, envelope, std::vector<std::byte>(data.begin(), data.end()));
  if (!envelope.wants_ack && !posted.done) Finish(posted, absl::OkStatus());  // Buffered.
  return Request{id};
}

absl::StatusOr<Request> Endpoint::RecvCombine(int peer, Tag tag, absl::Span<std::byte> data,
                                              Combiner combiner) {
  if (peer < 0 || peer >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("gloo rank ", rank_, ": receive from peer ",
                                                   peer, ", outside [0, ", size_, ")"));
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (!aborted_.ok()) return aborted_;
  Op op;
  op.peer = peer;
  op.tag = tag;
  op.bytes = data.size();
  op.recv_data = data.data();
  op.combiner = combiner;
  const uint64_t id = NewOp(std::move(op));
  Op& posted = ops_.at(id);
  auto& arrivals = unexpected_[peer];
  for (auto it = arrivals.begin(); it != arrivals.end(); ++it) {
    if (it->tag != tag) continue;
    Arrival arrival = std::move(*it);
    arrivals.erase(it);
    Complete(posted, peer, arrival);
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

void Endpoint::Complete(Op& op, int source, Arrival& arrival) {
  Envelope answer;
  answer.tag = arrival.tag;
  answer.send_id = arrival.send_id;
  if (arrival.payload.size() != op.bytes) {
    if (arrival.wants_ack) {
      answer.kind = Kind::kNack;
      answer.bytes = op.bytes;
      Post(source, answer, {});
    }
    Finish(op, Mismatch(source, arrival.payload.size(), op.tag, rank_, op.bytes));
    return;
  }
  for (size_t offset = 0; offset < op.bytes; offset += kCombinePiece) {
    op.combiner.Apply(op.recv_data + offset, arrival.payload.data() + offset, offset,
                      std::min(kCombinePiece, op.bytes - offset));
  }
  if (arrival.wants_ack) {
    answer.kind = Kind::kAck;
    Post(source, answer, {});
  }
  Finish(op, absl::OkStatus());
}

void Endpoint::Deliver(int source, const Envelope& envelope, std::vector<std::byte> payload) {
  switch (envelope.kind) {
    case Kind::kData: {
      Arrival arrival;
      arrival.tag = envelope.tag;
      arrival.send_id = envelope.send_id;
      arrival.wants_ack = envelope.wants_ack;
      arrival.payload = std::move(payload);
      auto& receives = posted_[source];
      for (auto it = receives.begin(); it != receives.end(); ++it) {
        Op& op = ops_.at(*it);
        if (op.tag != envelope.tag) continue;
        receives.erase(it);
        Complete(op, source, arrival);
        return;
      }
      unexpected_[source].push_back(std::move(arrival));
      return;
    }
    case Kind::kAck:
    case Kind::kNack: {
      auto it = ops_.find(envelope.send_id);
      // A send that expired at its deadline was answered too late: nothing to do.
      if (it == ops_.end() || !it->second.waiting_ack || it->second.peer != source) return;
      Op& op = it->second;
      Finish(op, envelope.kind == Kind::kAck
                     ? absl::OkStatus()
                     : Mismatch(rank_, op.bytes, op.tag, source, envelope.bytes));
      return;
    }
    case Kind::kWithdraw: {
      auto& arrivals = unexpected_[source];
      arrivals.erase(std::remove_if(arrivals.begin(), arrivals.end(),
                                    [&](const Arrival& arrival) {
                                      return arrival.send_id == envelope.send_id;
                                    }),
                     arrivals.end());
      return;
    }
    case Kind::kAbort: {
      const std::string reason(reinterpret_cast<const char*>(payload.data()), payload.size());
      FailPeer(source, absl::UnavailableError(absl::StrCat("rank ", source, " aborted: ", reason)));
      return;
    }
  }
}

// --- Failure -----------------------------------------------------------------------

void Endpoint::FailPeer(int peer, const absl::Status& status) {
  if (peer_gone_[peer].ok()) peer_gone_[peer] = status;
  posted_[peer].clear();
  for (auto& [id, op] : ops_) {
    if (op.peer == peer && !op.done) Finish(op, peer_gone_[peer]);
  }
}

void Endpoint::Abort(const absl::Status& reason) {
  std::unique_lock<std::mutex> lock(mu_);
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
         std::vector<std::byte>(
             reinterpret_cast<const std::byte*>(message.data()),
             reinterpret_cast<const std::byte*>(message.data()) + message.size()));
  }
  for (auto& receives : posted_) receives.clear();
  for (auto& [id, op] : ops_) {
    if (!op.done) Finish(op, aborted_);
  }
}

// --- Waiting -----------------------------------------------------------------------

absl::Status Endpoint::Wait(absl::Span<const Request> requests, absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
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
  if (deadline == absl::InfiniteFuture()) {
    changed_.wait(lock, all_done);
  } else {
    changed_.wait_until(lock, absl::ToChronoTime(deadline), all_done);
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
      Finish(op, absl::DeadlineExceededError(absl::StrCat("gloo rank ", rank_, ": ", op.Describe(),
                                                          " still pending at its deadline")));
    }
    if (result.ok() && !op.status.ok()) result = op.status;
    ops_.erase(it);
  }
  return result;
}

}  // namespace gloo_internal
}  // namespace loom
