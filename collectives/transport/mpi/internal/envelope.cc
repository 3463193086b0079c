#include "collectives/transport/mpi/internal/envelope.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace loom {
namespace mpi_internal {

void Encode(const Envelope& envelope, absl::Span<const std::byte> payload,
            std::vector<std::byte>& out) {
  const uint64_t words[12] = {envelope.epoch,          static_cast<uint64_t>(envelope.kind),
                              envelope.tag,            envelope.bytes,
                              envelope.send_id,        envelope.data_tag,
                              envelope.piece,          envelope.stamp.scope,
                              envelope.stamp.words[0], envelope.stamp.words[1],
                              0,                       0};
  static_assert(sizeof(words) == kEnvelopeBytes);
  out.resize(kEnvelopeBytes + payload.size());
  std::memcpy(out.data(), words, kEnvelopeBytes);
  if (!payload.empty()) std::memcpy(out.data() + kEnvelopeBytes, payload.data(), payload.size());
}

absl::StatusOr<Envelope> Decode(absl::Span<const std::byte> message,
                                absl::Span<const std::byte>* payload) {
  if (message.size() < kEnvelopeBytes) {
    return absl::InvalidArgumentError(absl::StrCat("mpi: a control message of ", message.size(),
                                                   " bytes is shorter than an envelope (",
                                                   kEnvelopeBytes, ")"));
  }
  uint64_t words[12];
  static_assert(sizeof(words) == kEnvelopeBytes);
  std::memcpy(words, message.data(), kEnvelopeBytes);
  if (words[1] < static_cast<uint64_t>(Kind::kEager) ||
      words[1] > static_cast<uint64_t>(Kind::kClose)) {
    return absl::InvalidArgumentError(absl::StrCat("mpi: unknown envelope kind ", words[1]));
  }
  Envelope envelope;
  envelope.epoch = words[0];
  envelope.kind = static_cast<Kind>(words[1]);
  envelope.tag = words[2];
  envelope.bytes = words[3];
  envelope.send_id = words[4];
  envelope.data_tag = words[5];
  envelope.piece = words[6];
  envelope.stamp.scope = words[7];
  envelope.stamp.words[0] = words[8];
  envelope.stamp.words[1] = words[9];
  *payload = message.subspan(kEnvelopeBytes);
  return envelope;
}

}  // namespace mpi_internal
}  // namespace loom
