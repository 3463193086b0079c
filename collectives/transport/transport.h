// Transport: the point-to-point interface every Loom collective algorithm is written
// against. A Transport is one rank's endpoint in a group of `size()` ranks; it posts
// tagged, asynchronous sends and receives of byte ranges and waits for them with a
// deadline. Backends live in their own folders and mirror this interface: inproc/
// (ranks are threads of one process), shm/ (processes on one host), mpi/ (Open MPI,
// across hosts), gloo/ (Gloo's TCP pairs, across hosts without MPI) and nccl/ (GPU
// buffers; built with --config=cuda).
//
// Example (rank 0 sends 4 floats to rank 1 while receiving 4 from it):
//   std::vector<float> out = {1, 2, 3, 4}, in(4);
//   LOOM_ASSIGN_OR_RETURN(Request send, transport.Send(1, /*tag=*/7, AsBytes(out)));
//   LOOM_ASSIGN_OR_RETURN(Request recv, transport.Recv(1, /*tag=*/7, AsWritableBytes(in)));
//   LOOM_RETURN_IF_ERROR(transport.Wait({send, recv}, absl::Now() + absl::Seconds(10)));
//   // `in` now holds rank 1's four floats.
//
// CONTRACT (what every backend guarantees and what algorithms may rely on):
//
// Matching. A send from rank A to rank B with tag T matches a receive posted on B
// for source A with tag T. Messages with the same (source, destination, tag) match in
// the order they were posted on each side; different tags or peers never match each
// other, so independent steps can use different tags and overlap freely.
//
// Sizes. A matched receive must be exactly as large as the send. A size mismatch is
// a programming or cross-rank consistency error: the receive completes with
// FailedPrecondition naming the ranks, the tag and both sizes, and so does the send
// unless it had already completed as buffered (see Completion). Zero-byte messages
// are legal and still match: the receive completes only once the send is posted.
// A rank may send to itself.
//
// Buffers. The caller owns the bytes. A send's bytes must stay unchanged, and a
// receive's bytes untouched, until the request completes; after that the transport
// never touches them again. This holds also when Wait fails: by the time Wait
// returns, every request it names is complete, failed or cancelled, and no late peer
// can write into a receive buffer.
//
// Completion. A receive completes when its bytes have been delivered. A send
// completes when its bytes may be reused: a backend may complete a small send as
// soon as it has copied the bytes into its own buffers (buffered, like MPI's eager
// protocol; the backend documents up to which size), a large one when the receiver
// has them. A buffered send cannot be withdrawn any more: the next receive that
// matches it gets it. Wait(requests, deadline) returns OK once all are complete;
// otherwise the first error. A request that is still pending at the deadline is
// cancelled and Wait returns DeadlineExceeded naming its peer, tag and size.
// Waiting spins briefly and then blocks, so more ranks than cores still make
// progress. Messages move while their endpoint is inside Send, Recv or Wait; a peer
// asleep in its Wait may be woken only by this endpoint's next Wait. Each request
// may be waited on once; its id is then forgotten.
//
// Combining receives. RecvCombine is a receive whose bytes are not copied into its
// buffer but handed to a Combiner, which writes the buffer from them (for example
// out = mine + theirs, straight from the sender's memory where the backend can read
// it, so a reduction needs no separate copy pass). The combiner is called for
// consecutive pieces of the message, in order, covering it exactly once; a piece
// starts at a multiple of kCombineAlignment bytes (so a typed combiner never sees a
// split element) and its source bytes are valid only during the call, aligned at
// least as the sender's buffer is at that offset, up to 16 bytes (so a typed sender's
// elements arrive aligned to their size). A combiner that allows it
// (`lands_in_place`) may get the destination itself as its source: a backend that
// can only land bytes in this process's memory (shm's CMA path) then lands each
// piece there first, rather than in a buffer of its own. Each call runs
// before the receive completes, on whichever thread the backend delivers on (inproc:
// the thread that matches the message, possibly the sender's), never concurrently
// with another piece of the same receive; it must not call the transport. Everything
// else (matching, sizes, completion, failure) is as for Recv; when a receive fails
// midway, the pieces already combined may have been written.
//
// Stamps. A send or receive may carry a Stamp: a scope (which call of its user it
// belongs to; 0 for none, the default) and two words naming that call (the
// Communicator's fingerprint: kind, dtype, count, op, root). A message and a receive
// of the same peers whose stamps share a nonzero scope must agree on the words; where
// they differ the two pair up even when their tags differ, and the pairing fails like
// a size mismatch: the receive at once with FailedPrecondition (StampMismatchError,
// carrying both stamps; StampMismatchOf reads them back), and so does the send unless
// it had already completed as buffered. So two ranks that disagree on a call fail as
// soon as either side's first message reaches a receive the other has posted, instead
// of waiting on tags that never match. Unstamped messages (scope 0) are matched by
// tag alone, as before.
//
// Tag ranges. Users sharing one endpoint must keep to tags of their own: a message
// taken by another user's receive is lost to its own. Tags at or above
// kCommunicatorTagsBegin belong to Communicators (each one's tags carry its non-zero
// 24-bit id in their top bits). Any other user (the pipeline executor; a test) takes
// a range below it with ReserveTags, which refuses a range that reaches into the
// Communicators' or overlaps another user's live reservation, naming both users.
// Views of an endpoint (GroupTransport) reserve on the endpoint they view.
//
// Failure. Abort(reason) fails every pending and later request of this endpoint with
// `reason` (code Aborted unless `reason` says otherwise) and, where the backend can,
// the requests of the peers that are waiting on it. A peer that is gone is reported
// as Unavailable naming it, where the backend can tell; otherwise its peers see
// DeadlineExceeded. Nothing blocks past its deadline.
//
// Threads. One thread at a time drives an endpoint (the rank's collective engine);
// Abort may be called from any thread. Different endpoints of one group are fully
// independent and may run on different threads or processes.
#ifndef LOOM_COLLECTIVES_TRANSPORT_TRANSPORT_H_
#define LOOM_COLLECTIVES_TRANSPORT_TRANSPORT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collectives/transport/comm_buffer.h"
#include "collectives/transport/native_collectives.h"

