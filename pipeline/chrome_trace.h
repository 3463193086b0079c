// Chrome trace: writes a simulated schedule (Simulate, simulator.h) as Chrome trace
// event JSON, the {"traceEvents": [...]} format that chrome://tracing, Perfetto
// (ui.perfetto.dev) and Speedscope open.
//
// What the trace holds:
//   - one process (pid 1) named after the schedule, one thread per rank (tid r,
//     named "rank r" and sorted by rank);
//   - one complete event ("ph": "X") per compute action: name "F s0 mb3", category
//     the kind ("F", "B", "I", "W"), ts and dur in microseconds, args
//     {"stage": 0, "microbatch": 3};
//   - with message_flows, one flow arrow per point-to-point message between ranks
//     (a "ph": "s" / "ph": "f" pair, category "message"), from the compute that
//     produced the data to the one that consumes it. Each end sits in the middle of
//     its compute, so viewers bind it to that slice whatever their rule for slice
//     edges; messages next to a zero-length compute are left out;
//   - "otherData": schedule name, layout, microbatches, makespan and bubble ratio.
// Sends and receives themselves take no time in the simulator and get no event.
//
// Times: the simulator's costs have no unit; microseconds_per_unit converts them
// (the default 1000 reads a cost of 1 as 1 ms). Numbers are written with enough
// digits to read back exactly.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(Schedule s, Make1F1BSchedule(2, 1));
//   LOOM_ASSIGN_OR_RETURN(SimulationResult run, Simulate(s, SimulationCosts{}));
//   LOOM_ASSIGN_OR_RETURN(std::string json, ToChromeTrace(s, run));
//   // {"traceEvents": [
//   // {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "1f1b: loop p=2 v=1, 1 microbatch"}},
//   // ...
//   // {"name": "F s0 mb0", "cat": "F", "ph": "X", "pid": 1, "tid": 0, "ts": 0, "dur": 1000, "args": {"stage": 0, "microbatch": 0}},
//   // {"name": "F s1 mb0", "cat": "F", "ph": "X", "pid": 1, "tid": 1, "ts": 1000, "dur": 1000, ...},
//   // ...
#ifndef LOOM_PIPELINE_CHROME_TRACE_H_
#define LOOM_PIPELINE_CHROME_TRACE_H_

#include <string>

#include "absl/status/statusor.h"
#include "pipeline/schedule.h"
#include "pipeline/simulator.h"

namespace loom {

struct ChromeTraceOptions {
  // Microseconds per unit of the simulation's costs.
  double microseconds_per_unit = 1000;
  // Draw an arrow for each message between ranks.
  bool message_flows = true;
};

// ToChromeTrace returns the trace of `result`, the simulation of `schedule`.
// InvalidArgument when the result has a different number of ranks than the
// schedule, or microseconds_per_unit is not a finite positive number.
absl::StatusOr<std::string> ToChromeTrace(const Schedule& schedule, const SimulationResult& result,
                                          const ChromeTraceOptions& options = {});

}  // namespace loom

#endif  // LOOM_PIPELINE_CHROME_TRACE_H_
