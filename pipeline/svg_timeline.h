// SVG timeline: draws a simulated schedule (Simulate, simulator.h) as a standalone
// SVG picture, the kind of figure pipeline papers show: one row per rank, time
// running right, a box per compute action.
//
// The picture:
//   - a title: schedule name, p (ranks), m (microbatches), v (stages per rank) and
//     the layout, the makespan and the bubble ratio; an optional subtitle below it
//     (the tool puts the costs there);
//   - one grey lane per rank ("rank r" on the left, its bubble ratio on the right);
//     grey shows where the rank idles;
//   - one box per compute action (<rect class="action F"> and so on), placed by its
//     simulated start and end, coloured by kind: F blue, B orange, I red, W green.
//     Where a rank holds several stages (interleaved, V), its later stages' boxes
//     are lighter. A box shows its action ("3F5": stage 3, forward, microbatch 5)
//     when that fits, else the microbatch alone, else nothing; hovering shows the
//     action and its times;
//   - a time axis in the costs' units, and a legend of the kinds present.
// The output depends only on the inputs (no clock, no randomness), so pictures
// can be checked in and diffed.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(Schedule s, Make1F1BSchedule(4, 8));
//   LOOM_ASSIGN_OR_RETURN(SimulationResult run, Simulate(s, SimulationCosts{}));
//   LOOM_ASSIGN_OR_RETURN(std::string svg, ToSvgTimeline(s, run));
//   // <svg xmlns="http://www.w3.org/2000/svg" width="1200" height="..." ...>
//   // <title>1f1b: p=4, m=8, v=1 (loop), makespan 33, bubble ratio 0.2727 (27.27%)</title>
//   // ...
//   // <rect class="action F" x="64" y="34" width="32.12" height="26" fill="#4c78a8" ...>
//   SvgTimelineOptions narrow;
//   narrow.width = 50;
//   ToSvgTimeline(s, run, narrow);
//   // InvalidArgument: width=50 must be between 200 and 100000 pixels
#ifndef LOOM_PIPELINE_SVG_TIMELINE_H_
#define LOOM_PIPELINE_SVG_TIMELINE_H_

#include <string>

#include "absl/status/statusor.h"
#include "pipeline/schedule.h"
#include "pipeline/simulator.h"

namespace loom {

struct SvgTimelineOptions {
  // Width of the whole picture in pixels, 200 to 100000; the time axis gets what
  // the labels leave.
  double width = 1200;
  // Height of one rank's row in pixels, 8 to 200. Labels need about 14.
  double row_height = 26;
  // A second title line; none when empty.
  std::string subtitle;
};

// ToSvgTimeline returns the picture of `result`, the simulation of `schedule`.
// InvalidArgument when the result has a different number of ranks than the
// schedule, or width or row_height is outside its range.
absl::StatusOr<std::string> ToSvgTimeline(const Schedule& schedule, const SimulationResult& result,
                                          const SvgTimelineOptions& options = {});

}  // namespace loom

#endif  // LOOM_PIPELINE_SVG_TIMELINE_H_
