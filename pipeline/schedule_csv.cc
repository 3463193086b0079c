#include "pipeline/schedule_csv.h"

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status_macros.h"
#include "pipeline/action.h"

namespace loom {
namespace {

// PyTorch action kinds with no counterpart in Loom's IR: FSDP's parameter
// gathering and gradient reduction, and DualPipeV's fused forward/backward pair.
constexpr absl::string_view kUnsupportedKinds[] = {"OVERLAP_F_B", "REDUCE_GRAD", "UNSHARD",
                                                   "RESHARD"};

// Rows are numbered from 0 as ranks but shown as 1-based lines and cells too, so
// that an editor's or spreadsheet's position finds the cell.
std::string Where(int64_t rank, int64_t cell) {
  return absl::StrCat("line ", rank + 1, " (rank ", rank, "), cell ", cell + 1);
}

// A parsed cell and where it came from.
struct Cell {
  Action action;
  int64_t rank = 0;
  int64_t index = 0;  // 0-based cell position in its row, empty cells included.
  std::string text;
  // The cell read "B" (not "BW"): in older PyTorch notation that may be an
  // input-gradient backward, decided once all W's are known.
  bool plain_backward = false;
};

std::string Describe(const Cell& cell) {
  return absl::StrCat(Where(cell.rank, cell.index), ": ", cell.text);
}

// DescribeOnRank leaves out the rank, for messages that name it already.
std::string DescribeOnRank(const Cell& cell) {
  return absl::StrCat("line ", cell.rank + 1, ", cell ", cell.index + 1, ": ", cell.text);
}

// CleanCell strips the whitespace and the double quotes a CSV writer may put
// around a cell.
absl::string_view CleanCell(absl::string_view cell) {
  cell = absl::StripAsciiWhitespace(cell);
  if (cell.size() >= 2 && cell.front() == '"' && cell.back() == '"') {
    cell = absl::StripAsciiWhitespace(cell.substr(1, cell.size() - 2));
  }
  return cell;
}

size_t LeadingDigits(absl::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && absl::ascii_isdigit(static_cast<unsigned char>(text[digits]))) {
    ++digits;
  }
  return digits;
}

absl::StatusOr<Cell> ParseCell(absl::string_view text, int64_t rank, int64_t index,
                               bool legacy) {
  Cell cell;
  cell.rank = rank;
  cell.index = index;
  cell.text = std::string(text);
  const size_t digits = LeadingDigits(text);
  std::string spelled(text);
  if (legacy && digits > 0 && absl::StartsWith(text.substr(digits), "BW")) {
    // Older PyTorch's full backward: the same as today's B.
    spelled = absl::StrCat(text.substr(0, digits), "B", text.substr(digits + 2));
  }
  absl::StatusOr<Action> action = ParseAction(spelled);
  if (!action.ok()) {
    for (const absl::string_view kind : kUnsupportedKinds) {
      if (absl::StrContains(text, kind)) {
        return absl::InvalidArgumentError(absl::StrCat(
            Where(rank, index), ": \"", text, "\" is a PyTorch action of kind ", kind,
            ", which Loom's schedules do not model (they have F, B, I, W, SEND_F, RECV_F, "
            "SEND_B and RECV_B)"));
      }
    }
    // Report the cell as written, not its legacy respelling.
    const absl::Status as_written = ParseAction(text).status();
    return absl::InvalidArgumentError(absl::StrCat(
        Where(rank, index), ": ", (as_written.ok() ? action.status() : as_written).message()));
  }
  cell.action = *action;
  cell.plain_backward = action->kind == ActionKind::kBackward && spelled == text;
  return cell;
}

// SplitRows returns the lines of `text` without line ends, a byte order mark or
// trailing blank lines.
std::vector<absl::string_view> SplitRows(absl::string_view text) {
  if (absl::StartsWith(text, "\xEF\xBB\xBF")) text.remove_prefix(3);
  std::vector<absl::string_view> rows = absl::StrSplit(text, '\n');
  for (absl::string_view& row : rows) {
    if (absl::EndsWith(row, "\r")) row.remove_suffix(1);
  }
  while (!rows.empty() && absl::StripAsciiWhitespace(rows.back()).empty()) rows.pop_back();
  return rows;
}

// ApplyLegacyBackward turns a plain "B" into I when the same (stage, microbatch)
// has a W: in older PyTorch notation that B computed the input gradient only.
void ApplyLegacyBackward(std::vector<std::vector<Cell>>& rows) {
  absl::flat_hash_set<std::pair<int64_t, int64_t>> weight_grads;
  for (const std::vector<Cell>& row : rows) {
    for (const Cell& cell : row) {
      if (cell.action.kind == ActionKind::kBackwardWeight) {
        weight_grads.insert({cell.action.stage, cell.action.microbatch});
      }
    }
  }
  if (weight_grads.empty()) return;
  for (std::vector<Cell>& row : rows) {
    for (Cell& cell : row) {
      if (cell.plain_backward &&
          weight_grads.contains({cell.action.stage, cell.action.microbatch})) {
        cell.action.kind = ActionKind::kBackwardInput;
      }
    }
  }
}

// FirstGap returns the smallest number in [0, max(keys)] missing from `keys`, or -1
// when there is none. Keys are non-negative (the parser reads no sign).
template <typename Map>
int64_t FirstGap(const Map& keys) {
  int64_t expected = 0;
  for (const auto& entry : keys) {
    if (entry.first != expected) return expected;
    ++expected;
  }
  return -1;
}

// CheckPlacement checks every cell against a given layout.
absl::Status CheckPlacement(const std::vector<std::vector<Cell>>& rows, const StageLayout& layout) {
  if (static_cast<int64_t>(rows.size()) != layout.num_ranks()) {
    return absl::InvalidArgumentError(absl::StrCat("the CSV has ", rows.size(),
                                                   " rows (one per rank), the layout ",
                                                   layout.ToString(), " has ",
                                                   layout.num_ranks(), " ranks"));
  }
  for (const std::vector<Cell>& row : rows) {
    for (const Cell& cell : row) {
      const int64_t home = layout.RankOf(cell.action.stage);
      if (home < 0) {
        return absl::InvalidArgumentError(absl::StrCat(Describe(cell), ": stage ",
                                                       cell.action.stage, " is outside the layout ",
                                                       layout.ToString(), " (stages 0-",
                                                       layout.num_stages() - 1, ")"));
      }
      if (home != cell.rank) {
        return absl::InvalidArgumentError(
            absl::StrCat(Describe(cell), ": stage ", cell.action.stage, " is on rank ", home,
                         " in the layout ", layout.ToString(), ", not on rank ", cell.rank));
      }
    }
  }
  return absl::OkStatus();
}

// InferLayout finds the loop or v-shape layout that places every stage where the
// CSV has it. `homes` maps each stage 0 .. S-1 to the rank holding it.
absl::StatusOr<StageLayout> InferLayout(int64_t num_ranks, const std::map<int64_t, int64_t>& homes) {
  const int64_t num_stages = static_cast<int64_t>(homes.size());
  std::string not_loop;
  if (num_stages % num_ranks != 0) {
    not_loop = absl::StrCat(num_stages, " stages do not split evenly over ", num_ranks, " ranks");
  } else {
    for (const auto& [stage, rank] : homes) {
      if (rank != stage % num_ranks) {
        not_loop = absl::StrCat("stage ", stage, " is on rank ", rank, ", a loop puts it on rank ",
                                stage % num_ranks);
        break;
      }
    }
  }
  if (not_loop.empty()) return StageLayout::Loop(num_ranks, num_stages / num_ranks);

  std::string not_v;
  if (num_stages != 2 * num_ranks) {
    not_v = absl::StrCat("a v-shape over ", num_ranks, " ranks has ", 2 * num_ranks,
                         " stages, not ", num_stages);
  } else {
    for (const auto& [stage, rank] : homes) {
      const int64_t v_rank = stage < num_ranks ? stage : 2 * num_ranks - 1 - stage;
      if (rank != v_rank) {
        not_v = absl::StrCat("stage ", stage, " is on rank ", rank, ", a v-shape puts it on rank ",
                             v_rank);
        break;
      }
    }
  }
  if (not_v.empty()) return StageLayout::VShape(num_ranks);
  return absl::InvalidArgumentError(
      absl::StrCat("cannot infer the stage layout of ", num_ranks, " ranks and ", num_stages,
                   " stages: not a loop layout (", not_loop, ") nor a v-shape (", not_v,
                   "); give the layout explicitly"));
}

// LayoutFromCells infers the layout after checking that each stage lives on one
// rank, that no stage below the largest is missing and that every rank has work.
absl::StatusOr<StageLayout> LayoutFromCells(const std::vector<std::vector<Cell>>& rows) {
  std::map<int64_t, const Cell*> first_seen;
  for (const std::vector<Cell>& row : rows) {
    for (const Cell& cell : row) {
      const auto [it, inserted] = first_seen.emplace(cell.action.stage, &cell);
      const Cell& first = *it->second;
      if (!inserted && first.rank != cell.rank) {
        return absl::InvalidArgumentError(absl::StrCat(
            "stage ", cell.action.stage, " appears on rank ", first.rank, " (", DescribeOnRank(first),
            ") and on rank ", cell.rank, " (", DescribeOnRank(cell), "); a stage lives on one rank"));
      }
    }
  }
  if (first_seen.empty()) return absl::InvalidArgumentError("the CSV has no actions");
  const int64_t gap = FirstGap(first_seen);
  if (gap >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("stage ", gap, " appears in no row, though stage ", first_seen.rbegin()->first,
                     " does (stages are numbered from 0 without gaps)"));
  }
  for (size_t rank = 0; rank < rows.size(); ++rank) {
    if (rows[rank].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", rank + 1, " (rank ", rank, ") has no actions"));
    }
  }
  std::map<int64_t, int64_t> homes;
  for (const auto& [stage, cell] : first_seen) homes[stage] = cell->rank;
  return InferLayout(static_cast<int64_t>(rows.size()), homes);
}

