// LossPlotSvg: a picture of a run's metrics file, the training loss against the step
// and the held-out loss on the steps that evaluated, as one self-contained SVG (no
// script, no external font or style sheet) that a browser or an image viewer opens.
//
// The axes have round tick values (1, 2 or 5 times a power of ten) and span every
// step of `lines` and every loss drawn, reference lines included. Lines need not be
// in step order; they are drawn in it. A NaN or infinite loss (a diverged step) has
// no place on a loss axis: it is skipped, its neighbours joined, and the plot says
// under its title how many were skipped, so a divergence is never hidden.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(std::vector<MetricsLine> lines, ReadMetricsFile(metrics_path));
//   LossPlotOptions options;
//   options.title = "gpt V=256 dp=2 tp=2";
//   options.reference_lines = {{"uniform log(V)", std::log(256.0)}};
//   LOOM_ASSIGN_OR_RETURN(std::string svg, LossPlotSvg(lines, options));
//   LOOM_RETURN_IF_ERROR(WriteFileAtomically("/runs/7/loss.svg", svg));
//   LossPlotSvg({}, options)  // InvalidArgument: "LossPlotSvg: no metrics lines to plot"
#ifndef LOOM_TOOLS_TRAINING_LOSS_PLOT_H_
#define LOOM_TOOLS_TRAINING_LOSS_PLOT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/training/metrics_log.h"

namespace loom {

// A horizontal dashed line across the plot, labelled with its name and value: a
// loss worth comparing with, such as a uniform guess's log(V).
struct ReferenceLine {
  std::string label;
  double loss = 0.0;
};

struct LossPlotOptions {
  std::string title = "Training loss";  // any text; XML special characters are escaped
  std::vector<ReferenceLine> reference_lines;
  int width = 800;   // pixels, >= 240
  int height = 480;  // pixels, >= 180
};

// LossPlotSvg returns the SVG document, starting "<svg" and ending "</svg>\n". It
// draws the training loss as one polyline, and the eval loss, where any step has a
// finite one, as a second polyline with a marker on each point (a series of a single
// point gets a marker, a one-point polyline being invisible). InvalidArgument for no
// lines, a width or height below its minimum, or a reference line that is not finite.
absl::StatusOr<std::string> LossPlotSvg(const std::vector<MetricsLine>& lines,
                                        const LossPlotOptions& options);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_LOSS_PLOT_H_
