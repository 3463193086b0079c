// The optimizer state a checkpoint keeps, as ranks hand it over and take it back:
// StateSlice (a range of one parameter's local shard: the f32 master weights and
// AdamW's two moments, what continuing bitwise needs; the step count is the
// checkpoint's step) and StateSource (how a loader fills such a range).
//
//   StateSlice s{/*param=*/3, /*begin=*/0, /*end=*/128};   // master, exp_avg, exp_avg_sq
//   StateSource source = reader.SourceFor(tensors);
//   LOOM_RETURN_IF_ERROR(source(3, 0, 128, master, exp_avg, exp_avg_sq));
#ifndef LOOM_CHECKPOINT_OPTIMIZER_STATE_H_
#define LOOM_CHECKPOINT_OPTIMIZER_STATE_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace loom {

// StateSlice: the optimizer state of elements [begin, end) of one parameter's local
// shard (parameter `param` of the list the rank saves). `dp_replicated`: every
// data-parallel rank holds the same slice (zero 0; ZeRO's persistent parameters), so
// one of them saves it.
struct StateSlice {
  int param = 0;
  int64_t begin = 0, end = 0;
  bool dp_replicated = false;
  std::vector<float> master, exp_avg, exp_avg_sq;
};

// StateSource fills the three fields of elements [begin, end) of parameter
// `param`'s local shard (each span has end - begin elements), e.g. from a checkpoint.
using StateSource =
    std::function<absl::Status(int param, int64_t begin, int64_t end, absl::Span<float> master,
                               absl::Span<float> exp_avg, absl::Span<float> exp_avg_sq)>;

}  // namespace loom

#endif  // LOOM_CHECKPOINT_OPTIMIZER_STATE_H_
