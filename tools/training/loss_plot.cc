#include "tools/training/loss_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"

namespace loom {
namespace {

constexpr char kName[] = "LossPlotSvg";
constexpr int kMinWidth = 240;
constexpr int kMinHeight = 180;
// Margins around the plot area: room for the title and note above, tick labels to
// the left and below, axis names beyond them.
constexpr double kLeft = 72, kRight = 16, kTop = 52, kBottom = 48;
constexpr char kTrainColor[] = "#1f77b4";
constexpr char kEvalColor[] = "#d62728";
constexpr char kReferenceColor[] = "#7f7f7f";

// EscapeXml makes `text` safe as element content and attribute values. Control
// characters, which XML 1.0 cannot carry even escaped, become '?'.
std::string EscapeXml(absl::string_view text) {
  std::string out = absl::StrReplaceAll(
      text, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}, {"'", "&apos;"}});
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') c = '?';
  }
  return out;
}

// Nice returns 1, 2, 5 or 10 times a power of ten near `x` > 0: the nearest one with
// `round`, otherwise the smallest not below `x` (Heckbert, "Nice numbers for graph
// labels", Graphics Gems, 1990).
double Nice(double x, bool round) {
  const double power = std::pow(10.0, std::floor(std::log10(x)));
  // Shaved by a hair, so that a range of 2.1 - 1.9 = 0.20000000000000018 counts as 2.
  const double f = x / power * (1 - 1e-9);
  if (round) return power * (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10);
  return power * (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10);
}

// An axis from lo to hi with a tick every `step`; lo and hi are multiples of step.
struct Axis {
  double lo = 0;
  double hi = 1;
  double step = 1;
  int64_t ticks() const { return std::llround((hi - lo) / step) + 1; }
  double Fraction(double v) const { return (v - lo) / (hi - lo); }
};

// NiceAxis covers [lo, hi] with about five ticks no closer than `min_step`; a single
// value is widened around itself first.
Axis NiceAxis(double lo, double hi, double min_step) {
  if (!(hi > lo)) {
    const double pad = std::max({std::abs(lo) * 0.05, min_step, 1e-3});
    lo -= pad;
    hi += pad;
  }
  const double range = Nice(hi - lo, false);
  const double step = std::max(Nice(range / 4, true), min_step);
  return {std::floor(lo / step) * step, std::ceil(hi / step) * step, step};
}

// Label prints a tick value with the decimals its axis's step needs.
std::string Label(double v, const Axis& axis) {
  const double magnitude = std::max(std::abs(axis.lo), std::abs(axis.hi));
  if (magnitude >= 1e7 || axis.step < 1e-4) return absl::StrFormat("%g", v);
  const int decimals = std::max(0, -static_cast<int>(std::floor(std::log10(axis.step) + 1e-9)));
  if (std::abs(v) < axis.step * 1e-6) v = 0;  // no "-0.0" from rounding
  return absl::StrFormat("%.*f", decimals, v);
}

struct Point {
  double step;
  double loss;
};

std::string Points(const std::vector<Point>& points, const Axis& x, const Axis& y, double left,
                   double top, double w, double h) {
  std::string out;
  for (const Point& p : points) {
    absl::StrAppendFormat(&out, "%s%.1f,%.1f", out.empty() ? "" : " ",
                          left + x.Fraction(p.step) * w, top + (1 - y.Fraction(p.loss)) * h);
  }
  return out;
}

// Skipped says how many losses of a series were not drawn, or nothing for none.
std::string Skipped(int64_t n, absl::string_view series) {
  if (n == 0) return "";
  return absl::StrCat(n, " non-finite ", series, n == 1 ? " loss" : " losses");
}

}  // namespace