absl::StatusOr<int64_t> MicrobatchCount(const std::vector<std::vector<Cell>>& rows,
                                        const std::optional<int64_t>& given) {
  if (given.has_value()) {
    if (*given < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("num_microbatches=", *given, " must be >= 1"));
    }
    for (const std::vector<Cell>& row : rows) {
      for (const Cell& cell : row) {
        if (cell.action.microbatch >= *given) {
          return absl::InvalidArgumentError(
              absl::StrCat(Describe(cell), ": microbatch ", cell.action.microbatch,
                           " is not below num_microbatches=", *given));
        }
      }
    }
    return *given;
  }
  std::map<int64_t, bool> seen;
  for (const std::vector<Cell>& row : rows) {
    for (const Cell& cell : row) seen[cell.action.microbatch] = true;
  }
  if (seen.empty()) return absl::InvalidArgumentError("the CSV has no actions");
  const int64_t gap = FirstGap(seen);
  if (gap >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("microbatch ", gap, " appears in no action, though microbatch ",
                     seen.rbegin()->first,
                     " does (microbatches are numbered from 0 without gaps)"));
  }
  return static_cast<int64_t>(seen.size());
}

}  // namespace

std::string ScheduleToCsv(const Schedule& schedule, const CsvWriteOptions& options) {
  std::string text;
  for (const std::vector<Action>& actions : schedule.ranks) {
    for (size_t i = 0; i < actions.size(); ++i) {
      if (i > 0) text += ',';
      text += actions[i].ToString();
    }
    text += options.line_ending;
  }
  return text;
}

