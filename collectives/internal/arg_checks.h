#ifndef LOOM_COLLECTIVES_INTERNAL_ARG_CHECKS_H_
#define LOOM_COLLECTIVES_INTERNAL_ARG_CHECKS_H_

// The algorithms' one argument check (internal). The Communicator validates a call's
// buffers before it picks an algorithm; the algorithms are also called directly (by
// their tests, by the hierarchical and native paths), so each entry point checks what
// it needs here, with one set of messages:
//
//   // reduce-scatter: n * count elements in, count out, of one dtype.
//   LOOM_RETURN_IF_ERROR(CheckArgs(ctx, args, "ring reduce_scatter", n * count, count));
//   //   "ring reduce_scatter on rank 1 of 4, count 3: output has 2 elements, expected 3"
//   LOOM_RETURN_IF_ERROR(CheckRoot(ctx, args, "ring broadcast"));
//   //   "ring broadcast: root 4 is not a rank of 4"

#include <cstddef>

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "collectives/internal/call_context.h"
#include "core/buffer_view.h"

namespace loom {
namespace collectives_internal {

// An element count CheckArgs does not check (a non-root's unused buffer).
inline constexpr size_t kUnchecked = ~size_t{0};

// The message of a failed CheckArgs (out of line: the check runs in every call).
ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD absl::Status DescribeBadArgs(
    const CallContext& ctx, const CollectiveArgs& args, absl::string_view name,
    size_t input_elements, size_t output_elements);

// InvalidArgument naming the call, the rank and the sizes when args.input or
// args.output does not have the elements the call needs (kUnchecked skips one, and
// the dtype check), or when both are checked, non-empty and of different dtypes.
inline absl::Status CheckArgs(const CallContext& ctx, const CollectiveArgs& args,
                              absl::string_view name, size_t input_elements,
                              size_t output_elements) {
  const bool both_checked = input_elements != kUnchecked && output_elements != kUnchecked;
  if ((input_elements == kUnchecked || args.input.size() == input_elements) &&
      (output_elements == kUnchecked || args.output.size() == output_elements) &&
      (!both_checked || args.input.empty() || args.output.empty() ||
       args.input.dtype() == args.output.dtype())) {
    return absl::OkStatus();
  }
  return DescribeBadArgs(ctx, args, name, input_elements, output_elements);
}

// InvalidArgument "<name>: root R is not a rank of N" unless 0 <= args.root < ctx.size().
absl::Status CheckRoot(const CallContext& ctx, const CollectiveArgs& args, absl::string_view name);

// InvalidArgument unless `part` is disjoint from `whole` or is exactly its block `block`
// (NCCL's in-place gather, scatter, all-gather and reduce-scatter).
absl::Status CheckBlockAliasing(absl::string_view name, ConstBufferView part,
                                ConstBufferView whole, int block);

}  // namespace collectives_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_INTERNAL_ARG_CHECKS_H_
