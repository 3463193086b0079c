#include "collectives/transport/mpi/internal/endpoint.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/transport/mpi/internal/mpi_call.h"
#include "core/clock.h"
#include "core/idle_wait.h"
#include "core/mutex.h"
#include "core/status_macros.h"

namespace loom {
namespace mpi_internal {
namespace {

// The most bytes one MPI data message carries (MPI counts are ints; the options
// keep chunk_bytes within it, and a clear to send naming more is refused).
constexpr size_t kMaxPiece = size_t{1} << 30;
// The fewest pieces in flight at once: a combining receive's (each in a buffer of
// its own) and a peer's send window's; both hold up to kSendWindowBytes of pieces
// (WindowPieces), so small pieces do not make a small window.
constexpr size_t kWindow = 4;
// Bytes of data in flight to one peer at once, over all the sends to it (at least
// kWindow pieces; PumpSends). Per peer, not per send: a caller with several large
// sends to one peer posted at once (direct's chunks) had a window each. Not more:
// Open MPI's TCP BTL sends a pair's two directions over one socket, and what one
// direction has queued delays the other's rendezvous replies behind it. With 16 MB
// in flight, one in three 32 MiB exchanges between two hosts at 2 Gbit/s took two
// link times instead of one (both directions in turn); with 1 MiB none did, and 1 MiB
// is still many times a 2 Gbit/s link's bandwidth-delay product (about 50 KB).
constexpr size_t kSendWindowBytes = size_t{1} << 20;
// Idle slot bytes an endpoint keeps for the next transfer (page faults and
// zero-fills of fresh ones cost more than the copy into them).
constexpr size_t kPooledSlotBytes = size_t{64} << 20;
// The smallest piece of a copy receive (a combining receive's is chunk_bytes). Was
// 4 MiB, which with the window above kept 16 MB in flight; 256 KiB pieces measured
// the same between hosts and on one host (vader).
constexpr size_t kCopyPiece = size_t{256} << 10;
// The largest piece to a peer on another host: within Open MPI's TCP eager limit
// (btl_tcp_eager_limit, 64 KiB with Open MPI's own header; MPICH's is 128 KiB), so
// that MPI sends it at once. A larger piece is a rendezvous inside MPI as well (its
// request to send, the receiver's answer) on top of this endpoint's own, whose
// "clear to send" has already made sure the receive is posted: one more round trip
// per piece. Between two hosts at 2 Gbit/s with 2 ms each way, 16 MiB all-reduces
// went from 0.56-0.72 of the link (direct, ring with 1 MiB chunks) to 0.84-0.92;
// with no delay they stayed at 0.96 (collectives/README.md, "A long link").
// Pieces inside a host keep their size: vader copies large ones in one go.
constexpr size_t kAcrossHostsPiece = size_t{60} << 10;
// Envelopes handled per poll, so one busy peer cannot starve the data requests.
constexpr int kEnvelopesPerPoll = 64;

// Every endpoint of the process (ProgressAll moves them all).
std::vector<Endpoint*>& Registry() ABSL_EXCLUSIVE_LOCKS_REQUIRED(MpiLock()) {
  static auto* const endpoints = new std::vector<Endpoint*>;
  return *endpoints;
}

absl::Status Mismatch(int source, size_t sent, Tag tag, int destination, size_t posted) {
  return absl::FailedPreconditionError(absl::StrCat("rank ", source, " sent ", sent,
                                                    " bytes with tag ", tag, " to rank ",
                                                    destination, ", which posted a receive of ",
                                                    posted, " bytes"));
}

int64_t Nanos(absl::Time t) {
  if (t == absl::InfiniteFuture()) return std::numeric_limits<int64_t>::max();
  if (t == absl::InfinitePast()) return std::numeric_limits<int64_t>::min();
  return absl::ToUnixNanos(t);
}

// IdleWait::kNap: spin this long after the last event, then nap this long between
// polls. A poll every 50 us keeps 12.5 KB in flight at 2 Gbit/s, far below what a
// socket buffers, so the link stays busy.
constexpr int64_t kNapAfterNanos = 20'000;
constexpr long kNapNanos = 50'000;
// IdleWait::kYield: spin at most this long (and spin_iterations polls) after the
// last event before yielding. An MPI poll over TCP is a system call or two, so 4000
// polls alone would spin for milliseconds on a core a peer rank may need.
constexpr int64_t kSpinNanos = 100'000;

void Relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

std::string Endpoint::Describe(const Op& op) const {
  return absl::StrCat(op.is_send ? "send to " : "receive from ", watch_.Describe(op.peer), " (tag ",
                      op.tag, ", ", op.bytes, " bytes)");
}

namespace {

int RankOf(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

}  // namespace

Endpoint::Endpoint(MPI_Comm comm, uint64_t epoch, int tag_ub, const MpiTransportOptions& options,
                   std::unique_ptr<NativeCollectives> native, std::vector<PeerIdentity> peers)
    : comm_(comm),
      epoch_(epoch),
      tag_ub_(tag_ub),
      options_(options),
      native_(std::move(native)),
      watch_("mpi", RankOf(comm), peers, options.heartbeat_timeout) {
  {
    MutexLock lock(&MpiLock());
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    across_hosts_.assign(size_, false);
    const std::string& own_host = rank_ < static_cast<int>(peers.size()) ? peers[rank_].host : "";
    for (int peer = 0; peer < size_ && peer < static_cast<int>(peers.size()); ++peer) {
      // An unknown host keeps the pieces as they were.
      across_hosts_[peer] = !own_host.empty() && !peers[peer].host.empty() &&
                            peers[peer].host != own_host;
    }
    paths_ = std::make_unique<PathMeter>(size_);
    posted_.resize(size_);
    unexpected_.resize(size_);
    next_data_tag_.assign(size_, 0);
    sending_.resize(size_);
    send_bytes_in_flight_.assign(size_, 0);
    send_pieces_in_flight_.assign(size_, 0);
    peer_gone_.assign(size_, absl::OkStatus());
    peer_closed_.assign(size_, false);
    Registry().push_back(this);
  }
  if (!watch_.judging() || size_ == 1) return;  // Nobody listens for beats.
  Envelope beat;
  beat.epoch = epoch_;
  beat.kind = Kind::kBeat;
  beat_message_ = std::make_unique<std::vector<std::byte>>();
  Encode(beat, {}, *beat_message_);
  beat_requests_.assign(size_, MPI_REQUEST_NULL);
  beater_ = std::thread([this] { BeatLoop(); });
}

Endpoint::~Endpoint() {
  if (beater_.joinable()) {
    {
      MutexLock lock(&beat_mu_);
      beat_stop_ = true;
    }
    beat_wake_.SignalAll();
    beater_.join();
  }
  MutexLock lock(&MpiLock());
  auto& registry = Registry();
  registry.erase(std::remove(registry.begin(), registry.end(), this), registry.end());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // Too late for MPI: leave the rest to the process's exit.
  // The peers stop expecting beats from this endpoint (a peer still waiting on it
  // runs into its own deadline, as the Transport contract has it).
  if (broken_.ok()) {
    Envelope close;
    close.kind = Kind::kClose;
    for (int peer = 0; peer < size_; ++peer) {
      if (peer != rank_ && peer_gone_[peer].ok() && !PostControl(peer, close).ok()) break;
    }
  }
  bool beat_pending = false;
  for (MPI_Request& request : beat_requests_) {
    if (request == MPI_REQUEST_NULL) continue;
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (!done) {
      MPI_Request_free(&request);
      beat_pending = true;
    }
  }
  // MPI may still read a beat that has not left: its bytes stay allocated.
  if (beat_pending) beat_message_.release();
  // A broken endpoint's data receives were cancelled when it broke, or wait on a
  // peer that cannot send: they stay MPI's. (Open MPI 4.1's ob1 crashed cancelling
  // such a receive again, matched to a peer across a cut link.)
  for (size_t j = 0; j < requests_.size() && broken_.ok(); ++j) {
    if (in_flight_[j].what == InFlight::What::kDataRecv) MPI_Cancel(&requests_[j]);
  }
  // Control sends are small and buffered by MPI; give everything a moment to land.
  const int64_t until = NowNanos() + 100'000'000;
  while (!requests_.empty() && NowNanos() < until) {
    if (!TestRequests().ok()) break;
  }
  for (size_t j = 0; j < requests_.size(); ++j) {
    MPI_Request_free(&requests_[j]);
    // MPI may still read a control message's bytes: they stay allocated.
    if (in_flight_[j].buffer != nullptr) in_flight_[j].buffer.release();
  }
  // So may it a data piece's: the slots of an op MPI still holds stay allocated too.
  for (auto& [id, op] : ops_) {
    if (op.in_flight == 0) continue;
    for (auto& slot : op.slots) slot.release();
  }
  // The duplicate communicator is never freed: a peer may still send to this closed
  // endpoint (an abort notice, a withdrawal), and Open MPI hands a message for a freed
  // communicator to the next one that reuses its id, where its per-pair sequence
  // number derails matching (a collective on the new communicator hung so in the
  // conformance suite). A kept communicator just holds such messages until
  // MPI_Finalize.
}

// --- Beats -------------------------------------------------------------------------

void Endpoint::BeatLoop() {
  const auto interval = absl::ToChronoNanoseconds(watch_.interval());
  MutexLock lock(&beat_mu_);
  while (!beat_stop_) {
    beat_mu_.Unlock();
    SendBeats();
    beat_mu_.Lock();
    const auto next = std::chrono::steady_clock::now() + interval;
    while (!beat_stop_) {
      if (!beat_wake_.WaitUntil(&beat_mu_, next)) break;
    }
  }
}

void Endpoint::SendBeats() {
  // Under MpiLock like every other MPI call of the transport: Open MPI's shared-memory
  // path synchronizes its threads in ways ThreadSanitizer cannot see, and a beat takes
  // the lock for microseconds. The price: a rank inside a native collective (which
  // holds the lock while MPI blocks) does not beat; those have no deadline either.
  MutexLock lock(&MpiLock());
  const int bytes = static_cast<int>(beat_message_->size());
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    MPI_Request& request = beat_requests_[peer];
    if (request != MPI_REQUEST_NULL) {
      int done = 0;
      if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) continue;
      // A beat that has not left yet (the peer is not draining): none piles up behind it.
      if (!done) continue;
    }
    // An error leaves the request null: the next interval tries again, and the
    // endpoint's own calls report what broke.
    if (MPI_Isend(beat_message_->data(), bytes, MPI_BYTE, peer, kControlTag, comm_, &request) !=
        MPI_SUCCESS) {
      request = MPI_REQUEST_NULL;
    }
  }
}

// --- Posting -----------------------------------------------------------------------

absl::StatusOr<Request> Endpoint::PostSend(int peer, Tag tag, absl::Span<const std::byte> data,
                                           const Stamp& stamp) {
  MutexLock lock(&MpiLock());
  if (peer < 0 || peer >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("mpi rank ", rank_, ": send to peer ", peer, ", outside [0, ", size_, ")"));
  }
  if (!broken_.ok()) return broken_;
  if (!aborted_.ok()) return aborted_;
  Op op;
  op.is_send = true;
  op.peer = peer;
  op.tag = tag;
  op.stamp = stamp;
  op.bytes = data.size();
  op.send_data = data.data();
  const uint64_t id = NewOp(std::move(op));
  Op& posted = ops_[id];
  if (!peer_gone_[peer].ok()) {
    Finish(posted, peer_gone_[peer]);
  } else if (data.size() <= options_.eager_bytes) {
    Envelope envelope;
    envelope.kind = Kind::kEager;
    envelope.tag = tag;
    envelope.stamp = stamp;
    envelope.bytes = data.size();
    const absl::Status sent = PostControl(peer, envelope, data);
    if (!sent.ok()) {
      Break(sent);
      return broken_;
    }
    Finish(posted, absl::OkStatus());  // Buffered: the bytes are in our message.
  } else {
    Envelope envelope;
    envelope.kind = Kind::kRts;
    envelope.tag = tag;
    envelope.stamp = stamp;
    envelope.bytes = data.size();
    envelope.send_id = id;
    const absl::Status sent = PostControl(peer, envelope);
    if (!sent.ok()) {
      Break(sent);
      return broken_;
    }
    posted.state = State::kAwaitingClear;
    posted.asked_at = absl::Now();
  }
  return Request{id};
}

absl::StatusOr<Request> Endpoint::PostRecv(int peer, Tag tag, absl::Span<std::byte> data,
                                           Combiner combiner, const Stamp& stamp) {
  MutexLock lock(&MpiLock());
  if (peer < 0 || peer >= size_) {
    return absl::InvalidArgumentError(absl::StrCat("mpi rank ", rank_, ": receive from peer ",
                                                   peer, ", outside [0, ", size_, ")"));
  }
  if (!broken_.ok()) return broken_;
  if (!aborted_.ok()) return aborted_;
  Op op;
  op.peer = peer;
  op.tag = tag;
  op.stamp = stamp;
  op.bytes = data.size();
  op.recv_data = data.data();
  op.combiner = combiner;
  const uint64_t id = NewOp(std::move(op));
  Op& posted = ops_[id];
  if (!peer_gone_[peer].ok()) {
    Finish(posted, peer_gone_[peer]);
    return Request{id};
  }
  auto& arrivals = unexpected_[peer];
  for (auto it = arrivals.begin(); it != arrivals.end(); ++it) {
    if (!Pairs(it->tag, it->stamp, tag, stamp)) continue;  // Conflicts pair, to fail.
    Arrival arrival = std::move(*it);
    arrivals.erase(it);
    const absl::Status matched = Match(id, posted, arrival);
    if (!matched.ok()) {
      Break(matched);
      return broken_;
    }
    return Request{id};
  }
  posted_[peer].push_back(id);
  return Request{id};
}

uint64_t Endpoint::NewOp(Op op) {
  const uint64_t id = next_id_++;
  ops_.emplace(id, std::move(op));
  return id;
}

void Endpoint::Finish(Op& op, absl::Status status) {
  op.state = State::kDone;
  op.status = std::move(status);
  op.landed.clear();
  if (op.in_flight == 0) RecycleSlots(op);
}

void Endpoint::RecycleSlots(Op& op) {
  for (auto& slot : op.slots) {
    if (pooled_slot_bytes_ + slot->size() <= kPooledSlotBytes) {
      pooled_slot_bytes_ += slot->size();
      free_slots_[slot->size()].push_back(std::move(slot));
    }
  }
  op.slots.clear();
}

absl::Status Endpoint::PostControl(int peer, const Envelope& envelope,
                                   absl::Span<const std::byte> payload) {
  Envelope stamped = envelope;
  stamped.epoch = epoch_;
  std::unique_ptr<std::vector<std::byte>> buffer = TakeBuffer();
  Encode(stamped, payload, *buffer);
  MPI_Request request;
  LOOM_MPI_RETURN_IF_ERROR(MPI_Isend(buffer->data(), static_cast<int>(buffer->size()), MPI_BYTE,
                                     peer, kControlTag, comm_, &request),
                           "MPI_Isend");
  requests_.push_back(request);
  InFlight sent;
  sent.buffer = std::move(buffer);
  in_flight_.push_back(std::move(sent));
  return absl::OkStatus();
}

absl::Status Endpoint::PostData(Op& op, uint64_t id, size_t piece, bool send, size_t slot) {
  const size_t offset = piece * op.piece;
  const int bytes = static_cast<int>(std::min(op.piece, op.bytes - offset));
  const int tag = DataTag(op.data_tag + piece);
  MPI_Request request;
  if (send) {
    // MPI never holds a sender's memory: a Wait that fails with data in flight (its
    // peer went silent mid-transfer) lets the caller free its buffer, and MPI may
    // read the piece long after (Open MPI's vader re-sends a piece whose
    // single-copy read failed). The slot stays with the op while MPI holds it, and
    // is leaked if the endpoint closes first.
    std::byte* staged = op.slots[slot]->data();
    std::memcpy(staged, op.send_data + offset, static_cast<size_t>(bytes));
    LOOM_MPI_RETURN_IF_ERROR(MPI_Isend(staged, bytes, MPI_BYTE, op.peer, tag, comm_, &request),
                             "MPI_Isend");
  } else {
    std::byte* into = Direct(op) ? op.recv_data + offset : op.slots[slot]->data();
    LOOM_MPI_RETURN_IF_ERROR(MPI_Irecv(into, bytes, MPI_BYTE, op.peer, tag, comm_, &request),
                             "MPI_Irecv");
  }
  requests_.push_back(request);
  InFlight posted;
  posted.what = send ? InFlight::What::kDataSend : InFlight::What::kDataRecv;
  posted.op = id;
  posted.piece = piece;
  posted.slot = slot;
  if (send) {
    posted.peer = op.peer;
    posted.bytes = static_cast<size_t>(bytes);
    send_bytes_in_flight_[op.peer] += posted.bytes;
    ++send_pieces_in_flight_[op.peer];
  }
  in_flight_.push_back(std::move(posted));
  ++op.in_flight;
  return absl::OkStatus();
}

uint64_t Endpoint::DataTagCounter(int peer, size_t count) {
  const uint64_t first = next_data_tag_[peer];
  next_data_tag_[peer] += count;
  return first;
}

int Endpoint::DataTag(uint64_t counter) const {
  return 1 + static_cast<int>(counter % static_cast<uint64_t>(tag_ub_ - 1));
}

size_t Endpoint::WindowPieces(size_t piece) {
  return std::max(kWindow, kSendWindowBytes / std::max<size_t>(piece, 1));
}

void Endpoint::NoteLanded(Op& op, size_t piece) {
  const absl::Time now = absl::Now();
  const size_t bytes = std::min(op.piece, op.bytes - piece * op.piece);
  if (op.landed_pieces++ == 0) {
    // "Clear to send" out, the first piece in: a round trip seen from this side (a
    // peer this rank only receives from has no send of its own to time).
    paths_->NoteRoundTrip(op.peer, now - op.cleared_at);
    // The rate's clock starts when the first piece is in: the rate is of the rest.
    op.first_landed_at = now;
    return;
  }
  op.landed_bytes_after_first += bytes;
  if (op.landed_pieces != op.pieces) return;
  paths_->NoteTransfer(op.peer, op.landed_bytes_after_first, now - op.first_landed_at);
}

PathEstimate Endpoint::EstimatePath(int peer) const {
  MutexLock lock(&MpiLock());  // paths_ is made in the constructor, under the lock
  return paths_->Estimate(peer);
}

bool Endpoint::Direct(const Op& op) {
  return !op.is_send && (op.combiner.copies() || op.combiner.lands_in_place);
}

size_t Endpoint::TakeSlots(Op& op, size_t window) {
  const size_t slots = std::min(window, op.pieces);
  for (size_t s = 0; s < slots; ++s) {
    if (auto it = free_slots_.find(op.piece); it != free_slots_.end() && !it->second.empty()) {
      op.slots.push_back(std::move(it->second.back()));
      it->second.pop_back();
      pooled_slot_bytes_ -= op.piece;
    } else {
      op.slots.push_back(std::make_unique<std::vector<std::byte>>(op.piece));
    }
  }
  return slots;
}

std::unique_ptr<std::vector<std::byte>> Endpoint::TakeBuffer() {
  if (free_buffers_.empty()) return std::make_unique<std::vector<std::byte>>();
  auto buffer = std::move(free_buffers_.back());
  free_buffers_.pop_back();
  return buffer;
}

void Endpoint::GiveBuffer(std::unique_ptr<std::vector<std::byte>> buffer) {
  if (buffer != nullptr && free_buffers_.size() < 64) free_buffers_.push_back(std::move(buffer));
}

// --- Matching ----------------------------------------------------------------------

absl::Status Endpoint::Match(uint64_t id, Op& op, Arrival& arrival) {
  if (arrival.stamp.ConflictsWith(op.stamp)) {
    Finish(op, StampMismatchError("mpi", StampMismatch{op.peer, rank_, arrival.tag, arrival.stamp,
                                                       op.stamp}));
    if (arrival.kind != Kind::kRts) return absl::OkStatus();
    // Tell the sender, as for a size mismatch, with this receive's stamp.
    Envelope answer;
    answer.kind = Kind::kNack;
    answer.tag = arrival.tag;
    answer.send_id = arrival.send_id;
    answer.bytes = kStampConflict;
    answer.stamp = op.stamp;
    return PostControl(op.peer, answer);
  }
  if (arrival.kind == Kind::kRts) return StartTransfer(id, op, arrival.send_id, arrival.bytes);
  if (arrival.bytes != op.bytes) {
    Finish(op, Mismatch(op.peer, arrival.bytes, op.tag, rank_, op.bytes));
    return absl::OkStatus();
  }
  if (op.bytes > 0) op.combiner.Apply(op.recv_data, arrival.payload.data(), 0, op.bytes);
  Finish(op, absl::OkStatus());
  return absl::OkStatus();
}

absl::Status Endpoint::StartTransfer(uint64_t id, Op& op, uint64_t send_id, uint64_t bytes) {
  op.send_id = send_id;
  Envelope answer;
  answer.tag = op.tag;
  answer.send_id = send_id;
  if (bytes != op.bytes) {
    answer.kind = Kind::kNack;
    answer.bytes = op.bytes;
    Finish(op, Mismatch(op.peer, bytes, op.tag, rank_, op.bytes));
    return PostControl(op.peer, answer);
  }
  // A copy lands in its destination whole, so its pieces need no buffer of their own
  // and are never smaller than kCopyPiece: fewer MPI messages, each a rendezvous.
  op.piece = op.combiner.copies() ? std::max(options_.chunk_bytes, kCopyPiece)
                                  : options_.chunk_bytes;
  if (across_hosts_[op.peer]) op.piece = std::min(op.piece, kAcrossHostsPiece);
  op.pieces = (op.bytes + op.piece - 1) / op.piece;
  op.data_tag = DataTagCounter(op.peer, op.pieces);
  op.landed.assign(op.pieces, false);
  op.state = State::kTransferring;
  // Through slots, as many pieces as the peer's send window holds (at least kWindow).
  const size_t first_posts = Direct(op) ? op.pieces : TakeSlots(op, WindowPieces(op.piece));
  // The receives go in before "clear to send", so the data never waits unexpected.
  for (size_t piece = 0; piece < first_posts; ++piece) {
    LOOM_RETURN_IF_ERROR(PostData(op, id, piece, /*send=*/false, /*slot=*/piece));
  }
  op.next_to_post = first_posts;
  op.cleared_at = absl::Now();
  answer.kind = Kind::kCts;
  answer.bytes = op.bytes;
  answer.data_tag = op.data_tag;
  answer.piece = op.piece;
  return PostControl(op.peer, answer);
}

absl::Status Endpoint::CombineLanded(uint64_t id, Op& op) {
  while (op.pieces_done < op.pieces && op.landed[op.pieces_done]) {
    const size_t piece = op.pieces_done;
    const size_t offset = piece * op.piece;
    const size_t bytes = std::min(op.piece, op.bytes - offset);
    if (Direct(op)) {
      if (!op.combiner.copies()) {
        op.combiner.Apply(op.recv_data + offset, op.recv_data + offset, offset, bytes);
      }
      ++op.pieces_done;
      continue;
    }
    // Pieces are combined in order, so piece + slots.size() reuses this piece's slot.
    const size_t slot = piece % op.slots.size();
    op.combiner.Apply(op.recv_data + offset, op.slots[slot]->data(), offset, bytes);
    ++op.pieces_done;
    if (op.next_to_post < op.pieces) {
      LOOM_RETURN_IF_ERROR(PostData(op, id, op.next_to_post++, /*send=*/false, slot));
    }
  }
  if (op.pieces_done == op.pieces) Finish(op, absl::OkStatus());
  return absl::OkStatus();
}

absl::Status Endpoint::PumpSends(int peer) {
  std::deque<uint64_t>& queue = sending_[peer];
  while (!queue.empty()) {
    const uint64_t id = queue.front();
    auto it = ops_.find(id);
    if (it == ops_.end() || it->second.state != State::kTransferring ||
        it->second.next_to_post >= it->second.pieces) {
      queue.pop_front();  // all posted, or finished (failed, expired) meanwhile
      continue;
    }
    Op& op = it->second;
    while (op.next_to_post < op.pieces && !op.idle_slots.empty()) {
      const size_t bytes = std::min(op.piece, op.bytes - op.next_to_post * op.piece);
      if (send_pieces_in_flight_[peer] >= kWindow &&
          send_bytes_in_flight_[peer] + bytes > kSendWindowBytes) {
        return absl::OkStatus();  // the window is full: a completion pumps again
      }
      const size_t slot = op.idle_slots.back();
      op.idle_slots.pop_back();
      LOOM_RETURN_IF_ERROR(PostData(op, id, op.next_to_post++, /*send=*/true, slot));
    }
    // Out of slots (all in flight, which fill the window): its completions pump.
    if (op.next_to_post < op.pieces) return absl::OkStatus();
    queue.pop_front();
  }
  return absl::OkStatus();
}

// --- Progress ----------------------------------------------------------------------

void Endpoint::ProgressAll() {
  for (Endpoint* endpoint : Registry()) endpoint->Progress();
}

void Endpoint::Progress() {
  if (!broken_.ok()) return;
  absl::Status status = PollEnvelopes();
  if (status.ok()) status = TestRequests();
  if (!status.ok()) Break(status);
}

absl::Status Endpoint::PollEnvelopes() {
  for (int n = 0; n < kEnvelopesPerPoll; ++n) {
    int arrived = 0;
    MPI_Message message;
    MPI_Status status;
    LOOM_MPI_RETURN_IF_ERROR(
        MPI_Improbe(MPI_ANY_SOURCE, kControlTag, comm_, &arrived, &message, &status),
        "MPI_Improbe");
    if (!arrived) return absl::OkStatus();
    int bytes = 0;
    LOOM_MPI_RETURN_IF_ERROR(MPI_Get_count(&status, MPI_BYTE, &bytes), "MPI_Get_count");
    probe_buffer_.resize(static_cast<size_t>(bytes));
    LOOM_MPI_RETURN_IF_ERROR(
        MPI_Mrecv(probe_buffer_.data(), bytes, MPI_BYTE, &message, MPI_STATUS_IGNORE), "MPI_Mrecv");
    ++events_;
    LOOM_RETURN_IF_ERROR(HandleEnvelope(status.MPI_SOURCE, probe_buffer_));
  }
  return absl::OkStatus();
}

absl::Status Endpoint::TestRequests() {
  if (requests_.empty()) return absl::OkStatus();
  const int count = static_cast<int>(requests_.size());
  done_indices_.resize(count);
  done_statuses_.resize(count);
  int completed = 0;
  const int code = MPI_Testsome(count, requests_.data(), &completed, done_indices_.data(),
                                done_statuses_.data());
  if (code != MPI_SUCCESS) {
    int error = code;
    if (code == MPI_ERR_IN_STATUS) {
      for (int k = 0; k < completed; ++k) {
        if (done_statuses_[k].MPI_ERROR != MPI_SUCCESS) error = done_statuses_[k].MPI_ERROR;
      }
    }
    return MpiStatus(error, "MPI_Testsome");
  }
  if (completed == MPI_UNDEFINED || completed == 0) return absl::OkStatus();
  events_ += completed;
  std::vector<std::pair<InFlight, MPI_Status>> finished;
  finished.reserve(completed);
  for (int k = 0; k < completed; ++k) {
    finished.emplace_back(std::move(in_flight_[done_indices_[k]]), done_statuses_[k]);
  }
  // Completed requests are MPI_REQUEST_NULL now: drop them, keeping the order.
  size_t kept = 0;
  for (size_t j = 0; j < requests_.size(); ++j) {
    if (requests_[j] == MPI_REQUEST_NULL) continue;
    requests_[kept] = requests_[j];
    in_flight_[kept] = std::move(in_flight_[j]);
    ++kept;
  }
  requests_.resize(kept);
  in_flight_.resize(kept);
  for (auto& [done, status] : finished) HandleCompletion(done, status);
  return absl::OkStatus();
}

void Endpoint::HandleCompletion(InFlight& done, const MPI_Status& status) {
  if (done.what == InFlight::What::kControl) {
    GiveBuffer(std::move(done.buffer));
    return;
  }
  const bool data_send = done.what == InFlight::What::kDataSend;
  if (data_send) {
    send_bytes_in_flight_[done.peer] -= done.bytes;
    --send_pieces_in_flight_[done.peer];
  }
  HandleDataCompletion(done, status);
  if (!data_send) return;
  // The peer's window has room again: its sends' next pieces go (the oldest first).
  const absl::Status pumped = PumpSends(done.peer);
  if (!pumped.ok()) Break(pumped);
}

void Endpoint::HandleDataCompletion(InFlight& done, const MPI_Status& status) {
  const bool data_send = done.what == InFlight::What::kDataSend;
  auto it = ops_.find(done.op);
  if (it == ops_.end()) return;
  Op& op = it->second;
  --op.in_flight;
  int cancelled = 0;
  MPI_Test_cancelled(&status, &cancelled);
  if (!cancelled && op.state == State::kTransferring) {
    if (data_send) {
      // Sends may complete out of order: the slot just freed takes a later piece.
      if (++op.pieces_done == op.pieces) {
        Finish(op, absl::OkStatus());
      } else {
        op.idle_slots.push_back(done.slot);
      }
    } else {
      op.landed[done.piece] = true;
      NoteLanded(op, done.piece);
      const absl::Status combined = CombineLanded(done.op, op);
      if (!combined.ok()) Break(combined);
    }
  }
  if (op.in_flight == 0 && op.state == State::kDone) {
    RecycleSlots(op);
    if (op.waited) ops_.erase(it);
  }
}

absl::Status Endpoint::HandleEnvelope(int source, absl::Span<const std::byte> message) {
  absl::Span<const std::byte> payload;
  LOOM_ASSIGN_OR_RETURN(const Envelope envelope, Decode(message, &payload));
  if (envelope.epoch != epoch_) return absl::OkStatus();  // From an earlier endpoint.
  watch_.Heard(source);                                   // Every message is a sign of life.
  switch (envelope.kind) {
    case Kind::kBeat:
      return absl::OkStatus();
    case Kind::kClose:
      peer_closed_[source] = true;
      return absl::OkStatus();
    case Kind::kEager:
    case Kind::kRts: {
      Arrival arrival;
      arrival.kind = envelope.kind;
      arrival.tag = envelope.tag;
      arrival.stamp = envelope.stamp;
      arrival.bytes = envelope.bytes;
      arrival.send_id = envelope.send_id;
      auto& receives = posted_[source];
      for (auto it = receives.begin(); it != receives.end(); ++it) {
        Op& op = ops_.at(*it);
        if (!Pairs(envelope.tag, envelope.stamp, op.tag, op.stamp)) continue;
        const uint64_t id = *it;
        receives.erase(it);
        if (arrival.kind == Kind::kRts || arrival.stamp.ConflictsWith(op.stamp)) {
          return Match(id, op, arrival);
        }
        // Eager: combine straight from the received message.
        if (envelope.bytes != op.bytes) {
          Finish(op, Mismatch(source, envelope.bytes, op.tag, rank_, op.bytes));
        } else {
          if (op.bytes > 0) op.combiner.Apply(op.recv_data, payload.data(), 0, op.bytes);
          Finish(op, absl::OkStatus());
        }
        return absl::OkStatus();
      }
      if (arrival.kind == Kind::kEager) arrival.payload.assign(payload.begin(), payload.end());
      unexpected_[source].push_back(std::move(arrival));
      return absl::OkStatus();
    }
    case Kind::kCts: {
      auto it = ops_.find(envelope.send_id);
      // A send withdrawn at its deadline told the receiver so; nothing to do.
      if (it == ops_.end() || it->second.state != State::kAwaitingClear) return absl::OkStatus();
      Op& op = it->second;
      if (!op.is_send || op.peer != source || envelope.piece == 0 ||
          envelope.piece > kMaxPiece) {
        return absl::InternalError(absl::StrCat(
            "mpi rank ", rank_, ": a clear to send from rank ", source, " names op ",
            envelope.send_id, " with pieces of ", envelope.piece,
            " bytes, which is not a send to it in pieces of 1..", kMaxPiece, " bytes"));
      }
      op.data_tag = envelope.data_tag;
      op.piece = envelope.piece;
      paths_->NoteRoundTrip(source, absl::Now() - op.asked_at);
      op.pieces = (op.bytes + op.piece - 1) / op.piece;
      op.state = State::kTransferring;
      const size_t slots = TakeSlots(op, WindowPieces(op.piece));
      for (size_t slot = slots; slot > 0; --slot) op.idle_slots.push_back(slot - 1);
      op.next_to_post = 0;
      sending_[source].push_back(envelope.send_id);
      return PumpSends(source);
    }
    case Kind::kNack: {
      auto it = ops_.find(envelope.send_id);
      if (it == ops_.end() || it->second.state != State::kAwaitingClear) return absl::OkStatus();
      Op& op = it->second;
      Finish(op, envelope.bytes == kStampConflict
                     ? StampMismatchError("mpi", StampMismatch{rank_, source, op.tag, op.stamp,
                                                               envelope.stamp})
                     : Mismatch(rank_, op.bytes, op.tag, source, envelope.bytes));
      return absl::OkStatus();
    }
    case Kind::kWithdraw: {
      auto& arrivals = unexpected_[source];
      for (auto it = arrivals.begin(); it != arrivals.end(); ++it) {
        if (it->kind == Kind::kRts && it->send_id == envelope.send_id) {
          arrivals.erase(it);
          return absl::OkStatus();
        }
      }
      for (auto& [id, op] : ops_) {
        if (op.is_send || op.peer != source || op.state != State::kTransferring ||
            op.send_id != envelope.send_id) {
          continue;
        }
        CancelDataReceives(id);
        Finish(op, absl::DeadlineExceededError(absl::StrCat(
                       "mpi rank ", rank_, ": rank ", source, " withdrew its send (tag ",
                       envelope.tag, ", ", envelope.bytes, " bytes) at its deadline")));
        break;
      }
      return absl::OkStatus();
    }
    case Kind::kAbort: {
      const std::string reason(reinterpret_cast<const char*>(payload.data()), payload.size());
      const absl::Status gone = absl::UnavailableError(
          absl::StrCat("mpi: ", watch_.Describe(source), " aborted: ", reason));
      RecordPeerFailure(
          {watch_.identity(source), PeerFault::kAborted, absl::Now(), std::string(gone.message())});
      peer_gone_[source] = gone;
      FailPeer(source, gone);
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

// --- Failure -----------------------------------------------------------------------

void Endpoint::CancelDataReceives(uint64_t id) {
  for (size_t j = 0; j < requests_.size(); ++j) {
    if (in_flight_[j].what == InFlight::What::kDataRecv && in_flight_[j].op == id) {
      MPI_Cancel(&requests_[j]);
    }
  }
}

void Endpoint::FailPeer(int peer, const absl::Status& status) {
  auto& receives = posted_[peer];
  receives.clear();
  for (auto& [id, op] : ops_) {
    if (op.peer != peer || op.state == State::kDone) continue;
    CancelDataReceives(id);
    Finish(op, status);
  }
}

void Endpoint::JudgePeers(absl::Span<const Request> requests) {
  watch_.Listen();
  if (!watch_.judging()) return;
  for (const Request& request : requests) {
    const Op& op = ops_.at(request.id);
    const int peer = op.peer;
    if (op.state == State::kDone && op.in_flight == 0) continue;
    if (peer == rank_ || !peer_gone_[peer].ok() || peer_closed_[peer]) continue;
    const absl::Status verdict = watch_.Judge(peer);
    if (verdict.ok()) continue;
    peer_gone_[peer] = verdict;
    FailPeer(peer, verdict);
    // Data MPI holds for a silent peer will not move: rather than wait for the
    // deadline, the endpoint breaks (its buffers stay MPI's until MPI_Finalize).
    for (const auto& [id, other] : ops_) {
      if (other.peer == peer && other.in_flight > 0) {
        Break(verdict);
        break;
      }
    }
  }
}

void Endpoint::Break(absl::Status status) {
  if (broken_.ok()) broken_ = std::move(status);
}

void Endpoint::Expire(uint64_t id, Op& op) {
  const absl::Status late = absl::DeadlineExceededError(
      absl::StrCat("mpi rank ", rank_, ": ", Describe(op), " still pending at its deadline"));
  if (op.state == State::kPosted) {
    auto& receives = posted_[op.peer];
    receives.erase(std::remove(receives.begin(), receives.end(), id), receives.end());
    Finish(op, late);
  } else if (op.state == State::kAwaitingClear) {
    // MPI has none of its bytes yet: withdraw it, and tell the receiver.
    Envelope withdraw;
    withdraw.kind = Kind::kWithdraw;
    withdraw.tag = op.tag;
    withdraw.bytes = op.bytes;
    withdraw.send_id = id;
    const absl::Status told = PostControl(op.peer, withdraw);
    if (!told.ok()) Break(told);
    Finish(op, late);
  }
}

void Endpoint::Abort(const absl::Status& reason) {
  MutexLock lock(&MpiLock());
  if (!aborted_.ok()) return;
  aborted_ = reason.ok() ? absl::AbortedError("mpi: aborted") : reason;
  const std::string message(aborted_.message());
  Envelope abort;
  abort.kind = Kind::kAbort;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    const absl::Status told = PostControl(
        peer, abort,
        absl::MakeConstSpan(reinterpret_cast<const std::byte*>(message.data()), message.size()));
    if (!told.ok()) Break(told);
  }
  for (auto& receives : posted_) receives.clear();
  for (auto& [id, op] : ops_) {
    if (op.state == State::kDone) continue;
    CancelDataReceives(id);
    Finish(op, aborted_);
  }
}

// --- Waiting -----------------------------------------------------------------------

absl::Status Endpoint::Wait(absl::Span<const Request> requests, absl::Time deadline) {
  MutexLock lock(&MpiLock());
  for (const Request& request : requests) {
    auto it = ops_.find(request.id);
    if (it == ops_.end() || it->second.waited) {
      return absl::NotFoundError(absl::StrCat("mpi rank ", rank_, ": unknown request ",
                                              request.id, " (never posted, or already waited)"));
    }
  }
  const int64_t deadline_nanos = Nanos(deadline);
  int64_t grace_end = -1;
  int idle = 0;
  // A communication thread beside compute naps once it has spun a little, never
  // yields (core/idle_wait.h); others spin, yield, then nap.
  const bool nap = ThisThreadIdleWait() == IdleWait::kNap;
  int64_t idle_since = NowNanos();
  for (;;) {
    const uint64_t events_before = events_;
    ProgressAll();
    if (!broken_.ok()) break;
    bool quiet = true;
    for (const Request& request : requests) {
      const Op& op = ops_.at(request.id);  // Kept until waited: the ids are all there.
      if (op.state != State::kDone || op.in_flight > 0) {
        quiet = false;
        break;
      }
    }
    if (quiet) break;
    JudgePeers(requests);
    if (!broken_.ok()) break;
    const int64_t now = NowNanos();
    if (now >= deadline_nanos && grace_end < 0) {
      for (const Request& request : requests) Expire(request.id, ops_.at(request.id));
      grace_end = now + absl::ToInt64Nanoseconds(options_.withdraw_grace);
      continue;
    }
    if (grace_end >= 0 && now >= grace_end) {
      // Data MPI still holds: try to cancel it; what cannot be breaks the endpoint.
      for (const Request& request : requests) CancelDataReceives(request.id);
      ProgressAll();
      for (const Request& request : requests) {
        Op& op = ops_.at(request.id);
        if (op.state != State::kDone) {
          Finish(op,
                 absl::DeadlineExceededError(absl::StrCat("mpi rank ", rank_, ": ", Describe(op),
                                                          " still in flight at its deadline")));
        }
        if (op.in_flight > 0) {
          Break(absl::InternalError(absl::StrCat(
              "mpi rank ", rank_, ": ", Describe(op),
              " was handed to MPI and neither finished nor could be cancelled; this endpoint is "
              "unusable",
              op.is_send ? "" : " and the receive's buffer must stay alive until MPI_Finalize")));
        }
      }
      break;
    }
    if (events_ != events_before) {
      idle = 0;
      idle_since = now;
    }
    ++idle;
    // The lock is let go between polls, so Abort and other threads' endpoints get in.
    MpiLock().Unlock();
    if (nap) {
      if (idle < options_.spin_iterations && now - idle_since < kNapAfterNanos) {
        Relax();
      } else {
        const timespec nap_time = {0, kNapNanos};
        nanosleep(&nap_time, nullptr);
      }
    } else if (idle < options_.spin_iterations && now - idle_since < kSpinNanos) {
      Relax();
    } else if (idle < options_.spin_iterations + 20000) {
      sched_yield();
    } else {
      const timespec nap_time = {0, kNapNanos};
      nanosleep(&nap_time, nullptr);
    }
    MpiLock().Lock();
  }
  absl::Status result;
  for (const Request& request : requests) {
    auto it = ops_.find(request.id);
    if (it == ops_.end()) continue;  // Named twice.
    Op& op = it->second;
    if (op.state != State::kDone) {
      // Only a broken endpoint leaves a request unfinished: unhook it from matching.
      auto& receives = posted_[op.peer];
      receives.erase(std::remove(receives.begin(), receives.end(), request.id), receives.end());
      Finish(op, broken_);
    }
    if (result.ok() && !op.status.ok()) result = op.status;
    op.waited = true;
    if (op.in_flight == 0) ops_.erase(it);
  }
  if (result.ok() && !broken_.ok()) result = broken_;
  return result;
}

}  // namespace mpi_internal
}  // namespace loom
