#include "collectives/transport/gloo/internal/envelope.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace loom {
namespace gloo_internal {

EnvelopeBytes Encode(const Envelope& envelope) {
  const uint64_t words[8] = {static_cast<uint64_t>(envelope.kind),
                             envelope.tag,
                             envelope.bytes,
                             envelope.send_id,
                             envelope.wants_ack ? uint64_t{1} : uint64_t{0},
                             0,
                             0,
                             0};
  static_assert(sizeof(words) == kEnvelopeBytes);
  EnvelopeBytes out;
  std::memcpy(out.data(), words, kEnvelopeBytes);
  return out;
}

absl::StatusOr<Envelope> Decode(const EnvelopeBytes& bytes) {
  uint64_t words[8];
  std::memcpy(words, bytes.data(), kEnvelopeBytes);
  if (words[0] < static_cast<uint64_t>(Kind::kData) ||
      words[0] > static_cast<uint64_t>(Kind::kAbort)) {
    return absl::InvalidArgumentError(absl::StrCat("gloo: unknown envelope kind ", words[0]));
  }
  Envelope envelope;
  envelope.kind = static_cast<Kind>(words[0]);
  envelope.tag = words[1];
  envelope.bytes = words[2];
  envelope.send_id = words[3];
  envelope.wants_ack = words[4] != 0;
  return envelope;
}

}  // namespace gloo_internal
}  // namespace loom
