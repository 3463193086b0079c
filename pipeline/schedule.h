// Schedule: a pipeline schedule as one ordered action list per rank, with the stage
// layout it runs on and its number of microbatches. This is the IR every generator
// produces, Lower completes with messages, Verify checks and Simulate times.
//
// A schedule is plain data: generators build it, tests edit `ranks` directly to
// break it on purpose. Nothing here checks it; Verify (verifier.h) does.
//
// A complete schedule is one of two kinds. A training schedule has, for every
// (stage, microbatch), one F and one backward (B, or I and W). A forward-only
// schedule (an evaluation: MakeForwardOnlySchedule) has one F for each and no B, I
// or W on any rank, so only activations move and no gradient is touched. A
// schedule with some backwards but not all is incomplete.
//
// FormatGrid draws it as text, one row per rank and one column per step, and marks
// chosen cells as ">text<"; the verifier's errors carry such a grid.
//
// Example:
//   Schedule s;
//   s.name = "tiny";
//   s.layout = *StageLayout::Loop(2);
//   s.num_microbatches = 1;
//   s.ranks = {*ParseActionList("0F0 0SEND_F0 0RECV_B0 0B0"),
//              *ParseActionList("1RECV_F0 1F0 1B0 1SEND_B0")};
//   GridOptions options;
//   options.marks = {{1, 2}};          // rank 1, step 2
//   FormatGrid(s, options);
//   // tiny: loop p=2 v=1, 1 microbatch
//   // step    0          1          2          3
//   // rank 0  0F0        0SEND_F0   0RECV_B0   0B0
//   // rank 1  1RECV_F0   1F0       >1B0<       1SEND_B0
#ifndef LOOM_PIPELINE_SCHEDULE_H_
#define LOOM_PIPELINE_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "pipeline/action.h"
#include "pipeline/stage_layout.h"

namespace loom {

// ActionPosition names one cell of a schedule: the `step`-th action of `rank`.
struct ActionPosition {
  int64_t rank = 0;
  int64_t step = 0;

  friend bool operator==(const ActionPosition& a, const ActionPosition& b) {
    return a.rank == b.rank && a.step == b.step;
  }
};

struct Schedule {
  // A short name for reports and error messages ("1f1b", "interleaved-1f1b").
  std::string name;
  StageLayout layout;
  int64_t num_microbatches = 1;
  // ranks[r] is rank r's program: its actions in the order it runs them.
  std::vector<std::vector<Action>> ranks;

  int64_t num_ranks() const { return static_cast<int64_t>(ranks.size()); }
  // NumActions counts the actions of all ranks.
  int64_t NumActions() const;
  // HasCommunication is true when some rank has a SEND or RECV action, i.e. the
  // schedule is (at least partly) lowered.
  bool HasCommunication() const;
  // HasBackward is true when some rank has a B, I or W action; a complete
  // schedule without one is forward-only.
  bool HasBackward() const;
  // ToString returns FormatGrid(*this) with no marks and every step.
  std::string ToString() const;
};

struct GridOptions {
  // Cells drawn as ">text<" instead of " text ". Positions outside the schedule
  // are ignored.
  std::vector<ActionPosition> marks;
  // At most this many step columns, a window around the marks (from step 0 when
  // there are none), with "..." where steps are left out; 0 shows every step.
  int64_t max_columns = 0;
};

// FormatGrid draws `schedule` as a table: a title line (name, layout, microbatches,
// and the window shown if any), a "step" header, then one row per rank.
std::string FormatGrid(const Schedule& schedule, const GridOptions& options = {});

}  // namespace loom

#endif  // LOOM_PIPELINE_SCHEDULE_H_
