// Envelope: the head of every control message of the MPI transport (mpi_transport.h,
// "How messages travel"). It carries the Loom tag, which does not fit MPI's 31-bit
// tags, and the rendezvous handshake of large messages; an eager message's payload
// follows it in the same MPI message.
#ifndef LOOM_COLLECTIVES_TRANSPORT_MPI_INTERNAL_ENVELOPE_H_
#define LOOM_COLLECTIVES_TRANSPORT_MPI_INTERNAL_ENVELOPE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/transport/transport.h"

namespace loom {
namespace mpi_internal {

enum class Kind : uint64_t {
  kEager = 1,     // tag, bytes; the payload follows
  kRts = 2,       // request to send: tag, bytes, send_id
  kCts = 3,       // clear to send: send_id, data_tag (first data tag counter), piece
  kNack = 4,      // mismatch: send_id, tag, bytes = the receive's size, or
                  // kStampConflict with stamp = the receive's
  kWithdraw = 5,  // the sender withdrew send_id (tag, bytes) at its deadline
  kAbort = 6,     // the sender aborted; the reason's message follows
  kBeat = 7,      // the sender is alive (its beat thread sends one every interval)
  kClose = 8,     // the sender closed its endpoint: its silence from now on is no failure
};

struct Envelope {
  // Names the endpoint generation (agreed at connect), so a message left over from
  // an earlier endpoint on a reused communicator id is recognized and dropped.
  uint64_t epoch = 0;
  Kind kind = Kind::kEager;
  Tag tag = 0;
  uint64_t bytes = 0;
  uint64_t send_id = 0;
  uint64_t data_tag = 0;
  uint64_t piece = 0;
  Stamp stamp;  // kEager, kRts: the message's (transport.h); kNack: the receive's.
};

// A kNack's `bytes` when the stamps conflicted rather than the sizes.
inline constexpr uint64_t kStampConflict = ~uint64_t{0};

// Twelve words (the last two reserved): an eager payload after it starts 16-byte
// aligned in a freshly allocated buffer, as the Combiner contract asks.
inline constexpr size_t kEnvelopeBytes = 12 * sizeof(uint64_t);

// Encode writes `envelope` and then `payload` into `out` (resized to fit).
void Encode(const Envelope& envelope, absl::Span<const std::byte> payload,
            std::vector<std::byte>& out);

// Decode reads an envelope from the start of `message`; `payload` gets the rest.
// InvalidArgument for a message shorter than an envelope or an unknown kind.
absl::StatusOr<Envelope> Decode(absl::Span<const std::byte> message,
                                absl::Span<const std::byte>* payload);

}  // namespace mpi_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_MPI_INTERNAL_ENVELOPE_H_