namespace loom {

// A Tag separates independent message streams between the same two ranks.
using Tag = uint64_t;

// The first tag of the Communicators' range (see "Tag ranges").
inline constexpr Tag kCommunicatorTagsBegin = Tag{1} << 40;

namespace transport_internal {
class TagTable;
}  // namespace transport_internal

// TagReservation holds tags [first, last] of an endpoint for one user until it is
// destroyed (or moved from). It may outlive the endpoint.
class TagReservation {
 public:
  TagReservation() = default;
  TagReservation(TagReservation&& other) noexcept;
  TagReservation& operator=(TagReservation&& other) noexcept;
  TagReservation(const TagReservation&) = delete;
  TagReservation& operator=(const TagReservation&) = delete;
  ~TagReservation();

  bool held() const { return table_ != nullptr; }
  Tag first() const { return first_; }
  Tag last() const { return last_; }

 private:
  friend class transport_internal::TagTable;
  TagReservation(std::shared_ptr<transport_internal::TagTable> table, Tag first, Tag last)
      : table_(std::move(table)), first_(first), last_(last) {}
  void Release();

  std::shared_ptr<transport_internal::TagTable> table_;
  Tag first_ = 0;
  Tag last_ = 0;
};

// Stamp: the call a message belongs to (see "Stamps" in the contract). Scope 0 is
// unstamped.
struct Stamp {
  uint64_t scope = 0;
  uint64_t words[2] = {0, 0};

  bool stamped() const { return scope != 0; }
  // ConflictsWith: both stamped with one scope, but naming different calls.
  bool ConflictsWith(const Stamp& other) const {
    return scope != 0 && scope == other.scope &&
           (words[0] != other.words[0] || words[1] != other.words[1]);
  }
};

// Pairs says whether a message (tag, stamp) and a posted receive (tag, stamp) of the
// same peers meet: equal tags, or conflicting stamps (which then fail, see above).
inline bool Pairs(Tag message_tag, const Stamp& message, Tag receive_tag, const Stamp& receive) {
  return message_tag == receive_tag || message.ConflictsWith(receive);
}

// A Request names one posted send or receive of an endpoint.
struct Request {
  uint64_t id = 0;
};

// NamedBefore: whether requests[i] is also named earlier in `requests` (a wait that
// names a request twice fails it as unknown).
inline bool NamedBefore(absl::Span<const Request> requests, size_t i) {
  for (size_t j = 0; j < i; ++j) {
    if (requests[j].id == requests[i].id) return true;
  }
  return false;
}

// Pieces a Combiner sees start at multiples of this many bytes of the message.
inline constexpr size_t kCombineAlignment = 64;

// Combiner: what a combining receive does with each piece of its message (see the
// contract). `fn(state, dst, src, offset, bytes)` writes dst[0, bytes) (the receive
// buffer at `offset`) from src[0, bytes) (the message at `offset`; dst itself
// when `lands_in_place` allows it: set it only where fn computes each element from
// its source before writing it and reads nothing else that aliases dst). `state` is the
// caller's and must outlive the request. A default Combiner (no fn) copies.
struct Combiner {
  using Fn = void (*)(const void* state, std::byte* dst, const std::byte* src, size_t offset,
                      size_t bytes);
  Fn fn = nullptr;
  const void* state = nullptr;
  bool lands_in_place = false;

