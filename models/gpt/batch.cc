#include "models/gpt/batch.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom {

absl::StatusOr<int64_t> FirstSequenceOf(absl::string_view source, const BatchLayout& layout,
                                        int64_t step, int64_t microbatch, int64_t dp_rank) {
  if (layout.micro_batch < 1 || layout.num_microbatches < 1 || layout.dp_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": layout micro_batch ", layout.micro_batch, ", num_microbatches ",
                     layout.num_microbatches, ", dp_size ", layout.dp_size, " must all be >= 1"));
  }
  if (step < 0) return absl::InvalidArgumentError(absl::StrCat(source, ": step ", step, " < 0"));
  if (microbatch < 0 || microbatch >= layout.num_microbatches) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": microbatch ", microbatch, " is outside [0, ", layout.num_microbatches, ")"));
  }
  if (dp_rank < 0 || dp_rank >= layout.dp_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": dp rank ", dp_rank, " is outside [0, ", layout.dp_size, ")"));
  }
  int64_t global = 0, first = 0;
  if (__builtin_mul_overflow(layout.micro_batch, layout.num_microbatches, &global) ||
      __builtin_mul_overflow(global, layout.dp_size, &global) ||
      __builtin_mul_overflow(step, global, &first) ||
      __builtin_add_overflow(
          first, (dp_rank * layout.num_microbatches + microbatch) * layout.micro_batch, &first)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": step ", step, " of a layout of ", layout.micro_batch, " x ",
        layout.num_microbatches, " x ", layout.dp_size, " sequences is past the int64 range"));
  }
  return first;
}

}  // namespace loom
