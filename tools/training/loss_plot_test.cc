#include "tools/training/loss_plot.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Lines of steps [1, n], loss falling from 5.5 towards 2, an evaluation every 10th.
std::vector<MetricsLine> FallingRun(int64_t n) {
  std::vector<MetricsLine> lines;
  for (int64_t step = 1; step <= n; ++step) {
    MetricsLine line;
    line.step = step;
    line.loss = 2.0 + 3.5 * std::exp(-0.05 * static_cast<double>(step));
    if (step % 10 == 0) line.eval_loss = line.loss + 0.1;
    lines.push_back(line);
  }
  return lines;
}

size_t Count(absl::string_view text, absl::string_view what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != absl::string_view::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

// The points of each polyline, in document order.
std::vector<std::vector<std::pair<double, double>>> Polylines(const std::string& svg) {
  std::vector<std::vector<std::pair<double, double>>> out;
  for (size_t at = svg.find("<polyline"); at != std::string::npos;
       at = svg.find("<polyline", at + 1)) {
    const size_t begin = svg.find("points=\"", at) + 8;
    const std::string points = svg.substr(begin, svg.find('"', begin) - begin);
    out.emplace_back();
    for (absl::string_view pair : absl::StrSplit(points, ' ')) {
      const std::vector<std::string> xy = absl::StrSplit(pair, ',');
      EXPECT_EQ(xy.size(), 2u) << pair;
      if (xy.size() == 2) out.back().emplace_back(std::stod(xy[0]), std::stod(xy[1]));
    }
  }
  return out;
}

// Checks what a parser needs: every tag closed in order, attribute values quoted
// and free of '<', no bare '&', nothing active or external.
void ExpectWellFormed(const std::string& svg) {
  EXPECT_TRUE(absl::StartsWith(svg, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_TRUE(absl::EndsWith(svg, "</svg>\n"));
  std::vector<std::string> open;
  for (size_t at = svg.find('<'); at != std::string::npos; at = svg.find('<', at + 1)) {
    const size_t end = svg.find('>', at);
    ASSERT_NE(end, std::string::npos);
    const std::string tag = svg.substr(at + 1, end - at - 1);
    ASSERT_EQ(Count(tag, "\"") % 2, 0u) << tag;
    if (tag[0] == '/') {
      ASSERT_FALSE(open.empty()) << tag;
      EXPECT_EQ(open.back(), tag.substr(1));
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(tag.substr(0, tag.find(' ')));
    }
    at = end;
  }
  EXPECT_TRUE(open.empty()) << open.size() << " unclosed, first " << open[0];
  for (size_t at = svg.find('&'); at != std::string::npos; at = svg.find('&', at + 1)) {
    const std::string entity = svg.substr(at, svg.find(';', at) - at + 1);
    EXPECT_THAT(entity, ::testing::AnyOf("&amp;", "&lt;", "&gt;", "&quot;", "&apos;"));
  }
  for (const char* banned : {"<script", "href", "@import", "url(", "@font-face", "nan", "inf"}) {
    EXPECT_THAT(svg, Not(HasSubstr(banned)));
  }
}

TEST(LossPlotTest, TrainingAndEvalSeries) {
  LOOM_ASSERT_OK_AND_ASSIGN(const std::string svg, LossPlotSvg(FallingRun(100), LossPlotOptions()));
  ExpectWellFormed(svg);
  const auto polylines = Polylines(svg);
  ASSERT_EQ(polylines.size(), 2u);
  EXPECT_EQ(polylines[0].size(), 100u);
  EXPECT_EQ(polylines[1].size(), 10u);
  EXPECT_EQ(Count(svg, "<circle"), 10u + 1);  // the eval points and the legend's
  EXPECT_THAT(svg, HasSubstr(">Training loss</text>"));
  EXPECT_THAT(svg, HasSubstr(">training loss</text>"));
  EXPECT_THAT(svg, HasSubstr(">eval loss</text>"));
  EXPECT_THAT(svg, Not(HasSubstr("not drawn")));
  // Steps 1..100 on 0, 20, ..., 100; losses about 2.03..5.33 on 2, 3, ..., 6.
  for (const char* tick :
       {">0<", ">20<", ">40<", ">60<", ">80<", ">100<", ">2<", ">3<", ">4<", ">5<", ">6<"}) {
    EXPECT_THAT(svg, HasSubstr(tick));
  }
  // Left to right in step order, the falling loss drawn going down (y grows downwards).
  for (size_t i = 1; i < polylines[0].size(); ++i) {
    EXPECT_GT(polylines[0][i].first, polylines[0][i - 1].first);
    EXPECT_GE(polylines[0][i].second, polylines[0][i - 1].second);
  }
}

TEST(LossPlotTest, TitleAndLabelsAreEscaped) {
  LossPlotOptions options;
  options.title = "dp=2 <tp=2> & \"quoted\" 'it's'\x01";
  options.reference_lines = {{"uniform log(V) <&>", 5.545}};
  LOOM_ASSERT_OK_AND_ASSIGN(const std::string svg, LossPlotSvg(FallingRun(20), options));
  ExpectWellFormed(svg);
  EXPECT_THAT(
      svg, HasSubstr(">dp=2 &lt;tp=2&gt; &amp; &quot;quoted&quot; &apos;it&apos;s&apos;?</text>"));
  EXPECT_THAT(svg, HasSubstr(">uniform log(V) &lt;&amp;&gt; 5.545</text>"));
}

TEST(LossPlotTest, ReferenceLinesWidenTheLossAxis) {
  LossPlotOptions options;
  options.reference_lines = {{"uniform log(V)", 8.5}, {"floor", 0.25}};
  std::vector<MetricsLine> lines = FallingRun(30);
  LOOM_ASSERT_OK_AND_ASSIGN(const std::string svg, LossPlotSvg(lines, options));
  ExpectWellFormed(svg);
  EXPECT_EQ(Count(svg, "stroke-dasharray"), 2u);
  EXPECT_THAT(svg, HasSubstr(">uniform log(V) 8.5</text>"));
  EXPECT_THAT(svg, HasSubstr(">floor 0.25</text>"));
  EXPECT_THAT(svg, HasSubstr(">0<"));   // below 0.25
  EXPECT_THAT(svg, HasSubstr(">10<"));  // above 8.5
}

TEST(LossPlotTest, OnePoint) {
  std::vector<MetricsLine> lines(1);
  lines[0].step = 7;
  lines[0].loss = 4.25;
  LOOM_ASSERT_OK_AND_ASSIGN(const std::string svg, LossPlotSvg(lines, LossPlotOptions()));
  ExpectWellFormed(svg);
  const auto polylines = Polylines(svg);
  ASSERT_EQ(polylines.size(), 1u);
  EXPECT_EQ(polylines[0].size(), 1u);
  EXPECT_EQ(Count(svg, "<circle"), 1u);  // a marker, the polyline alone showing nothing
  EXPECT_THAT(svg, Not(HasSubstr("eval loss")));
  // Axes widened around the point: steps 6, 7, 8 and losses 4.0 to 4.5.
  for (const char* tick : {">6<", ">7<", ">8<", ">4.0<", ">4.2<", ">4.3<", ">4.5<"}) {
    EXPECT_THAT(svg, HasSubstr(tick));
  }
}

TEST(LossPlotTest, AllEqualLosses) {
  std::vector<MetricsLine> lines = FallingRun(10);
  for (MetricsLine& line : lines) {
    line.loss = 2.0;
    if (line.eval_loss) line.eval_loss = 2.0;
  }
  LOOM_ASSERT_OK_AND_ASSIGN(const std::string svg, LossPlotSvg(lines, LossPlotOptions()));
  ExpectWellFormed(svg);
  const auto polylines = Polylines(svg);
  ASSERT_EQ(polylines.size(), 2u);
  EXPECT_EQ(polylines[0].size(), 10u);
  for (const auto& p : polylines[0]) EXPECT_DOUBLE_EQ(p.second, polylines[0][0].second);
  // The loss axis widened to 1.90 .. 2.10 around the one value.
  for (const char* tick : {">1.90<", ">1.95<", ">2.00<", ">2.05<", ">2.10<"}) {
    EXPECT_THAT(svg, HasSubstr(tick));
  }
}

TEST(LossPlotTest, NonFiniteLossesAreSkippedAndCounted) {
  std::vector<MetricsLine> lines = FallingRun(50);
  lines[3].loss = kNan;
  lines[17].loss = kInf;
  lines[30].loss = -kInf;
  lines[49].loss = kNan;
  lines[19].eval_loss = kNan;
  LOOM_ASSERT_OK_AND_ASSIGN(const std::string svg, LossPlotSvg(lines, LossPlotOptions()));
  ExpectWellFormed(svg);
  const auto polylines = Polylines(svg);
  ASSERT_EQ(polylines.size(), 2u);
  EXPECT_EQ(polylines[0].size(), 46u);
  EXPECT_EQ(polylines[1].size(), 4u);
  EXPECT_THAT(svg,
              HasSubstr(">not drawn: 4 non-finite training losses, 1 non-finite eval loss</text>"));
  // The x axis still spans every step, the skipped last one included.
  EXPECT_THAT(svg, HasSubstr(">50<"));
}

TEST(LossPlotTest, NothingFinite) {
  std::vector<MetricsLine> lines = FallingRun(3);
  for (MetricsLine& line : lines) line.loss = kNan;
  LOOM_ASSERT_OK_AND_ASSIGN(const std::string svg, LossPlotSvg(lines, LossPlotOptions()));
  ExpectWellFormed(svg);
  EXPECT_EQ(Count(svg, "<polyline"), 0u);
  EXPECT_THAT(svg, HasSubstr(">not drawn: 3 non-finite training losses</text>"));
}

TEST(LossPlotTest, NoEvalPoints) {
  std::vector<MetricsLine> lines = FallingRun(9);  // evaluates every 10th step: never
  LOOM_ASSERT_OK_AND_ASSIGN(const std::string svg, LossPlotSvg(lines, LossPlotOptions()));
  ExpectWellFormed(svg);
  ASSERT_EQ(Polylines(svg).size(), 1u);
  EXPECT_EQ(Count(svg, "<circle"), 0u);
  EXPECT_THAT(svg, Not(HasSubstr("eval loss")));
}

TEST(LossPlotTest, OutOfOrderLinesAreDrawnInStepOrder) {
  std::vector<MetricsLine> lines = FallingRun(20);
  std::swap(lines[2], lines[15]);
  std::swap(lines[0], lines[19]);
  LOOM_ASSERT_OK_AND_ASSIGN(const std::string svg, LossPlotSvg(lines, LossPlotOptions()));
  LOOM_ASSERT_OK_AND_ASSIGN(const std::string sorted,
                            LossPlotSvg(FallingRun(20), LossPlotOptions()));
  EXPECT_EQ(svg, sorted);
}

TEST(LossPlotTest, BadInput) {
  EXPECT_THAT(LossPlotSvg({}, LossPlotOptions()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("LossPlotSvg: no metrics lines to plot")));
  LossPlotOptions small;
  small.width = 100;
  EXPECT_THAT(LossPlotSvg(FallingRun(3), small),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("width 100 x height 480 is below the minimum 240 x 180")));
  LossPlotOptions bad_line;
  bad_line.reference_lines = {{"log(V)", kNan}};
  EXPECT_THAT(LossPlotSvg(FallingRun(3), bad_line),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("reference line \"log(V)\" at nan is not finite")));
}

}  // namespace
}  // namespace loom
