#include "collectives/transport/gloo/internal/envelope.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace gloo_internal {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<std::byte> Seeded(size_t n, uint8_t seed) {
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = std::byte(static_cast<uint8_t>(seed + 7 * i));
  return out;
}

TEST(EnvelopeTest, HeadRoundTrips) {
  Envelope envelope;
  envelope.kind = Kind::kNack;
  envelope.tag = 0xF00DFACE12345678u;
  envelope.bytes = 123456789;
  envelope.send_id = 42;
  envelope.wants_ack = true;
  const std::vector<std::byte> frame = Encode(envelope, {});
  EXPECT_EQ(frame.size(), kHeadBytes);
  LOOM_ASSERT_OK_AND_ASSIGN(const Envelope decoded, Decode(frame));
  EXPECT_EQ(decoded.kind, Kind::kNack);
  EXPECT_EQ(decoded.tag, envelope.tag);
  EXPECT_EQ(decoded.bytes, envelope.bytes);
  EXPECT_EQ(decoded.send_id, 42u);
  EXPECT_TRUE(decoded.wants_ack);
  EXPECT_FALSE(decoded.HasPayload());  // a nack's `bytes` is the receiver's size
  EXPECT_THAT(InlinePayload(frame, decoded), IsEmpty());
}

TEST(EnvelopeTest, PayloadsUpToTheFrameRideInline) {
  for (const size_t bytes : {size_t{1}, size_t{63}, kInlineBytes - 1, kInlineBytes}) {
    Envelope envelope;
    envelope.kind = Kind::kData;
    envelope.bytes = bytes;
    const std::vector<std::byte> payload = Seeded(bytes, static_cast<uint8_t>(bytes));
    std::vector<std::byte> frame = Encode(envelope, payload);
    EXPECT_EQ(frame.size(), kHeadBytes + bytes);
    // A frame lands in a receive of kFrameBytes: what follows it is not read.
    frame.resize(kFrameBytes, std::byte{0xEE});
    LOOM_ASSERT_OK_AND_ASSIGN(const Envelope decoded, Decode(frame));
    EXPECT_TRUE(decoded.PayloadInline()) << bytes;
    EXPECT_THAT(InlinePayload(frame, decoded), ElementsAreArray(payload)) << bytes;
  }
}

TEST(EnvelopeTest, LargerPayloadsFollowTheFrame) {
  Envelope envelope;
  envelope.kind = Kind::kData;
  envelope.bytes = kInlineBytes + 1;
  const std::vector<std::byte> payload = Seeded(envelope.bytes, 3);
  const std::vector<std::byte> frame = Encode(envelope, payload);
  EXPECT_EQ(frame.size(), kHeadBytes);  // the payload follows as its own message
  LOOM_ASSERT_OK_AND_ASSIGN(const Envelope decoded, Decode(frame));
  EXPECT_TRUE(decoded.HasPayload());
  EXPECT_FALSE(decoded.PayloadInline());
  EXPECT_THAT(InlinePayload(frame, decoded), IsEmpty());
}

TEST(EnvelopeTest, AnAbortCarriesItsReasonInline) {
  const std::string reason = "rank 3 ran out of disk";
  Envelope envelope;
  envelope.kind = Kind::kAbort;
  envelope.bytes = reason.size();
  const std::vector<std::byte> frame =
      Encode(envelope,
             absl::MakeConstSpan(reinterpret_cast<const std::byte*>(reason.data()), reason.size()));
  LOOM_ASSERT_OK_AND_ASSIGN(const Envelope decoded, Decode(frame));
  const absl::Span<const std::byte> text = InlinePayload(frame, decoded);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(text.data()), text.size()), reason);
}

// Beats, echoes and goodbyes are bare heads: 64 bytes on the wire, nothing after
// them; a ping's clock reading (send_id) comes back whole in its echo.
TEST(EnvelopeTest, BeatsEchoesAndGoodbyesAreBareHeads) {
  for (const Kind kind : {Kind::kBeat, Kind::kClose, Kind::kEcho}) {
    Envelope envelope;
    envelope.kind = kind;
    envelope.send_id = uint64_t{1795000000123456789};
    const std::vector<std::byte> frame = Encode(envelope, {});
    EXPECT_EQ(frame.size(), kHeadBytes);
    LOOM_ASSERT_OK_AND_ASSIGN(const Envelope decoded, Decode(frame));
    EXPECT_EQ(decoded.kind, kind);
    EXPECT_EQ(decoded.send_id, envelope.send_id);
    EXPECT_FALSE(decoded.HasPayload());
  }
}

TEST(EnvelopeTest, ShortFramesAreRefused) {
  Envelope envelope;
  envelope.kind = Kind::kData;
  envelope.bytes = 100;
  std::vector<std::byte> frame = Encode(envelope, Seeded(100, 1));
  frame.resize(kHeadBytes + 99);
  EXPECT_THAT(Decode(frame), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("frame of 163 bytes cannot hold its 100 bytes")));
  frame.resize(10);
  EXPECT_THAT(Decode(frame), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("frame of 10 bytes is shorter than its head")));
}

TEST(EnvelopeTest, PayloadsAboveTheMostAreRefused) {
  Envelope envelope;
  envelope.kind = Kind::kData;
  envelope.bytes = kMaxPayloadBytes;
  LOOM_ASSERT_OK_AND_ASSIGN(const Envelope decoded, Decode(Encode(envelope, {})));
  EXPECT_EQ(decoded.bytes, kMaxPayloadBytes);
  envelope.bytes = kMaxPayloadBytes + 1;
  EXPECT_THAT(Decode(Encode(envelope, {})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("announces 1099511627777 bytes of payload")));
}

TEST(EnvelopeTest, UnknownKindsAreRefusedByNumber) {
  std::vector<std::byte> frame(kHeadBytes);
  frame[0] = std::byte{9};
  EXPECT_THAT(Decode(frame),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown envelope kind 9")));
  frame[0] = std::byte{0};
  EXPECT_THAT(Decode(frame),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown envelope kind 0")));
}

}  // namespace
}  // namespace gloo_internal
}  // namespace loom
