#include "pipeline/action.h"

#include <sstream>
#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ActionTest, HeaderExample) {
  const Action a = {ActionKind::kRecvBackward, 1, 2};
  EXPECT_EQ(a.ToString(), "1RECV_B2");
  EXPECT_THAT(ParseAction("2I3"), IsOkAndHolds(Action{ActionKind::kBackwardInput, 2, 3}));
  EXPECT_THAT(ParseAction("0SEND_F1"), IsOkAndHolds(Action{ActionKind::kSendForward, 0, 1}));
  EXPECT_EQ(MatchingAction(*ParseAction("0SEND_F1")), (Action{ActionKind::kRecvForward, 1, 1}));
  EXPECT_THAT(ParseActionList("0F0, 0SEND_F0 0F1"),
              IsOkAndHolds(ElementsAre(Action{ActionKind::kForward, 0, 0},
                                       Action{ActionKind::kSendForward, 0, 0},
                                       Action{ActionKind::kForward, 0, 1})));
  EXPECT_THAT(ParseAction("1X3"), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("cannot parse action \"1X3\"")));
}

// The examples of the issue, in PyTorch pipelining's notation.
TEST(ActionTest, PyTorchNotation) {
  EXPECT_THAT(ParseAction("0F0"), IsOkAndHolds(Action{ActionKind::kForward, 0, 0}));
  EXPECT_THAT(ParseAction("1B2"), IsOkAndHolds(Action{ActionKind::kBackward, 1, 2}));
  EXPECT_THAT(ParseAction("2I3"), IsOkAndHolds(Action{ActionKind::kBackwardInput, 2, 3}));
  EXPECT_THAT(ParseAction("2W3"), IsOkAndHolds(Action{ActionKind::kBackwardWeight, 2, 3}));
  EXPECT_THAT(ParseAction("0SEND_F1"), IsOkAndHolds(Action{ActionKind::kSendForward, 0, 1}));
  EXPECT_THAT(ParseAction("0RECV_B1"), IsOkAndHolds(Action{ActionKind::kRecvBackward, 0, 1}));
  EXPECT_THAT(ParseAction("12RECV_F345"), IsOkAndHolds(Action{ActionKind::kRecvForward, 12, 345}));
  EXPECT_THAT(ParseAction("3SEND_B0"), IsOkAndHolds(Action{ActionKind::kSendBackward, 3, 0}));
}

TEST(ActionTest, RoundTripsEveryKind) {
  const ActionKind kinds[] = {ActionKind::kForward,       ActionKind::kBackward,
                              ActionKind::kBackwardInput, ActionKind::kBackwardWeight,
                              ActionKind::kSendForward,   ActionKind::kRecvForward,
                              ActionKind::kSendBackward,  ActionKind::kRecvBackward};
  for (const ActionKind kind : kinds) {
    for (const int64_t stage : {0, 1, 7, 63}) {
      for (const int64_t mb : {0, 5, 100}) {
        const Action action{kind, stage, mb};
        EXPECT_THAT(ParseAction(action.ToString()), IsOkAndHolds(action)) << action;
      }
    }
    EXPECT_EQ(IsCompute(kind), !IsCommunication(kind));
    EXPECT_EQ(IsCommunication(kind), IsSend(kind) || IsRecv(kind));
  }
  std::ostringstream os;
  os << Action{ActionKind::kSendBackward, 3, 4};
  EXPECT_EQ(os.str(), "3SEND_B4");
}

TEST(ActionTest, RejectsMalformedText) {
  for (const char* text : {"", "F0", "0F", "0f0", "0 F0", "0F0 ", "-1F0", "0SEND0", "0SEND_X0",
                           "0F0x", "99999999999999999999F0"}) {
    EXPECT_THAT(ParseAction(text),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(std::string("cannot parse action \"") + text + "\"")))
        << text;
  }
}

TEST(ActionTest, ParsesListsAndNamesTheBadCell) {
  EXPECT_THAT(ParseActionList(""), IsOkAndHolds(ElementsAre()));
  EXPECT_THAT(ParseActionList(" 1RECV_F0,1F0,,1B0 \n"),
              IsOkAndHolds(ElementsAre(Action{ActionKind::kRecvForward, 1, 0},
                                       Action{ActionKind::kForward, 1, 0},
                                       Action{ActionKind::kBackward, 1, 0})));
  EXPECT_THAT(ParseActionList("0F0,0F1,0Q2"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cell 2 of \"0F0,0F1,0Q2\": cannot parse action \"0Q2\"")));
}

TEST(ActionTest, MatchingActionPairsMessages) {
  EXPECT_EQ(MatchingAction({ActionKind::kSendForward, 2, 5}),
            (Action{ActionKind::kRecvForward, 3, 5}));
  EXPECT_EQ(MatchingAction({ActionKind::kRecvForward, 3, 5}),
            (Action{ActionKind::kSendForward, 2, 5}));
  EXPECT_EQ(MatchingAction({ActionKind::kSendBackward, 3, 5}),
            (Action{ActionKind::kRecvBackward, 2, 5}));
  EXPECT_EQ(MatchingAction({ActionKind::kRecvBackward, 2, 5}),
            (Action{ActionKind::kSendBackward, 3, 5}));
  EXPECT_EQ(MatchingAction({ActionKind::kForward, 2, 5}), std::nullopt);
  EXPECT_EQ(MatchingAction({ActionKind::kBackwardWeight, 2, 5}), std::nullopt);
}

}  // namespace
}  // namespace loom