absl::StatusOr<std::string> LossPlotSvg(const std::vector<MetricsLine>& lines,
                                        const LossPlotOptions& options) {
  if (lines.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": no metrics lines to plot"));
  }
  if (options.width < kMinWidth || options.height < kMinHeight) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": width ", options.width, " x height ",
                                                   options.height, " is below the minimum ",
                                                   kMinWidth, " x ", kMinHeight));
  }
  for (const ReferenceLine& r : options.reference_lines) {
    if (!std::isfinite(r.loss)) {
      return absl::InvalidArgumentError(
          absl::StrCat(kName, ": reference line \"", r.label, "\" at ", r.loss, " is not finite"));
    }
  }

  std::vector<const MetricsLine*> ordered;
  for (const MetricsLine& line : lines) ordered.push_back(&line);
  std::stable_sort(ordered.begin(), ordered.end(),
                   [](const MetricsLine* a, const MetricsLine* b) { return a->step < b->step; });
  std::vector<Point> train, eval;
  int64_t skipped_train = 0, skipped_eval = 0;
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  for (const MetricsLine* line : ordered) {
    const double step = static_cast<double>(line->step);
    if (std::isfinite(line->loss)) {
      train.push_back({step, line->loss});
    } else {
      ++skipped_train;
    }
    if (line->eval_loss.has_value()) {
      if (std::isfinite(*line->eval_loss)) {
        eval.push_back({step, *line->eval_loss});
      } else {
        ++skipped_eval;
      }
    }
  }
  for (const std::vector<Point>* series : {&train, &eval}) {
    for (const Point& p : *series) {
      lo = std::min(lo, p.loss);
      hi = std::max(hi, p.loss);
    }
  }
  for (const ReferenceLine& r : options.reference_lines) {
    lo = std::min(lo, r.loss);
    hi = std::max(hi, r.loss);
  }
  if (lo > hi) {  // nothing finite to draw: an empty frame
    lo = 0;
    hi = 1;
  }
  const Axis x = NiceAxis(static_cast<double>(ordered.front()->step),
                          static_cast<double>(ordered.back()->step), /*min_step=*/1);
  const Axis y = NiceAxis(lo, hi, /*min_step=*/0);

  const double w = options.width - kLeft - kRight;
  const double h = options.height - kTop - kBottom;
  const double right = kLeft + w, bottom = kTop + h;
  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
      options.width, options.height, options.width, options.height);
  absl::StrAppendFormat(
      &svg, "<text x=\"%.1f\" y=\"22\" text-anchor=\"middle\" font-size=\"16\">%s</text>\n",
      options.width / 2.0, EscapeXml(options.title));
  if (skipped_train + skipped_eval > 0) {
    const std::string both = skipped_train > 0 && skipped_eval > 0 ? ", " : "";
    absl::StrAppendFormat(
        &svg, "<text x=\"%.1f\" y=\"40\" text-anchor=\"middle\" fill=\"%s\">not drawn: %s</text>\n",
        options.width / 2.0, kEvalColor,
        absl::StrCat(Skipped(skipped_train, "training"), both, Skipped(skipped_eval, "eval")));
  }

  // Grid and tick labels.
  svg += "<g stroke=\"#e0e0e0\">\n";
  for (int64_t i = 0; i < x.ticks(); ++i) {
    const double px = kLeft + x.Fraction(x.lo + static_cast<double>(i) * x.step) * w;
    absl::StrAppendFormat(&svg, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", px,
                          kTop, px, bottom);
  }
  for (int64_t i = 0; i < y.ticks(); ++i) {
    const double py = kTop + (1 - y.Fraction(y.lo + static_cast<double>(i) * y.step)) * h;
    absl::StrAppendFormat(&svg, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", kLeft,
                          py, right, py);
  }
  svg += "</g>\n<g text-anchor=\"middle\">\n";
  for (int64_t i = 0; i < x.ticks(); ++i) {
    const double v = x.lo + static_cast<double>(i) * x.step;
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                          kLeft + x.Fraction(v) * w, bottom + 16, Label(v, x));
  }
  svg += "</g>\n<g text-anchor=\"end\">\n";
  for (int64_t i = 0; i < y.ticks(); ++i) {
    const double v = y.lo + static_cast<double>(i) * y.step;
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", kLeft - 6,
                          kTop + (1 - y.Fraction(v)) * h + 4, Label(v, y));
  }
  svg += "</g>\n";
  absl::StrAppendFormat(&svg,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                        "stroke=\"black\"/>\n",
                        kLeft, kTop, w, h);
  absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">step</text>\n",
                        kLeft + w / 2, bottom + 36);
  absl::StrAppendFormat(&svg,
                        "<text transform=\"translate(16 %.1f) rotate(-90)\" "
                        "text-anchor=\"middle\">loss</text>\n",
                        kTop + h / 2);

  for (const ReferenceLine& r : options.reference_lines) {
    const double py = kTop + (1 - y.Fraction(r.loss)) * h;
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                          "stroke-dasharray=\"6 4\"/>\n"
                          "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">%s %s</text>\n",
                          kLeft, py, right, py, kReferenceColor, kLeft + 6, py - 4, kReferenceColor,
                          EscapeXml(r.label), absl::StrFormat("%.4g", r.loss));
  }

  // The series, and markers where a polyline alone would not show a point.
  const auto series = [&](const std::vector<Point>& points, const char* color, bool markers) {
    if (points.empty()) return;
    absl::StrAppendFormat(&svg,
                          "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
                          "stroke-linejoin=\"round\" points=\"%s\"/>\n",
                          color, Points(points, x, y, kLeft, kTop, w, h));
    if (!markers && points.size() > 1) return;
    absl::StrAppendFormat(&svg, "<g fill=\"%s\">\n", color);
    for (const Point& p : points) {
      absl::StrAppendFormat(&svg, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\"/>\n",
                            kLeft + x.Fraction(p.step) * w, kTop + (1 - y.Fraction(p.loss)) * h);
    }
    svg += "</g>\n";
  };
  series(train, kTrainColor, /*markers=*/false);
  series(eval, kEvalColor, /*markers=*/true);

  // Legend, in the top right corner, where a falling loss leaves room.
  const bool has_eval = !eval.empty();
  const double lx = right - 130, ly = kTop + 10;
  absl::StrAppendFormat(&svg,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"120\" height=\"%d\" fill=\"white\" "
                        "fill-opacity=\"0.85\" stroke=\"#bbb\"/>\n",
                        lx, ly, has_eval ? 44 : 24);
  absl::StrAppendFormat(&svg,
                        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                        "stroke-width=\"1.5\"/><text x=\"%.1f\" y=\"%.1f\">training loss</text>\n",
                        lx + 8, ly + 12, lx + 32, ly + 12, kTrainColor, lx + 38, ly + 16);
  if (has_eval) {
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"1.5\"/>"
        "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>"
        "<text x=\"%.1f\" y=\"%.1f\">eval loss</text>\n",
        lx + 8, ly + 32, lx + 32, ly + 32, kEvalColor, lx + 20, ly + 32, kEvalColor, lx + 38,
        ly + 36);
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace loom
