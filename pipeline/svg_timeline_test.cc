#include "pipeline/svg_timeline.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/action.h"
#include "pipeline/generators.h"
#include "pipeline/schedule.h"
#include "pipeline/simulator.h"
#include "topology/parallel_config.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

int64_t Count(absl::string_view text, absl::string_view needle) {
  int64_t count = 0;
  for (size_t at = text.find(needle); at != absl::string_view::npos;
       at = text.find(needle, at + needle.size())) {
    ++count;
  }
  return count;
}

// CheckTags returns "" when every element is closed in order, only entities
// follow '&', and no '<' or '>' stands loose in text or attributes; otherwise
// what is wrong.
std::string CheckTags(absl::string_view svg) {
  std::vector<std::string> open;
  size_t pos = 0;
  while (pos < svg.size()) {
    const size_t lt = svg.find('<', pos);
    const absl::string_view text = svg.substr(pos, lt == absl::string_view::npos ? svg.size() - pos
                                                                                 : lt - pos);
    if (text.find('>') != absl::string_view::npos) return absl::StrCat("loose > in \"", text, "\"");
    for (size_t amp = text.find('&'); amp != absl::string_view::npos; amp = text.find('&', amp + 1)) {
      const absl::string_view rest = text.substr(amp);
      bool known = false;
      for (const absl::string_view entity : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"}) {
        known = known || absl::StartsWith(rest, entity);
      }
      if (!known) return absl::StrCat("bare & in \"", text, "\"");
    }
    if (lt == absl::string_view::npos) break;
    const size_t gt = svg.find('>', lt);
    if (gt == absl::string_view::npos) return "unterminated tag";
    const absl::string_view tag = svg.substr(lt + 1, gt - lt - 1);
    if (tag.find('<') != absl::string_view::npos) return absl::StrCat("< inside tag ", tag);
    if (absl::StartsWith(tag, "/")) {
      const std::string name(tag.substr(1));
      if (open.empty() || open.back() != name) {
        return absl::StrCat("</", name, "> closes ", open.empty() ? "nothing" : open.back());
      }
      open.pop_back();
    } else if (!absl::EndsWith(tag, "/")) {
      open.emplace_back(tag.substr(0, tag.find(' ')));
    }
    pos = gt + 1;
  }
  if (!open.empty()) return absl::StrCat("<", open.back(), "> is never closed");
  return "";
}

TEST(SvgTimelineTest, TagCheckerCatchesBrokenMarkup) {
  EXPECT_EQ(CheckTags("<svg><rect/><g><text>a &amp; b</text></g></svg>"), "");
  EXPECT_NE(CheckTags("<svg><g></svg>"), "");
  EXPECT_NE(CheckTags("<svg><text>a < b</text></svg>"), "");
  EXPECT_NE(CheckTags("<svg><text>a & b</text></svg>"), "");
  EXPECT_NE(CheckTags("<svg>"), "");
}

TEST(SvgTimelineTest, HeaderExample) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, Make1F1BSchedule(4, 8));
  LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run, Simulate(s, SimulationCosts{}));
  LOOM_ASSERT_OK_AND_ASSIGN(std::string svg, ToSvgTimeline(s, run));
  EXPECT_THAT(svg, StartsWith("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"1200\" height=\""));
  EXPECT_EQ(CheckTags(svg), "");
  EXPECT_THAT(svg, HasSubstr("<title>1f1b: p=4, m=8, v=1 (loop), makespan 33, bubble ratio 0.2727 "
                             "(27.27%)</title>"));
  // 1060 px for 33 time units; rank 0's first forward at the left edge.
  EXPECT_THAT(svg, HasSubstr("<rect class=\"action F\" x=\"64\" y=\"34\" width=\"32.12\" "
                             "height=\"26\" fill=\"#4c78a8\" stroke=\"#ffffff\" "
                             "stroke-width=\"0.5\"><title>0F0: 0 to 1</title></rect>"));
  EXPECT_THAT(svg, HasSubstr(">0F0</text>"));
  EXPECT_THAT(svg, HasSubstr(">rank 3</text>"));
  EXPECT_THAT(svg, HasSubstr(">idle 27.3%</text>"));
  EXPECT_THAT(svg, HasSubstr(">F forward</text>"));
  EXPECT_THAT(svg, HasSubstr(">B backward</text>"));
  EXPECT_THAT(svg, Not(HasSubstr("weight gradient")));
  EXPECT_THAT(svg, HasSubstr(">30</text>"));  // The last tick: steps of 5 up to 33.
  EXPECT_THAT(svg, Not(HasSubstr(">35</text>")));
  // Nothing but the inputs decides the picture.
  LOOM_ASSERT_OK_AND_ASSIGN(std::string again, ToSvgTimeline(s, run));
  EXPECT_EQ(svg, again);
}

struct Case {
  PipelineScheduleKind kind;
  int64_t p;
  int64_t m;
  int64_t v;
};