  bool copies() const { return fn == nullptr; }
  // Apply delivers one piece.
  void Apply(std::byte* dst, const std::byte* src, size_t offset, size_t bytes) const;
};

// PathEstimate: what an endpoint has measured of the path to one peer, so that an
// algorithm keeps enough bytes in flight to fill it. Over a long link a message's
// handshake costs a round trip before its data moves, and two chunks of 256 KiB in
// flight leave a 2 Gbit/s link with 4 ms of round trip 84% idle. Zeros where
// nothing is measured (yet) or the backend does not measure (memory and shared
// memory, whose round trips are microseconds).
struct PathEstimate {
  absl::Duration round_trip = absl::ZeroDuration();  // the shortest handshake seen
  double bytes_per_second = 0;                        // the fastest transfer seen
  // The bandwidth-delay product: the bytes in flight that keep the path busy.
  size_t BytesInFlight() const {
    const double bytes = absl::ToDoubleSeconds(round_trip) * bytes_per_second;
    return bytes > 0 && bytes < 1e15 ? static_cast<size_t>(bytes) : 0;
  }
};

class Transport {
 public:
  Transport();
  virtual ~Transport();

  // rank returns this endpoint's rank in [0, size()).
  virtual int rank() const = 0;
  // size returns the number of ranks in the group.
  virtual int size() const = 0;
  // name returns the backend's name ("inproc", "shm", ...), for logs and errors.
  virtual std::string name() const = 0;

  // Send posts a send of `data` to `peer` with `tag`, unstamped. InvalidArgument
  // for a peer outside [0, size()); the abort status after Abort.
  absl::StatusOr<Request> Send(int peer, Tag tag, absl::Span<const std::byte> data) {
    return PostSend(peer, tag, data, Stamp{});
  }

  // Recv posts an unstamped receive into `data` from `peer` with `tag`. Errors as Send.
  absl::StatusOr<Request> Recv(int peer, Tag tag, absl::Span<std::byte> data) {
    return PostRecv(peer, tag, data, Combiner{}, Stamp{});
  }

  // RecvCombine posts an unstamped receive that writes `data` through `combiner`;
  // see the contract. A default Combiner makes it Recv. Errors as Send.
  absl::StatusOr<Request> RecvCombine(int peer, Tag tag, absl::Span<std::byte> data,
                                      Combiner combiner) {
    return PostRecv(peer, tag, data, combiner, Stamp{});
  }

  // PostSend and PostRecv are Send and RecvCombine with a stamp (see "Stamps").
  virtual absl::StatusOr<Request> PostSend(int peer, Tag tag, absl::Span<const std::byte> data,
                                           const Stamp& stamp) = 0;
  virtual absl::StatusOr<Request> PostRecv(int peer, Tag tag, absl::Span<std::byte> data,
                                           Combiner combiner, const Stamp& stamp) = 0;

  // Wait waits for all `requests` until `deadline`. Returns OK when all completed;
  // otherwise the first error (FailedPrecondition for a size mismatch,
  // DeadlineExceeded for a request still pending at the deadline, Unavailable for
  // a peer that is gone, the abort status after Abort, NotFound for an unknown or
  // already waited request). Every named request is finished when it returns.
  virtual absl::Status Wait(absl::Span<const Request> requests, absl::Time deadline) = 0;

  // Abort fails every pending and later request with `reason`; see the contract.
  virtual void Abort(const absl::Status& reason) = 0;

  // TryWait is Wait without the cancelling, for a caller that waits on this endpoint
  // and on another one at once (RoutedTransport: shm inside a host, gloo across). It
  // moves messages as Wait does (every pending request, named or not) and returns:
  //   - true once every named request has finished: they are then forgotten, as after
  //     Wait, and the first error among them is returned instead of true;
  //   - false at `until` (a past `until` makes one pass, without blocking) or soon
  //     after a Wake, if some named request is still pending: then none is forgotten
  //     nor cancelled, and the caller may TryWait or Wait on them again.
  // With no request named it waits for a Wake or `until`, moving messages meanwhile,
  // and returns false. NotFound for an unknown or already waited request (nothing is
  // then forgotten); Unimplemented for a backend without it (mpi, nccl: the default).
  virtual absl::StatusOr<bool> TryWait(absl::Span<const Request> requests, absl::Time until);

