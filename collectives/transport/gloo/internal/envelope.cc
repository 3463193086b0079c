#include "collectives/transport/gloo/internal/envelope.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace loom {
namespace gloo_internal {

std::vector<std::byte> Encode(const Envelope& envelope, absl::Span<const std::byte> payload) {
  const uint64_t words[8] = {static_cast<uint64_t>(envelope.kind),
                             envelope.tag,
                             envelope.bytes,
                             envelope.send_id,
                             envelope.wants_ack ? uint64_t{1} : uint64_t{0},
                             envelope.stamp.scope,
                             envelope.stamp.words[0],
                             envelope.stamp.words[1]};
  static_assert(sizeof(words) == kHeadBytes);
  std::vector<std::byte> frame(FrameBytes(envelope));
  std::memcpy(frame.data(), words, kHeadBytes);
  if (envelope.PayloadInline()) {
    std::memcpy(frame.data() + kHeadBytes, payload.data(),
                std::min(payload.size(), envelope.bytes));
  }
  return frame;
}

absl::StatusOr<Envelope> Decode(absl::Span<const std::byte> frame) {
  if (frame.size() < kHeadBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: a frame of ", frame.size(), " bytes is shorter than its head"));
  }
  uint64_t words[8];
  std::memcpy(words, frame.data(), kHeadBytes);
  if (words[0] < static_cast<uint64_t>(Kind::kData) ||
      words[0] > static_cast<uint64_t>(Kind::kEcho)) {
    return absl::InvalidArgumentError(absl::StrCat("gloo: unknown envelope kind ", words[0]));
  }
  Envelope envelope;
  envelope.kind = static_cast<Kind>(words[0]);
  envelope.tag = words[1];
  envelope.bytes = words[2];
  envelope.send_id = words[3];
  envelope.wants_ack = words[4] != 0;
  envelope.stamp.scope = words[5];
  envelope.stamp.words[0] = words[6];
  envelope.stamp.words[1] = words[7];
  if (envelope.HasPayload() && envelope.bytes > kMaxPayloadBytes) {
    return absl::InvalidArgumentError(absl::StrCat("gloo: a frame announces ", envelope.bytes,
                                                   " bytes of payload, above the most, ",
                                                   kMaxPayloadBytes));
  }
  if (frame.size() < FrameBytes(envelope)) {
    return absl::InvalidArgumentError(absl::StrCat("gloo: a frame of ", frame.size(),
                                                   " bytes cannot hold its ", envelope.bytes,
                                                   " bytes of inline payload"));
  }
  return envelope;
}

}  // namespace gloo_internal
}  // namespace loom
