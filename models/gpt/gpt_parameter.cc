#include "models/gpt/gpt_parameter.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "tensor_parallel/placement.h"
#include "core/tensor.h"

namespace loom {

absl::StatusOr<std::vector<ShardRun>> ShardRuns(const GptParameter& p, int tp_size, int tp_rank) {
  if (tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShardOf ", p.name, ": rank ", tp_rank, " is outside tp ", tp_size));
  }
  const int64_t n = NumElements(p.full_shape);
  if (p.split == TpSplit::kReplicated) return std::vector<ShardRun>{{0, n}};
  const size_t dim = p.split == TpSplit::kRows ? 0 : 1;
  if (p.full_shape.size() <= dim || p.full_shape.size() > 2 || p.parts < 1 ||
      p.full_shape[dim] % p.parts != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShardOf ", p.name, ": full shape [", absl::StrJoin(p.full_shape, ","),
                     "] cannot be split along dimension ", dim, " in ", p.parts, " parts"));
  }
  const int64_t rows = p.full_shape[0];
  const int64_t cols = p.full_shape.size() == 2 ? p.full_shape[1] : 1;
  const int64_t part = p.full_shape[dim] / p.parts;
  const ShardExtent e = ShardExtentOf(part, tp_size, tp_rank, ShardRule::kBalanced);
  std::vector<ShardRun> runs;
  if (e.length == 0) return runs;
  if (dim == 0) {
    for (int64_t k = 0; k < p.parts; ++k) {
      runs.push_back({(k * part + e.offset) * cols, e.length * cols});
    }
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < p.parts; ++k)
        runs.push_back({r * cols + k * part + e.offset, e.length});
    }
  }
  return runs;
}

absl::StatusOr<std::vector<float>> ShardOf(const GptParameter& p, absl::Span<const float> full,
                                           int tp_size, int tp_rank) {
  LOOM_ASSIGN_OR_RETURN(const std::vector<ShardRun> runs, ShardRuns(p, tp_size, tp_rank));
  const int64_t n = NumElements(p.full_shape);
  if (static_cast<int64_t>(full.size()) != n) {
    return absl::InvalidArgumentError(absl::StrCat("ShardOf ", p.name, ": ", full.size(),
                                                   " values for full shape [",
                                                   absl::StrJoin(p.full_shape, ","), "]"));
  }
  std::vector<float> out;
  for (const ShardRun& run : runs) {
    out.insert(out.end(), full.begin() + run.full_offset,
               full.begin() + run.full_offset + run.length);
  }
  return out;
}

}  // namespace loom