  // Wake makes the TryWait blocked on this endpoint (or, if none is, the next one)
  // return after one more pass. Callable from any thread, cheap when nobody sleeps.
  // A no-op for a backend without TryWait.
  virtual void Wake() {}

  // SetFinishListener asks the backend to call `listener` each time one of this
  // endpoint's requests finishes, so that a caller blocked on another endpoint can be
  // woken (a Wake there) when one finishes on a thread of the backend's own (a peer's
  // thread for inproc, gloo's receiver threads). It may also run on this endpoint's
  // own thread (a request finished while posting, cancelled or aborted): harmless
  // for a Wake. It runs under the backend's locks: it must be quick and must not call
  // this endpoint. There is one listener: a second call replaces the first, for the
  // requests posted after it (an empty function removes it). Returns false when this
  // backend's requests never finish without its own thread (shm, mpi: they move only
  // inside Wait), so nobody would need it.
  virtual bool SetFinishListener(std::function<void()> listener) {
    (void)listener;
    return false;
  }

  // AllocateBuffer returns `bytes` of zeroed, page-aligned host memory that this
  // transport moves at its best: shm's peers map it instead of copying through the
  // kernel; the other backends return ordinary memory (see comm_buffer.h, which
  // also says what happens when a peer dies). Any memory still works as a buffer.
  // ResourceExhausted naming the size when it cannot be had.
  virtual absl::StatusOr<CommBuffer> AllocateBuffer(size_t bytes) {
    return CommBuffer::Ordinary(bytes);
  }

  // EstimatePath returns what this endpoint has measured so far of the path to
  // `peer` (PathEstimate); zeros for a backend that does not measure, a path not
  // measured yet, or a peer outside [0, size()). Thread-safe; cheap enough to call
  // once per collective.
  virtual PathEstimate EstimatePath(int peer) const {
    (void)peer;
    return {};
  }

  // native returns the backend's own collectives over this group, or null when it
  // has none (inproc, shm). Owned by the transport. See native_collectives.h.
  virtual NativeCollectives* native() { return nullptr; }

  // ReserveTags holds tags [first, last] of this endpoint for `user` (named in errors)
  // until the returned reservation is destroyed; see "Tag ranges". InvalidArgument
  // when first > last or the range reaches kCommunicatorTagsBegin; AlreadyExists
  // naming both users when it overlaps a live reservation.
  virtual absl::StatusOr<TagReservation> ReserveTags(Tag first, Tag last,
                                                     absl::string_view user);

 private:
  std::shared_ptr<transport_internal::TagTable> tag_table_;
};

inline void Combiner::Apply(std::byte* dst, const std::byte* src, size_t offset,
                            size_t bytes) const {
  if (fn == nullptr) {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  } else {
    fn(state, dst, src, offset, bytes);
  }
}

// StampMismatch: what a stamp mismatch error carries.
struct StampMismatch {
  int sender = 0;    // The message's source rank,
  int receiver = 0;  // its destination,
  Tag tag = 0;       // and the tag it was sent with.
  Stamp sent;        // The message's stamp,
  Stamp expected;    // and that of the receive it met.
};

// StampMismatchError: the FailedPrecondition both sides of a stamp mismatch report,
// with `mismatch` attached (read it back with StampMismatchOf).
absl::Status StampMismatchError(const std::string& backend, const StampMismatch& mismatch);

// StampMismatchOf returns what a StampMismatchError carries; nullopt for any other status.
std::optional<StampMismatch> StampMismatchOf(const absl::Status& status);

// AsBytes / AsWritableBytes view a typed span as the bytes a Transport moves.
template <typename T>
absl::Span<const std::byte> AsBytes(absl::Span<const T> span) {
  return absl::Span<const std::byte>(reinterpret_cast<const std::byte*>(span.data()),
                                     span.size() * sizeof(T));
}
template <typename T>
absl::Span<const std::byte> AsBytes(const std::vector<T>& values) {
  return AsBytes(absl::MakeConstSpan(values));
}
template <typename T>
absl::Span<std::byte> AsWritableBytes(absl::Span<T> span) {
  return absl::Span<std::byte>(reinterpret_cast<std::byte*>(span.data()), span.size() * sizeof(T));
}
template <typename T>
absl::Span<std::byte> AsWritableBytes(std::vector<T>& values) {
  return AsWritableBytes(absl::MakeSpan(values));
}

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_TRANSPORT_H_
