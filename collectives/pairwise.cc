#include "collectives/pairwise.h"

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/buffer_view.h"
#include "core/dtype.h"
#include "core/status_macros.h"

namespace loom {
namespace collectives_internal {
namespace {

// Every ordered pair of ranks exchanges one message per call, so one step number
// serves all n-1 steps.
constexpr uint32_t kAllToAllStep = 0;

int Mod(int a, int n) { return ((a % n) + n) % n; }

// Source returns what the steps send from: the input, or in place (where step s
// would overwrite block r-s before a later step sends it) a copy of it in scratch.
absl::StatusOr<ConstBufferView> Source(const CallContext& ctx, ConstBufferView input,
                                       BufferView output) {
  if (!SameMemory(input, output) || input.empty()) return input;
  LOOM_ASSIGN_OR_RETURN(const absl::Span<std::byte> bytes,
                        ctx.scratch->Get(kPairwiseInputSlot, input.size_bytes()));
  const BufferView copy(bytes.data(), input.size(), input.dtype());
  LOOM_RETURN_IF_ERROR(Copy(input, copy));
  return ConstBufferView(copy);
}

absl::Status CheckDTypes(const CallContext& ctx, const CollectiveArgs& args, const char* kind) {
  if (!args.input.empty() && !args.output.empty() && args.input.dtype() != args.output.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pairwise ", kind, " on rank ", ctx.rank(), " of ", ctx.size(), ": input is ",
        DTypeName(args.input.dtype()), " but output is ", DTypeName(args.output.dtype())));
  }
  return absl::OkStatus();
}

// Sums: the total of a count list and the sum of its entries before one index.
struct Sums {
  size_t total = 0;
  size_t before_index = 0;
};

// Sum adds up `counts`; InvalidArgument when the sum overflows size_t (counts no
// buffer could hold).
absl::StatusOr<Sums> Sum(absl::Span<const size_t> counts, int index, const char* name) {
  Sums sums;
  for (size_t k = 0; k < counts.size(); ++k) {
    if (static_cast<int>(k) == index) sums.before_index = sums.total;
    if (counts[k] > ~size_t{0} - sums.total) {
      return absl::InvalidArgumentError(
          absl::StrCat("pairwise all_to_allv: ", name, " overflow at entry ", k));
    }
    sums.total += counts[k];
  }
  return sums;
}

}  // namespace

absl::Status PairwiseAllToAll(const CallContext& ctx, const CollectiveArgs& args) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const size_t count = args.count;
  const auto check = [&](const char* name, size_t size) {
    if (size == n * count) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("pairwise all_to_all on rank ", r, " of ", n,
                                                   ", count ", count, ": ", name, " has ", size,
                                                   " elements, expected ", n * count));
  };
  LOOM_RETURN_IF_ERROR(check("input", args.input.size()));
  LOOM_RETURN_IF_ERROR(check("output", args.output.size()));
  LOOM_RETURN_IF_ERROR(CheckDTypes(ctx, args, "all_to_all"));
  if (count == 0) return absl::OkStatus();
  LOOM_ASSIGN_OR_RETURN(const ConstBufferView source, Source(ctx, args.input, args.output));
  const auto block = [&](int b) { return BlockRange{b * count, count}; };

  LOOM_RETURN_IF_ERROR(Copy(Slice(source, block(r)), Slice(args.output, block(r))));
  for (int s = 1; s < n; ++s) {
    const int to = Mod(r + s, n);
    const int from = Mod(r - s, n);
    LOOM_RETURN_IF_ERROR(Exchange(ctx, kAllToAllStep, to, Slice(source, block(to)), from,
                                  Slice(args.output, block(from))));
  }
  return absl::OkStatus();
}

absl::Status PairwiseAllToAllV(const CallContext& ctx, const CollectiveArgs& args) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const auto where = [&] {
    return absl::StrCat("pairwise all_to_allv on rank ", r, " of ", n, ": ");
  };
  const absl::Span<const size_t> send_counts = args.send_counts;
  const absl::Span<const size_t> recv_counts = args.recv_counts;
  if (send_counts.size() != static_cast<size_t>(n) ||
      recv_counts.size() != static_cast<size_t>(n)) {
    return absl::InvalidArgumentError(absl::StrCat(where(), "send_counts has ", send_counts.size(),
                                                   " entries and recv_counts ", recv_counts.size(),
                                                   ", expected ", n, " each"));
  }
  LOOM_ASSIGN_OR_RETURN(const Sums sent, Sum(send_counts, r, "send_counts"));
  LOOM_ASSIGN_OR_RETURN(const Sums received, Sum(recv_counts, r, "recv_counts"));
  if (sent.total != args.input.size()) {
    return absl::InvalidArgumentError(absl::StrCat(where(), "send_counts add up to ", sent.total,
                                                   " elements but input has ", args.input.size()));
  }
  if (received.total != args.output.size()) {
    return absl::InvalidArgumentError(absl::StrCat(where(), "recv_counts add up to ",
                                                   received.total, " elements but output has ",
                                                   args.output.size()));
  }
  if (send_counts[r] != recv_counts[r]) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), "send_counts[", r, "] = ", send_counts[r], " but recv_counts[", r,
                     "] = ", recv_counts[r], "; the block a rank keeps is both"));
  }
  LOOM_RETURN_IF_ERROR(CheckDTypes(ctx, args, "all_to_allv"));
  LOOM_ASSIGN_OR_RETURN(const ConstBufferView source, Source(ctx, args.input, args.output));

  LOOM_RETURN_IF_ERROR(Copy(Slice(source, sent.before_index, send_counts[r]),
                            Slice(args.output, received.before_index, recv_counts[r])));
  // The block sent goes one rank up per step and the block received one rank down,
  // so their offsets are kept running rather than summed afresh each step.
  int to = r;
  size_t to_offset = sent.before_index;
  int from = r;
  size_t from_offset = received.before_index;
  for (int s = 1; s < n; ++s) {
    to_offset += send_counts[to];
    to = Mod(to + 1, n);
    if (to == 0) to_offset = 0;
    if (from == 0) from_offset = received.total;
    from = Mod(from - 1, n);
    from_offset -= recv_counts[from];
    LOOM_RETURN_IF_ERROR(Exchange(ctx, kAllToAllStep, to, Slice(source, to_offset, send_counts[to]),
                                  from, Slice(args.output, from_offset, recv_counts[from])));
  }
  return absl::OkStatus();
}

}  // namespace collectives_internal
}  // namespace loom
