#include "pipeline/schedule.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeline/action.h"

namespace loom {
namespace {

struct Window {
  int64_t begin = 0;
  int64_t end = 0;  // One past the last step shown.
};

// ChooseWindow picks the steps to show: all of them, or max_columns around the
// marks, starting a couple of steps before the first mark so that what led to it
// is visible.
Window ChooseWindow(int64_t total, const GridOptions& options,
                    const std::vector<ActionPosition>& marks) {
  if (options.max_columns <= 0 || total <= options.max_columns) return {0, total};
  const int64_t width = options.max_columns;
  if (marks.empty()) return {0, width};
  int64_t lo = marks.front().step;
  int64_t hi = lo;
  for (const ActionPosition& mark : marks) {
    lo = std::min(lo, mark.step);
    hi = std::max(hi, mark.step);
  }
  int64_t begin = hi - lo + 1 <= width ? lo - (width - (hi - lo + 1)) / 2 : lo - 2;
  begin = std::max<int64_t>(0, std::min(begin, total - width));
  return {begin, begin + width};
}

}  // namespace

int64_t Schedule::NumActions() const {
  int64_t count = 0;
  for (const std::vector<Action>& actions : ranks) count += static_cast<int64_t>(actions.size());
  return count;
}

bool Schedule::HasCommunication() const {
  for (const std::vector<Action>& actions : ranks) {
    for (const Action& action : actions) {
      if (IsCommunication(action.kind)) return true;
    }
  }
  return false;
}

bool Schedule::HasBackward() const {
  for (const std::vector<Action>& actions : ranks) {
    for (const Action& action : actions) {
      if (action.kind == ActionKind::kBackward || action.kind == ActionKind::kBackwardInput ||
          action.kind == ActionKind::kBackwardWeight) {
        return true;
      }
    }
  }
  return false;
}

std::string Schedule::ToString() const { return FormatGrid(*this); }

std::string FormatGrid(const Schedule& schedule, const GridOptions& options) {
  int64_t total = 0;
  for (const std::vector<Action>& actions : schedule.ranks) {
    total = std::max<int64_t>(total, static_cast<int64_t>(actions.size()));
  }
  std::vector<ActionPosition> marks;
  for (const ActionPosition& mark : options.marks) {
    if (mark.rank >= 0 && mark.rank < schedule.num_ranks() && mark.step >= 0 &&
        mark.step < static_cast<int64_t>(schedule.ranks[mark.rank].size())) {
      marks.push_back(mark);
    }
  }
  const Window window = ChooseWindow(total, options, marks);
  const auto is_marked = [&marks](int64_t rank, int64_t step) {
    return std::find(marks.begin(), marks.end(), ActionPosition{rank, step}) != marks.end();
  };

  // cells[row][column]; row 0 is the step header, column 0 the row label.
  const int64_t num_rows = schedule.num_ranks() + 1;
  const bool left_out_before = window.begin > 0;
  const bool left_out_after = window.end < total;
  // Built row by row (not sized up front): GCC 12 at -O3 otherwise warns that
  // cells[0] may not exist (-Wnull-dereference).
  std::vector<std::vector<std::string>> cells;
  cells.reserve(num_rows);
  cells.push_back({"step"});
  for (int64_t rank = 0; rank < schedule.num_ranks(); ++rank) {
    cells.push_back({absl::StrCat("rank ", rank)});
  }
  if (left_out_before) {
    for (auto& row : cells) row.push_back(" ...");
  }
  for (int64_t step = window.begin; step < window.end; ++step) {
    cells[0].push_back(absl::StrCat(" ", step));
    for (int64_t rank = 0; rank < schedule.num_ranks(); ++rank) {
      const std::vector<Action>& actions = schedule.ranks[rank];
      if (step >= static_cast<int64_t>(actions.size())) {
        cells[rank + 1].push_back("");
      } else if (is_marked(rank, step)) {
        cells[rank + 1].push_back(absl::StrCat(">", actions[step].ToString(), "<"));
      } else {
        cells[rank + 1].push_back(absl::StrCat(" ", actions[step].ToString(), " "));
      }
    }
  }
  if (left_out_after) {
    for (auto& row : cells) row.push_back(" ...");
  }

  std::vector<size_t> widths(cells[0].size(), 0);
  for (const auto& row : cells) {
    for (size_t column = 0; column < row.size(); ++column) {
      widths[column] = std::max(widths[column], row[column].size());
    }
  }
  const int64_t m = schedule.num_microbatches;
  std::string text =
      absl::StrCat(schedule.name.empty() ? "schedule" : schedule.name, ": ",
                   schedule.layout.ToString(), ", ", m, m == 1 ? " microbatch" : " microbatches");
  if (left_out_before || left_out_after) {
    absl::StrAppend(&text, " (steps ", window.begin, "-", window.end - 1, " of 0-", total - 1, ")");
  }
  text += "\n";
  for (const auto& row : cells) {
    std::string line;
    for (size_t column = 0; column < row.size(); ++column) {
      // One space between columns, so that adjacent marks stay apart: ">0F0< >0F1<".
      line += row[column];
      line.append(widths[column] - row[column].size() + 1, ' ');
    }
    line.erase(line.find_last_not_of(' ') + 1);
    absl::StrAppend(&text, line, "\n");
  }
  return text;
}

}  // namespace loom
