// The planner's output: the ranked table //tools:plan prints, its --explain lines and
// its --json list (best first).
//
// Example:
//   std::cout << RankedTable(plan, /*rows=*/10);
//   // rank  dp  tp  pp  cp zero schedule            mbs   m recompute  memory/dev   step s  tokens/s  TFLOP/s/dev   MFU
//   //    1  32   8   2   1    0 interleaved-1f1b(v=8) 2  24 full       43.4 GB      ...
//   std::string json = RankedJson(plan);   // [{"dp": 32, "tp": 8, ..., "mfu": 0.45}, ...]
#ifndef LOOM_TOOLS_PLANNER_REPORT_H_
#define LOOM_TOOLS_PLANNER_REPORT_H_

#include <cstdint>
#include <string>

#include "tools/planner/search.h"

namespace loom {
namespace planner {

// RankedTable returns a header line and one line per candidate, at most `rows`.
std::string RankedTable(const PlanResult& plan, int64_t rows);

// Explain returns the breakdown of the best candidate and of the runner-up, and why
// the first wins.
std::string Explain(const PlanResult& plan);

// RankedJson returns the ranked list as a JSON array, best first; each entry has dp,
// tp, pp, cp, zero, schedule, virtual_stages, microbatch_size, microbatches,
// recompute, dtype, memory_bytes_per_device, step_seconds, tokens_per_second,
// tflops_per_device and mfu.
std::string RankedJson(const PlanResult& plan);

}  // namespace planner
}  // namespace loom

#endif  // LOOM_TOOLS_PLANNER_REPORT_H_
