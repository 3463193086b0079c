// Envelope: the fixed 64-byte head of every message of the gloo transport
// (gloo_transport.h, "How messages travel"). It carries the Loom tag and size, which
// gloo's slots do not, and the acknowledgements that let a large send learn of its
// receiver's match or size mismatch. A payload, when `bytes` says there is one for
// its kind, follows as a separate gloo message.
#ifndef LOOM_COLLECTIVES_TRANSPORT_GLOO_INTERNAL_ENVELOPE_H_
#define LOOM_COLLECTIVES_TRANSPORT_GLOO_INTERNAL_ENVELOPE_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "collectives/transport/transport.h"

namespace loom {
namespace gloo_internal {

enum class Kind : uint64_t {
  kData = 1,      // tag, bytes, send_id, wants_ack; `bytes` of payload follow
  kAck = 2,       // send_id was matched by a receive of its size
  kNack = 3,      // send_id was matched by a receive of `bytes` bytes (a mismatch)
  kWithdraw = 4,  // the sender gave send_id up at its deadline: drop it if unmatched
  kAbort = 5,     // the sender aborted; `bytes` of reason text follow
};

struct Envelope {
  Kind kind = Kind::kData;
  Tag tag = 0;
  uint64_t bytes = 0;
  uint64_t send_id = 0;
  bool wants_ack = false;

  // HasPayload: whether a payload message of `bytes` bytes follows this envelope.
  bool HasPayload() const { return (kind == Kind::kData || kind == Kind::kAbort) && bytes > 0; }
};

inline constexpr size_t kEnvelopeBytes = 64;
using EnvelopeBytes = std::array<std::byte, kEnvelopeBytes>;

// Encode returns the wire form of `envelope`.
EnvelopeBytes Encode(const Envelope& envelope);

// Decode reads an envelope; InvalidArgument for an unknown kind (naming it).
absl::StatusOr<Envelope> Decode(const EnvelopeBytes& bytes);

}  // namespace gloo_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_GLOO_INTERNAL_ENVELOPE_H_
