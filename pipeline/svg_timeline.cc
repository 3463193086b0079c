#include "pipeline/svg_timeline.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "core/status_macros.h"
#include "pipeline/action.h"
#include "pipeline/stage_layout.h"

namespace loom {
namespace {

// Geometry, in pixels. The side margins hold "rank 12" and "idle 27.3%".
constexpr double kLeft = 64;
constexpr double kRight = 76;
constexpr double kRowGap = 4;
constexpr double kFontSize = 11;
// Width of one character of the 11 px sans-serif labels, a little generous so
// that a label judged to fit does fit in common fonts.
constexpr double kCharWidth = 6.6;
constexpr double kMinWidth = 200;
constexpr double kMaxWidth = 100000;
constexpr double kMinRowHeight = 8;
constexpr double kMaxRowHeight = 200;

struct Rgb {
  int r = 0;
  int g = 0;
  int b = 0;
};

// Tableau-like colours that stay apart for the common kinds of colour blindness
// between F and the backward kinds.
Rgb KindColour(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return {0x4c, 0x78, 0xa8};
    case ActionKind::kBackward:
      return {0xf5, 0x85, 0x18};
    case ActionKind::kBackwardInput:
      return {0xe4, 0x57, 0x56};
    case ActionKind::kBackwardWeight:
      return {0x54, 0xa2, 0x4b};
    default:
      return {0x80, 0x80, 0x80};
  }
}

absl::string_view KindLegend(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return "F forward";
    case ActionKind::kBackward:
      return "B backward";
    case ActionKind::kBackwardInput:
      return "I backward, input gradient";
    case ActionKind::kBackwardWeight:
      return "W backward, weight gradient";
    default:
      return "";
  }
}

// Lighten mixes `colour` with white: 0 keeps it, 1 is white.
Rgb Lighten(Rgb colour, double amount) {
  const auto mix = [amount](int c) {
    return static_cast<int>(std::lround(c + (255 - c) * amount));
  };
  return {mix(colour.r), mix(colour.g), mix(colour.b)};
}

std::string Hex(Rgb colour) { return absl::StrFormat("#%02x%02x%02x", colour.r, colour.g, colour.b); }

// TextColour picks black or white, whichever reads better on `fill`.
absl::string_view TextColour(Rgb fill) {
  const double luma = 0.299 * fill.r + 0.587 * fill.g + 0.114 * fill.b;
  return luma > 150 ? "#000000" : "#ffffff";
}

// Px writes a coordinate with at most two decimals and no trailing zeros, so the
// file stays small and identical across runs.
std::string Px(double value) {
  std::string text = absl::StrFormat("%.2f", value);
  text.erase(text.find_last_not_of('0') + 1);
  if (text.back() == '.') text.pop_back();
  if (text == "-0") text = "0";
  return text;
}

std::string XmlEscape(absl::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // XML 1.0 allows no control characters but tab, newline and return.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') {
          out += ' ';
        } else {
          out += c;
        }
    }
  }
  return out;
}

// TickStep returns the smallest 1, 2 or 5 times a power of ten that cuts `span`
// into at most 10 intervals.
double TickStep(double span) {
  if (!(span > 0)) return 1;
  double step = std::pow(10.0, std::floor(std::log10(span / 10)));
  for (const double factor : {1.0, 2.0, 5.0, 10.0}) {
    if (span / (step * factor) <= 10) return step * factor;
  }
  return step * 10;
}

// ChunkOf returns the position of `stage` among its rank's stages (0 for the
// first model chunk).
int64_t ChunkOf(const StageLayout& layout, int64_t stage) {
  const std::vector<int64_t> stages = layout.StagesOf(layout.RankOf(stage));
  const auto it = std::find(stages.begin(), stages.end(), stage);
  return it == stages.end() ? 0 : it - stages.begin();
}

std::string Percent(double ratio) { return absl::StrFormat("%.2f%%", 100 * ratio); }

std::string Title(const Schedule& schedule, const SimulationResult& result) {
  const StageLayout& layout = schedule.layout;
  return absl::StrCat(
      schedule.name.empty() ? "schedule" : schedule.name, ": p=", layout.num_ranks(),
      ", m=", schedule.num_microbatches, ", v=", layout.stages_per_rank(), " (",
      layout.placement() == StagePlacement::kLoop ? "loop" : "v-shape", "), makespan ",
      absl::StrFormat("%g", result.makespan), ", bubble ratio ",
      absl::StrFormat("%.4f", result.bubble_ratio), " (", Percent(result.bubble_ratio), ")");
}

}  // namespace