TEST(SvgTimelineTest, OneBoxPerComputeAction) {
  for (const Case& c : std::vector<Case>{{PipelineScheduleKind::kGPipe, 4, 8, 1},
                                          {PipelineScheduleKind::k1F1B, 1, 1, 1},
                                          {PipelineScheduleKind::k1F1B, 8, 32, 1},
                                          {PipelineScheduleKind::kInterleaved1F1B, 4, 8, 2},
                                          {PipelineScheduleKind::kZeroBubbleH1, 4, 8, 1},
                                          {PipelineScheduleKind::kZeroBubbleV, 4, 8, 2},
                                          {PipelineScheduleKind::kZeroBubbleV, 16, 64, 2}}) {
    LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, MakeSchedule(c.kind, c.p, c.m, c.v));
    SCOPED_TRACE(absl::StrCat(s.name, " p=", c.p, " m=", c.m, " v=", c.v));
    LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run, Simulate(s, SimulationCosts{}));
    LOOM_ASSERT_OK_AND_ASSIGN(std::string svg, ToSvgTimeline(s, run));
    EXPECT_EQ(CheckTags(svg), "");
    int64_t per_kind[kNumActionKinds] = {};
    int64_t computes = 0;
    for (const std::vector<Action>& actions : s.ranks) {
      for (const Action& a : actions) {
        ++per_kind[static_cast<int>(a.kind)];
        ++computes;
      }
    }
    EXPECT_EQ(Count(svg, "<rect class=\"action "), computes);
    for (const ActionKind kind : {ActionKind::kForward, ActionKind::kBackward,
                                  ActionKind::kBackwardInput, ActionKind::kBackwardWeight}) {
      EXPECT_EQ(Count(svg, absl::StrCat("<rect class=\"action ", ActionKindName(kind), "\"")),
                per_kind[static_cast<int>(kind)])
          << ActionKindName(kind);
    }
    EXPECT_EQ(Count(svg, "<rect class=\"lane\""), c.p);
    EXPECT_THAT(svg, HasSubstr(absl::StrCat("<title>", s.name, ": p=", c.p, ", m=", c.m,
                                            ", v=", c.v)));
  }
}

TEST(SvgTimelineTest, LaterChunksAreLighter) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, MakeInterleaved1F1BSchedule(4, 8, 2));
  LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run, Simulate(s, SimulationCosts{}));
  LOOM_ASSERT_OK_AND_ASSIGN(std::string svg, ToSvgTimeline(s, run));
  // #4c78a8 mixed halfway with white; 8 forwards of the second chunk on each rank.
  EXPECT_EQ(Count(svg, "<rect class=\"action F\""), 64);
  EXPECT_EQ(Count(svg, "fill=\"#a6bcd4\" stroke"), 32);
  EXPECT_THAT(svg, HasSubstr("lighter: a later stage (model chunk) of the rank"));
  EXPECT_THAT(svg, HasSubstr("v=2 (loop), makespan"));

  LOOM_ASSERT_OK_AND_ASSIGN(Schedule zbv, MakeZeroBubbleVSchedule(2, 4));
  LOOM_ASSERT_OK_AND_ASSIGN(run, Simulate(zbv, SimulationCosts{}));
  LOOM_ASSERT_OK_AND_ASSIGN(svg, ToSvgTimeline(zbv, run));
  EXPECT_THAT(svg, HasSubstr("zb-v: p=2, m=4, v=2 (v-shape)"));
  EXPECT_THAT(svg, HasSubstr(">I backward, input gradient</text>"));
  EXPECT_THAT(svg, HasSubstr(">W backward, weight gradient</text>"));
  EXPECT_THAT(svg, Not(HasSubstr(">B backward</text>")));
}

TEST(SvgTimelineTest, LabelsShrinkWithTheBoxes) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, Make1F1BSchedule(4, 64));
  LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run, Simulate(s, SimulationCosts{}));
  SvgTimelineOptions options;
  options.width = 1200;
  LOOM_ASSERT_OK_AND_ASSIGN(std::string svg, ToSvgTimeline(s, run, options));
  // 1060 px over 201 units: a forward is 5.3 px wide, too narrow for any label;
  // a backward, 10.5 px, shows a one-digit microbatch only.
  EXPECT_THAT(svg, Not(HasSubstr(">0F0</text>")));
  EXPECT_THAT(svg, Not(HasSubstr(">0B0</text>")));
  EXPECT_EQ(Count(svg, "class=\"label\""), 4 * 10);  // Microbatches 0-9 of each rank's B's.
  options.row_height = 12;
  LOOM_ASSERT_OK_AND_ASSIGN(svg, ToSvgTimeline(s, run, options));
  EXPECT_EQ(Count(svg, "class=\"label\""), 0);
}

TEST(SvgTimelineTest, EscapesTextAndShowsTheSubtitle) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, MakeGPipeSchedule(2, 2));
  s.name = "<a & b's \"pipeline\">";
  LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run, Simulate(s, SimulationCosts{}));
  SvgTimelineOptions options;
  options.subtitle = "costs F=1 B=2 & latency=0";
  LOOM_ASSERT_OK_AND_ASSIGN(std::string svg, ToSvgTimeline(s, run, options));
  EXPECT_EQ(CheckTags(svg), "");
  EXPECT_THAT(svg, HasSubstr("<title>&lt;a &amp; b&apos;s &quot;pipeline&quot;&gt;: p=2"));
  EXPECT_THAT(svg, HasSubstr(">costs F=1 B=2 &amp; latency=0</text>"));
}

TEST(SvgTimelineTest, Errors) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, Make1F1BSchedule(4, 8));
  LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run, Simulate(s, SimulationCosts{}));
  SvgTimelineOptions narrow;
  narrow.width = 50;
  EXPECT_THAT(ToSvgTimeline(s, run, narrow),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "width=50 must be between 200 and 100000 pixels"));
  SvgTimelineOptions nan_width;
  nan_width.width = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(ToSvgTimeline(s, run, nan_width),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("width=nan")));
  SvgTimelineOptions flat;
  flat.row_height = 0;
  EXPECT_THAT(ToSvgTimeline(s, run, flat),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "row_height=0 must be between 8 and 200 pixels"));
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule other, Make1F1BSchedule(2, 8));
  EXPECT_THAT(ToSvgTimeline(other, run),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "the simulation has 4 ranks, the schedule \"1f1b\" has 2"));
}

}  // namespace
}  // namespace loom
