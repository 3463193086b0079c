#include "collectives/internal/arg_checks.h"

#include "absl/strings/str_cat.h"
#include "core/dtype.h"

namespace loom {
namespace collectives_internal {

absl::Status DescribeBadArgs(const CallContext& ctx, const CollectiveArgs& args,
                             absl::string_view name, size_t input_elements,
                             size_t output_elements) {
  const std::string where = absl::StrCat(name, " on rank ", ctx.rank(), " of ", ctx.size(),
                                         ", count ", args.count, ": ");
  if (input_elements != kUnchecked && args.input.size() != input_elements) {
    return absl::InvalidArgumentError(absl::StrCat(where, "input has ", args.input.size(),
                                                   " elements, expected ", input_elements));
  }
  if (output_elements != kUnchecked && args.output.size() != output_elements) {
    return absl::InvalidArgumentError(absl::StrCat(where, "output has ", args.output.size(),
                                                   " elements, expected ", output_elements));
  }
  return absl::InvalidArgumentError(absl::StrCat(where, "input is ", DTypeName(args.input.dtype()),
                                                 " but output is ",
                                                 DTypeName(args.output.dtype())));
}

absl::Status CheckRoot(const CallContext& ctx, const CollectiveArgs& args, absl::string_view name) {
  if (args.root < 0 || args.root >= ctx.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": root ", args.root, " is not a rank of ", ctx.size()));
  }
  return absl::OkStatus();
}

absl::Status CheckBlockAliasing(absl::string_view name, ConstBufferView part,
                                ConstBufferView whole, int block) {
  const std::byte* p = part.data();
  const std::byte* w = whole.data();
  const bool disjoint = p + part.size_bytes() <= w || w + whole.size_bytes() <= p;
  if (disjoint || part.size_bytes() == 0) return absl::OkStatus();
  const size_t offset = static_cast<size_t>(block) * part.size_bytes();
  if (p == w + offset) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(name, ": the ", part.size(), "-element buffer overlaps the ", whole.size(),
                   "-element one at byte offset ", p - w, " but is not block ", block,
                   " (byte offset ", offset, ")"));
}

}  // namespace collectives_internal
}  // namespace loom