absl::StatusOr<std::string> ToSvgTimeline(const Schedule& schedule, const SimulationResult& result,
                                          const SvgTimelineOptions& options) {
  LOOM_RETURN_IF_ERROR(CheckSimulationOf(schedule, result));
  // The negated comparisons also refuse NaN.
  if (!(options.width >= kMinWidth && options.width <= kMaxWidth)) {
    return absl::InvalidArgumentError(absl::StrCat("width=", options.width, " must be between ",
                                                   kMinWidth, " and ", kMaxWidth, " pixels"));
  }
  if (!(options.row_height >= kMinRowHeight && options.row_height <= kMaxRowHeight)) {
    return absl::InvalidArgumentError(absl::StrCat("row_height=", options.row_height,
                                                   " must be between ", kMinRowHeight, " and ",
                                                   kMaxRowHeight, " pixels"));
  }

  const double width = options.width;
  const double row = options.row_height;
  const double plot_width = width - kLeft - kRight;
  const double top = options.subtitle.empty() ? 34 : 50;
  const int64_t num_ranks = schedule.num_ranks();
  const double axis_y = top + static_cast<double>(num_ranks) * (row + kRowGap) + 2;
  const double makespan = result.makespan;
  // Pixels per time unit; with nothing to draw the axis still spans one unit.
  const double span = makespan > 0 ? makespan : 1;
  const double unit = plot_width / span;
  const auto x_of = [unit](double time) { return kLeft + time * unit; };
  const auto row_y = [top, row](int64_t rank) {
    return top + static_cast<double>(rank) * (row + kRowGap);
  };
  const int64_t v = schedule.layout.stages_per_rank();
  const std::string title = Title(schedule, result);

  // The body comes first: the height depends on how many lines the legend takes.
  std::string svg;
  absl::StrAppend(&svg, "<text class=\"title\" x=\"", Px(kLeft), "\" y=\"20\" font-size=\"14\">",
                  XmlEscape(title), "</text>\n");
  if (!options.subtitle.empty()) {
    absl::StrAppend(&svg, "<text class=\"subtitle\" x=\"", Px(kLeft), "\" y=\"38\">",
                    XmlEscape(options.subtitle), "</text>\n");
  }

  // Lanes: the grey that stays visible is idle time.
  for (int64_t rank = 0; rank < num_ranks; ++rank) {
    const double y = row_y(rank);
    const double text_y = y + row / 2 + kFontSize * 0.35;
    absl::StrAppend(&svg, "<rect class=\"lane\" x=\"", Px(kLeft), "\" y=\"", Px(y),
                    "\" width=\"", Px(plot_width), "\" height=\"", Px(row),
                    "\" fill=\"#e8e8e8\"/>\n");
    absl::StrAppend(&svg, "<text class=\"rank\" x=\"", Px(kLeft - 8), "\" y=\"", Px(text_y),
                    "\" text-anchor=\"end\">rank ", rank, "</text>\n");
    absl::StrAppend(&svg, "<text class=\"idle\" x=\"", Px(kLeft + plot_width + 6), "\" y=\"",
                    Px(text_y), "\">idle ",
                    absl::StrFormat("%.1f%%", 100 * result.ranks[rank].bubble_ratio), "</text>\n");
  }

  // Boxes, with their labels on top.
  bool kind_present[kNumActionKinds] = {};
  for (int64_t rank = 0; rank < num_ranks; ++rank) {
    const double y = row_y(rank);
    for (const TimedAction& timed : result.ranks[rank].actions) {
      const Action& a = timed.action;
      if (!IsCompute(a.kind)) continue;
      kind_present[static_cast<int>(a.kind)] = true;
      const double x = x_of(timed.start);
      const double w = (timed.end - timed.start) * unit;
      const double lighten = v > 1 ? 0.5 * static_cast<double>(ChunkOf(schedule.layout, a.stage)) /
                                         static_cast<double>(v - 1)
                                   : 0;
      const Rgb fill = Lighten(KindColour(a.kind), lighten);
      absl::StrAppend(&svg, "<rect class=\"action ", ActionKindName(a.kind), "\" x=\"", Px(x),
                      "\" y=\"", Px(y), "\" width=\"", Px(w), "\" height=\"", Px(row),
                      "\" fill=\"", Hex(fill), "\" stroke=\"#ffffff\" stroke-width=\"0.5\"><title>",
                      a.ToString(), ": ", absl::StrFormat("%g", timed.start), " to ",
                      absl::StrFormat("%g", timed.end), "</title></rect>\n");
      if (row < 14) continue;
      std::string label = a.ToString();
      if (w < static_cast<double>(label.size()) * kCharWidth + 4) {
        label = absl::StrCat(a.microbatch);
        if (w < static_cast<double>(label.size()) * kCharWidth + 3) continue;
      }
      absl::StrAppend(&svg, "<text class=\"label\" x=\"", Px(x + w / 2), "\" y=\"",
                      Px(y + row / 2 + kFontSize * 0.35), "\" text-anchor=\"middle\" fill=\"",
                      TextColour(fill), "\">", label, "</text>\n");
    }
  }

  // Time axis.
  absl::StrAppend(&svg, "<line class=\"axis\" x1=\"", Px(kLeft), "\" y1=\"", Px(axis_y),
                  "\" x2=\"", Px(kLeft + plot_width), "\" y2=\"", Px(axis_y),
                  "\" stroke=\"#000000\"/>\n");
  absl::StrAppend(&svg, "<text class=\"axis-label\" x=\"", Px(kLeft - 8), "\" y=\"",
                  Px(axis_y + 18), "\" text-anchor=\"end\">time</text>\n");
  const double step = TickStep(span);
  // Integer tick indices avoid the drift of adding `step` over and over.
  const int64_t ticks = static_cast<int64_t>(std::floor(span / step + 1e-9));
  for (int64_t i = 0; i <= ticks; ++i) {
    const double t = static_cast<double>(i) * step;
    const double x = x_of(t);
    absl::StrAppend(&svg, "<line class=\"tick\" x1=\"", Px(x), "\" y1=\"", Px(axis_y),
                    "\" x2=\"", Px(x), "\" y2=\"", Px(axis_y + 5), "\" stroke=\"#000000\"/>\n");
    absl::StrAppend(&svg, "<text class=\"tick-label\" x=\"", Px(x), "\" y=\"", Px(axis_y + 18),
                    "\" text-anchor=\"middle\">", absl::StrFormat("%g", t), "</text>\n");
  }

  // Legend, wrapped onto more lines when the picture is narrow.
  double legend_x = kLeft;
  double legend_y = axis_y + 38;
  const auto legend_entry = [&](absl::string_view fill, absl::string_view text) {
    const double entry_width = 16 + static_cast<double>(text.size()) * kCharWidth;
    if (legend_x > kLeft && legend_x + entry_width > width - 8) {
      legend_x = kLeft;
      legend_y += 18;
    }
    absl::StrAppend(&svg, "<rect class=\"legend\" x=\"", Px(legend_x), "\" y=\"",
                    Px(legend_y - 10), "\" width=\"12\" height=\"12\" fill=\"", fill, "\"/>\n");
    absl::StrAppend(&svg, "<text class=\"legend\" x=\"", Px(legend_x + 16), "\" y=\"",
                    Px(legend_y), "\">", XmlEscape(text), "</text>\n");
    legend_x += entry_width + 18;
  };
  for (const ActionKind kind : {ActionKind::kForward, ActionKind::kBackward,
                                ActionKind::kBackwardInput, ActionKind::kBackwardWeight}) {
    if (kind_present[static_cast<int>(kind)]) legend_entry(Hex(KindColour(kind)), KindLegend(kind));
  }
  legend_entry("#e8e8e8", "idle");
  if (v > 1) {
    legend_entry(Hex(Lighten(KindColour(ActionKind::kForward), 0.5)),
                 "lighter: a later stage (model chunk) of the rank");
  }
  const double height = legend_y + 12;

  const std::string header = absl::StrCat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", Px(width), "\" height=\"", Px(height),
      "\" viewBox=\"0 0 ", Px(width), " ", Px(height),
      "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"", Px(kFontSize), "\">\n",
      "<title>", XmlEscape(title), "</title>\n", "<rect class=\"background\" x=\"0\" y=\"0\" width=\"", Px(width), "\" height=\"",
      Px(height), "\" fill=\"#ffffff\"/>\n");
  return absl::StrCat(header, svg, "</svg>\n");
}

}  // namespace loom