absl::StatusOr<Schedule> LoadScheduleCsv(absl::string_view text, const CsvLoadOptions& options) {
  const std::vector<absl::string_view> lines = SplitRows(text);
  if (lines.empty()) {
    return absl::InvalidArgumentError("the CSV has no rows; a schedule CSV has one row per rank");
  }
  std::vector<std::vector<Cell>> rows(lines.size());
  for (size_t rank = 0; rank < lines.size(); ++rank) {
    int64_t index = 0;
    for (const absl::string_view raw : absl::StrSplit(lines[rank], ',')) {
      const absl::string_view cell_text = CleanCell(raw);
      if (!cell_text.empty()) {
        LOOM_ASSIGN_OR_RETURN(Cell cell,
                              ParseCell(cell_text, static_cast<int64_t>(rank), index,
                                        options.legacy_backward_notation));
        rows[rank].push_back(std::move(cell));
      }
      ++index;
    }
  }
  if (options.legacy_backward_notation) ApplyLegacyBackward(rows);

  Schedule schedule;
  schedule.name = options.name;
  if (options.layout.has_value()) {
    LOOM_RETURN_IF_ERROR(CheckPlacement(rows, *options.layout));
    schedule.layout = *options.layout;
  } else {
    LOOM_ASSIGN_OR_RETURN(schedule.layout, LayoutFromCells(rows));
  }
  LOOM_ASSIGN_OR_RETURN(schedule.num_microbatches, MicrobatchCount(rows, options.num_microbatches));
  schedule.ranks.resize(rows.size());
  for (size_t rank = 0; rank < rows.size(); ++rank) {
    schedule.ranks[rank].reserve(rows[rank].size());
    for (const Cell& cell : rows[rank]) schedule.ranks[rank].push_back(cell.action);
  }
  return schedule;
}

}  // namespace loom
