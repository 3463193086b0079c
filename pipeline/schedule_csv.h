// Schedule CSV: reads and writes pipeline schedules in the CSV form of PyTorch's
// pipelining package (torch.distributed.pipelining): one row per rank, each cell one
// action in the "<stage><kind><microbatch>" notation of action.h. PyTorch writes its
// compute-only schedules this way (with empty cells where a rank idles for a time
// step) and its lowered ones too (with SEND_F / RECV_F / SEND_B / RECV_B cells).
//
// Reading tolerates what such files contain: empty cells (skipped), spaces around
// cells, trailing commas, "\r\n" line ends (Python's csv module writes them), blank
// lines at the end, a UTF-8 byte order mark and cells in double quotes. It also
// reads the notation of older PyTorch releases, which wrote a full backward as "BW"
// and an input-gradient backward as "B" followed later by the "W" of the same stage
// and microbatch: "BW" becomes B, and a B whose (stage, microbatch) also has a W
// becomes I. PyTorch kinds Loom does not model (UNSHARD, RESHARD, REDUCE_GRAD and
// DualPipeV's "(0F7;7B3)OVERLAP_F_B") are refused with a message saying so.
//
// A CSV names neither the stage layout nor the microbatch count; unless given in
// CsvLoadOptions, they are inferred:
//   ranks         the number of rows;
//   layout        stages 0 .. S-1 where S = the largest stage + 1 (each must appear,
//                 each on one rank only); a loop layout when every stage s sits on
//                 rank s mod p (v = S / p), else a v-shape when S = 2p and rank r
//                 holds stages r and 2p-1-r, else InvalidArgument. With one rank and
//                 two stages both fit; the loop layout is chosen;
//   microbatches  the largest microbatch + 1, each of 0 .. m-1 appearing somewhere.
// The loader checks the notation and the placement of stages only; Verify
// (verifier.h) decides whether the schedule is complete, ordered and deadlock free.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(Schedule s, Make1F1BSchedule(2, 2));
//   ScheduleToCsv(s);
//   // "0F0,0F1,0B0,0B1\n"
//   // "1F0,1B0,1F1,1B1\n"
//   LOOM_ASSIGN_OR_RETURN(Schedule back, LoadScheduleCsv(
//       "0F0,0F1,,0B0,,0B1\r\n,1F0,1B0,1F1,1B1\r\n"));   // PyTorch-style idle cells
//   back.layout.ToString();     // "loop p=2 v=1"
//   back.num_microbatches;      // 2
//   back.ranks == s.ranks;      // true
//   LoadScheduleCsv("0F0,1F0\n1B0\n");
//   // InvalidArgument: stage 1 appears on rank 0 (line 1, cell 2: 1F0) and on rank 1
//   //   (line 2, cell 1: 1B0); a stage lives on one rank
//   LoadScheduleCsv("0F0,0X1\n");
//   // InvalidArgument: line 1 (rank 0), cell 2: cannot parse action "0X1": ...
#ifndef LOOM_PIPELINE_SCHEDULE_CSV_H_
#define LOOM_PIPELINE_SCHEDULE_CSV_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "pipeline/schedule.h"
#include "pipeline/stage_layout.h"

namespace loom {

struct CsvWriteOptions {
  // Ends every row, including the last. Python's csv module, and so PyTorch's own
  // dumps, use "\r\n"; both load either way.
  std::string line_ending = "\n";
};

// ScheduleToCsv writes one row per rank, its actions comma separated in program
// order, with no empty cells: the IR has no idle time steps to mark. A rank with no
// actions is an empty row.
std::string ScheduleToCsv(const Schedule& schedule, const CsvWriteOptions& options = {});

struct CsvLoadOptions {
  // Schedule::name of the result.
  std::string name = "csv";
  // The stage layout; inferred as described above when absent. When given, its
  // number of ranks must equal the number of rows and every action must sit on the
  // rank (row) that holds its stage.
  std::optional<StageLayout> layout;
  // The number of microbatches; inferred when absent. When given, every action's
  // microbatch must be below it.
  std::optional<int64_t> num_microbatches;
  // Read older PyTorch's "BW" (full backward) and "B" with a "W" (input-gradient
  // backward) as described above. Without it such cells stay B, which Verify
  // refuses next to a W.
  bool legacy_backward_notation = true;
};

// LoadScheduleCsv parses `text` into a Schedule. InvalidArgument, naming the line
// (1-based), its rank (0-based), the cell (1-based) and the text, for a cell that
// does not parse or holds an unsupported PyTorch kind; and, with the values, for
// no rows at all, a stage on two ranks, a stage or microbatch that never appears
// below the largest one, a layout that cannot be inferred, or a conflict with the
// layout or microbatch count given in `options`.
absl::StatusOr<Schedule> LoadScheduleCsv(absl::string_view text,
                                         const CsvLoadOptions& options = {});

}  // namespace loom

#endif  // LOOM_PIPELINE_SCHEDULE_CSV_H_
