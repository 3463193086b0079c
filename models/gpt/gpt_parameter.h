// GptParameter: one named parameter of a GptModel as this tensor-parallel rank
// holds it, with mutable views of its values and of its gradient (both f32), for
// optimizers and for ZeRO (which flattens, shards and gathers them).
//
// How a shard relates to the whole tensor: `split` says which dimension the
// tensor-parallel group splits (none, rows or columns), and `parts` how many equal
// parts that dimension is made of, each split on its own by ShardExtentOf(part,
// tp, rank, kBalanced): 3 for the attention's [Q; K; V] rows (each rank holds its
// heads' rows of Q, of K and of V), 1 otherwise. ShardOf cuts a rank's piece out of
// a full tensor that way; a tp = 1 model holds every parameter whole.
//
// Example (tp = 2, hidden = 8, 4 heads):
//   std::vector<GptParameter> params = model->Parameters();
//   params[k].name;        // "blocks.0.attn.qkv.weight"
//   params[k].shape;       // {12, 8}; full_shape {24, 8}; split kRows, parts 3
//   params[k].values[0] = 0.5f;      // writes the model's weight in place
//   ShardOf(params[k], full_values, /*tp_size=*/2, /*tp_rank=*/1);
//   // rows 4..7, 12..15 and 20..23 of the [24, 8] tensor
#ifndef LOOM_MODELS_GPT_GPT_PARAMETER_H_
#define LOOM_MODELS_GPT_GPT_PARAMETER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace loom {

enum class TpSplit {
  kReplicated,  // every rank holds it whole; its gradient is the same on every rank
  kRows,        // dimension 0 is split
  kColumns,     // dimension 1 is split
};

struct GptParameter {
  std::string name;
  std::vector<int64_t> shape;       // this rank's shard
  std::vector<int64_t> full_shape;  // the whole tensor
  TpSplit split = TpSplit::kReplicated;
  int64_t parts = 1;
  absl::Span<float> values;  // row-major, shape()
  absl::Span<float> grad;    // accumulated by Backward, zeroed by ZeroGrad
};

// ShardOf returns rank `tp_rank`'s piece of `full` (row-major, p.full_shape).
// InvalidArgument naming the sizes when full does not have p.full_shape's element
// count, the shape is not 1-D/2-D as the split needs, or the rank is outside tp.
absl::StatusOr<std::vector<float>> ShardOf(const GptParameter& p, absl::Span<const float> full,
                                           int tp_size, int tp_rank);

// ShardRun: `length` consecutive elements of the whole tensor (row-major), starting
// at element `full_offset`.
struct ShardRun {
  int64_t full_offset = 0;
  int64_t length = 0;
};

// ShardRuns says where rank `tp_rank`'s shard lies in the whole tensor: the shard's
// elements, in order, are these runs of the whole tensor one after another (one run
// for a replicated parameter; one per part for a row split; one per row and part
// for a column split). This is how a checkpoint names a shard in the model's own
// coordinates, whatever tp saved it. Errors as ShardOf's.
absl::StatusOr<std::vector<ShardRun>> ShardRuns(const GptParameter& p, int tp_size, int tp_rank);

}  // namespace loom

#endif  // LOOM_MODELS_GPT_GPT_PARAMETER_H_
