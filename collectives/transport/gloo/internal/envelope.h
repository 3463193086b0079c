// Envelope: the head of every message of the gloo transport (gloo_transport.h, "How
// messages travel"). It carries the Loom tag and size, which gloo's slots do not, and
// the acknowledgements that let a large send learn of its receiver's match or size
// mismatch; heartbeats tell a stopped peer from a busy one, goodbyes a closed peer
// from a dead one. Every envelope travels in a frame: a 64-byte head, then up to
// kInlineBytes of payload inline, so such a message is one gloo message into a
// receive of kFrameBytes the peer posted long before (gloo lets a message be shorter
// than the receive it lands in). A larger payload follows its frame on the payload
// slot, cut into pieces of at most kPieceBytes, each one gloo message into a receive
// the peer keeps posted there too (so it costs no round trip: gloo moves a message
// only once the receiver has posted a receive for it).
#ifndef LOOM_COLLECTIVES_TRANSPORT_GLOO_INTERNAL_ENVELOPE_H_
#define LOOM_COLLECTIVES_TRANSPORT_GLOO_INTERNAL_ENVELOPE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/transport/transport.h"

namespace loom {
namespace gloo_internal {

// Inline payloads go up to the Communicator's default pipeline chunk (256 KiB), so
// the chunks of ring, tree and the other pipelined algorithms travel without the
// round trip. A receiver keeps frames posted for each peer, as many as its path
// needs (endpoint.h, FramesWanted).
inline constexpr size_t kHeadBytes = 64;
inline constexpr size_t kInlineBytes = size_t{256} << 10;
inline constexpr size_t kFrameBytes = kHeadBytes + kInlineBytes;

// Pieces of a payload too large for its frame: kPieceBytes each, the last one the
// rest. A piece is small enough that a few of them posted per peer cover a long
// link's bandwidth-delay product (endpoint.h, FramesWanted), and large enough that
// gloo's per-message work stays small beside moving it.
inline constexpr size_t kPieceBytes = kInlineBytes;
inline constexpr size_t PieceCount(size_t bytes) { return (bytes + kPieceBytes - 1) / kPieceBytes; }

// The largest payload a frame may announce: its receiver reserves that much memory
// before the pieces come, so a frame that claims more (a corrupt one) is refused by
// Decode rather than failing the allocation.
inline constexpr uint64_t kMaxPayloadBytes = uint64_t{1} << 40;

enum class Kind : uint64_t {
  kData = 1,      // tag, bytes, send_id, wants_ack; `bytes` of payload
  kAck = 2,       // send_id was matched by a receive of its size
  kNack = 3,      // send_id was matched by a receive of `bytes` bytes (a mismatch), or
                  // by one stamped `stamp` (bytes = kStampConflict)
  kWithdraw = 4,  // the sender gave send_id up at its deadline: drop it if unmatched
  kAbort = 5,     // the sender aborted; `bytes` of reason text
  kBeat = 6,      // a heartbeat, for idle times (any frame from a peer counts as one);
                  // a send_id other than 0 asks for a kEcho of it (a ping)
  kClose = 7,     // the sender closes its endpoint: the end of its connection is no failure
  kEcho = 8,      // a ping's send_id, returned: the sender's clock when it pinged
};

struct Envelope {
  Kind kind = Kind::kData;
  Tag tag = 0;
  uint64_t bytes = 0;
  uint64_t send_id = 0;
  bool wants_ack = false;
  Stamp stamp;  // kData: the message's (transport.h); kNack: the receive's.

  // HasPayload: whether `bytes` bytes of payload belong to this envelope.
  bool HasPayload() const { return (kind == Kind::kData || kind == Kind::kAbort) && bytes > 0; }
  // PayloadInline: the payload rides in the frame (else it follows on its own).
  bool PayloadInline() const { return HasPayload() && bytes <= kInlineBytes; }
};

// A kNack's `bytes` when the stamps conflicted rather than the sizes.
inline constexpr uint64_t kStampConflict = ~uint64_t{0};

// FrameBytes: the length of `envelope`'s frame on the wire, head and inline payload.
inline size_t FrameBytes(const Envelope& envelope) {
  return kHeadBytes + (envelope.PayloadInline() ? envelope.bytes : 0);
}

// Encode returns `envelope`'s frame: the head and, when its payload goes inline,
// `payload` (envelope.bytes bytes) after it.
std::vector<std::byte> Encode(const Envelope& envelope, absl::Span<const std::byte> payload);

// Decode reads the head of a frame (at least kHeadBytes); InvalidArgument for an
// unknown kind (naming it), a payload above kMaxPayloadBytes, or a frame shorter than
// its head says.
absl::StatusOr<Envelope> Decode(absl::Span<const std::byte> frame);

// InlinePayload: the payload inside a decoded frame; empty when it is not inline.
inline absl::Span<const std::byte> InlinePayload(absl::Span<const std::byte> frame,
                                                 const Envelope& envelope) {
  return envelope.PayloadInline() ? frame.subspan(kHeadBytes, envelope.bytes)
                                  : absl::Span<const std::byte>();
}

}  // namespace gloo_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_GLOO_INTERNAL_ENVELOPE_H_
