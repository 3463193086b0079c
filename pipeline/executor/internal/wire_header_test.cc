#include "pipeline/executor/internal/wire_header.h"

#include <cstdint>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/action.h"

namespace loom {
namespace pipeline_executor_internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(WireHeaderTest, RoundTrips) {
  const Action send = {ActionKind::kSendBackward, 3, 17};
  LOOM_ASSERT_OK_AND_ASSIGN(WireHeaderWords words, EncodeWireHeader(send, {64, 512, 3}));
  LOOM_ASSERT_OK_AND_ASSIGN(WireHeader header, DecodeWireHeader(words));
  EXPECT_EQ(header.send, send);
  EXPECT_THAT(header.shape, ElementsAre(64, 512, 3));
  EXPECT_EQ(header.payload_bytes, 64 * 512 * 3 * 4);
}

TEST(WireHeaderTest, ScalarAndMaximalRank) {
  const Action send = {ActionKind::kSendForward, 0, 0};
  LOOM_ASSERT_OK_AND_ASSIGN(WireHeaderWords scalar, EncodeWireHeader(send, {}));
  LOOM_ASSERT_OK_AND_ASSIGN(WireHeader header, DecodeWireHeader(scalar));
  EXPECT_TRUE(header.shape.empty());
  EXPECT_EQ(header.payload_bytes, 4);
  const std::vector<int64_t> eight = {1, 2, 3, 4, 5, 6, 7, 8};
  LOOM_ASSERT_OK_AND_ASSIGN(WireHeaderWords full, EncodeWireHeader(send, eight));
  LOOM_ASSERT_OK_AND_ASSIGN(header, DecodeWireHeader(full));
  EXPECT_EQ(header.shape, eight);
}

TEST(WireHeaderTest, EncodeRefusesTooManyDimensions) {
  EXPECT_THAT(EncodeWireHeader({ActionKind::kSendForward, 1, 2}, {1, 1, 1, 1, 1, 1, 1, 1, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("1SEND_F2: a tensor of shape [1,1,1,1,1,1,1,1,1] has more than 8")));
  EXPECT_THAT(EncodeWireHeader({ActionKind::kSendForward, 1, 2}, {4, -1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("[4,-1]")));
}

TEST(WireHeaderTest, DecodeRefusesWhatIsNotAHeader) {
  LOOM_ASSERT_OK_AND_ASSIGN(const WireHeaderWords good,
                            EncodeWireHeader({ActionKind::kSendForward, 1, 2}, {4, 8}));
  WireHeaderWords words = good;
  words[0] = 12345;
  EXPECT_THAT(DecodeWireHeader(words),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("magic 0x3039")));
  words = good;
  words[1] = static_cast<int64_t>(ActionKind::kForward);
  EXPECT_THAT(DecodeWireHeader(words),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("action kind 0 is not SEND_F or SEND_B")));
  words = good;
  words[4] = 9;
  EXPECT_THAT(DecodeWireHeader(words),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("9 dimensions")));
  words = good;
  words[5 + 8] += 4;  // The payload size no longer matches the shape.
  EXPECT_THAT(DecodeWireHeader(words),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("shape [4,8] with 132 payload bytes")));
  words = good;
  words[3] = -1;
  EXPECT_THAT(DecodeWireHeader(words),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("microbatch -1")));
}

}  // namespace
}  // namespace pipeline_executor_internal
}  // namespace loom
