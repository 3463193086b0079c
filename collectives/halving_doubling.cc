#include "collectives/halving_doubling.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "collectives/internal/arg_checks.h"
#include "collectives/reduce/reduce_kernels.h"
#include "core/buffer_view.h"
#include "core/dtype.h"
#include "core/status_macros.h"

namespace loom {
namespace collectives_internal {
namespace {

// Steps: one per message exchange, so no two phases' messages between the same two
// ranks can match each other. A power-of-two group has at most 30 halvings.
constexpr uint32_t kFoldInStep = 0;
constexpr uint32_t kHalvingStep = 1;    // + k for the k-th halving
constexpr uint32_t kDoublingStep = 33;  // + k for the k-th doubling
constexpr uint32_t kFoldOutStep = 65;

// Scratch slots.
constexpr int kReceiveSlot = 0;  // what the partner sends, before it is reduced
constexpr int kSumSlot = 1;      // reduce-scatter's partial sums (the input is read-only)

// Fold: how n ranks map onto the p = 2^k <= n ranks of the power-of-two algorithm,
// as Thakur et al. handle n that is not a power of two. Of the first 2r ranks
// (r = n - p), each even one folds into the odd one above it; those odd ones become
// ranks 0..r-1 of the power-of-two group and ranks 2r.. become r..p-1, keeping rank
// order.
struct Fold {
  Fold(int n, int rank) {
    while (p * 2 <= n) p *= 2;
    r = n - p;
    if (rank >= 2 * r) {
      group_rank = rank - r;
    } else if (rank % 2 == 1) {
      group_rank = rank / 2;
    }
  }
  // Sender: an even rank below 2r, which hands its data to rank + 1 and sits out.
  bool sender() const { return group_rank < 0; }
  // Whether this is an odd rank below 2r, standing in for rank - 1 as well.
  bool stands_in() const { return group_rank >= 0 && group_rank < r; }
  int RealRank(int in_group) const { return in_group < r ? 2 * in_group + 1 : in_group + r; }

  int p = 1;
  int r = 0;
  int group_rank = -1;
};

// Slots: the elements each rank of the power-of-two group owns, slot x being
// elements [Start(x), Start(x + 1)). For all-reduce slot x is Block(count, p, x);
// for reduce-scatter and all-gather it is the blocks of count elements of the ranks
// that group rank x stands for (two for x < r, one otherwise), so that slots run in
// rank order and a range of slots is one contiguous range of elements.
struct Slots {
  size_t Start(int64_t x) const {
    if (!per_rank) return Block(count, fold.p, static_cast<int>(x)).offset;
    return count * static_cast<size_t>(x < fold.r ? 2 * x : x + fold.r);
  }
  BlockRange Range(int64_t first, int64_t end) const {
    return BlockRange{Start(first), Start(end) - Start(first)};
  }

  Fold fold;
  size_t count = 0;
  bool per_rank = false;
};

absl::Status SendTo(const CallContext& ctx, uint32_t step, int peer, ConstBufferView data) {
  LOOM_ASSIGN_OR_RETURN(const Request request, PostSend(ctx, step, peer, data));
  const Request requests[] = {request};
  return WaitAll(ctx, requests);
}

absl::Status ReceiveFrom(const CallContext& ctx, uint32_t step, int peer, BufferView data) {
  LOOM_ASSIGN_OR_RETURN(const Request request, PostRecv(ctx, step, peer, data));
  const Request requests[] = {request};
  return WaitAll(ctx, requests);
}

// ReduceScatterByHalving: the power-of-two group's reduce-scatter by recursive halving. In
// step k the group rank exchanges with the one p / 2^(k+1) away: it sends the half of
// its current range of slots that the partner keeps (taken from `source`, the
// unreduced input before the first step) and reduces the half it keeps into `sums`.
// Afterwards sums holds the full reduction of this rank's own slot; nothing else of
// `sums` is meaningful. `receive` holds at least the larger first half.
absl::Status ReduceScatterByHalving(const CallContext& ctx, const Slots& slots, ReduceOp op,
                                    ConstBufferView source, BufferView sums,
                                    absl::Span<std::byte> receive) {
  const Fold& fold = slots.fold;
  const DType dtype = sums.dtype();
  int64_t low = 0;  // current range of slots: [low, low + 2 * distance)
  uint32_t step = kHalvingStep;
  for (int64_t distance = fold.p / 2; distance >= 1; distance /= 2, ++step) {
    const bool upper = (fold.group_rank & distance) != 0;
    const int64_t mid = low + distance;
    const BlockRange keep = upper ? slots.Range(mid, mid + distance) : slots.Range(low, mid);
    const BlockRange give = upper ? slots.Range(low, mid) : slots.Range(mid, mid + distance);
    const BufferView theirs(receive.data(), keep.count, dtype);
    const int partner = fold.RealRank(static_cast<int>(fold.group_rank ^ distance));
    LOOM_RETURN_IF_ERROR(Exchange(ctx, step, partner, Slice(source, give), partner, theirs));
    LOOM_RETURN_IF_ERROR(ReduceTo(op, Slice(source, keep), theirs, Slice(sums, keep)));
    source = sums;
    if (upper) low = mid;
  }
  return absl::OkStatus();
}

// AllGatherByDoubling: the power-of-two group's all-gather by recursive doubling. Before step
// k each group rank holds the 2^k slots of its aligned group of 2^k in `data`; it
// swaps them with the rank 2^k away, doubling what it holds.
absl::Status AllGatherByDoubling(const CallContext& ctx, const Slots& slots, BufferView data) {
  const Fold& fold = slots.fold;
  uint32_t step = kDoublingStep;
  for (int64_t distance = 1; distance < fold.p; distance *= 2, ++step) {
    const int64_t partner_rank = fold.group_rank ^ distance;
    const int64_t mine = fold.group_rank & ~(distance - 1);
    const int64_t theirs = partner_rank & ~(distance - 1);
    const int partner = fold.RealRank(static_cast<int>(partner_rank));
    LOOM_RETURN_IF_ERROR(Exchange(ctx, step, partner, Slice(data, slots.Range(mine, mine + distance)),
                                  partner, Slice(data, slots.Range(theirs, theirs + distance))));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status HalvingDoublingAllReduce(const CallContext& ctx, const CollectiveArgs& args) {
  constexpr char kName[] = "HalvingDoublingAllReduce";
  const size_t count = args.count;
  LOOM_RETURN_IF_ERROR(CheckArgs(ctx, args, kName, count, count));
  if (count == 0) return absl::OkStatus();
  if (ctx.size() == 1) return Copy(args.input, args.output);

  const Slots slots{Fold(ctx.size(), ctx.rank()), count, /*per_rank=*/false};
  const Fold& fold = slots.fold;
  if (fold.sender()) {
    // Fold in: hand everything to rank + 1; fold out: take the result back.
    LOOM_RETURN_IF_ERROR(SendTo(ctx, kFoldInStep, ctx.rank() + 1, args.input));
    return ReceiveFrom(ctx, kFoldOutStep, ctx.rank() + 1, args.output);
  }
  // The first halving receives the larger half; a stand-in first receives everything.
  const size_t receive_count = fold.stands_in() ? count : slots.Start(fold.p / 2);
  LOOM_ASSIGN_OR_RETURN(const absl::Span<std::byte> receive,
                        ctx.scratch->Get(kReceiveSlot, receive_count * DTypeSize(args.input.dtype())));
  ConstBufferView source = args.input;
  if (fold.stands_in()) {
    const BufferView theirs(receive.data(), count, args.input.dtype());
    LOOM_RETURN_IF_ERROR(ReceiveFrom(ctx, kFoldInStep, ctx.rank() - 1, theirs));
    LOOM_RETURN_IF_ERROR(ReduceTo(args.op, args.input, theirs, args.output));
    source = args.output;
  }
  // Rabenseifner: reduce-scatter, then all-gather, both within the output.
  LOOM_RETURN_IF_ERROR(
      ReduceScatterByHalving(ctx, slots, args.op, source, args.output, receive));
  LOOM_RETURN_IF_ERROR(AllGatherByDoubling(ctx, slots, args.output));
  if (fold.stands_in()) return SendTo(ctx, kFoldOutStep, ctx.rank() - 1, args.output);
  return absl::OkStatus();
}

absl::Status HalvingDoublingReduceScatter(const CallContext& ctx, const CollectiveArgs& args) {
  constexpr char kName[] = "HalvingDoublingReduceScatter";
  const size_t count = args.count;
  const int n = ctx.size();
  const int rank = ctx.rank();
  LOOM_RETURN_IF_ERROR(CheckArgs(ctx, args, kName, n * count, count));
  LOOM_RETURN_IF_ERROR(CheckBlockAliasing(kName, args.output, args.input, rank));
  if (count == 0) return absl::OkStatus();
  if (n == 1) return Copy(args.input, args.output);

  const Slots slots{Fold(n, rank), count, /*per_rank=*/true};
  const Fold& fold = slots.fold;
  const size_t total = n * count;
  if (fold.sender()) {
    LOOM_RETURN_IF_ERROR(SendTo(ctx, kFoldInStep, rank + 1, args.input));
    return ReceiveFrom(ctx, kFoldOutStep, rank + 1, args.output);
  }
  const DType dtype = args.input.dtype();
  const size_t first_half = std::max(slots.Start(fold.p / 2), total - slots.Start(fold.p / 2));
  LOOM_ASSIGN_OR_RETURN(
      const absl::Span<std::byte> receive,
      ctx.scratch->Get(kReceiveSlot, (fold.stands_in() ? total : first_half) * DTypeSize(dtype)));
  LOOM_ASSIGN_OR_RETURN(const absl::Span<std::byte> sum_bytes,
                        ctx.scratch->Get(kSumSlot, total * DTypeSize(dtype)));
  const BufferView sums(sum_bytes.data(), total, dtype);
  ConstBufferView source = args.input;
  if (fold.stands_in()) {
    const BufferView theirs(receive.data(), total, dtype);
    LOOM_RETURN_IF_ERROR(ReceiveFrom(ctx, kFoldInStep, rank - 1, theirs));
    LOOM_RETURN_IF_ERROR(ReduceTo(args.op, args.input, theirs, sums));
    source = sums;
  }
  LOOM_RETURN_IF_ERROR(ReduceScatterByHalving(ctx, slots, args.op, source, sums, receive));
  // This group rank's slot is its own block, and for a stand-in also the block of
  // the rank below it, which goes back to that rank.
  if (fold.stands_in()) {
    LOOM_RETURN_IF_ERROR(SendTo(ctx, kFoldOutStep, rank - 1, Slice(sums, (rank - 1) * count, count)));
  }
  return Copy(Slice(sums, rank * count, count), args.output);
}

absl::Status HalvingDoublingAllGather(const CallContext& ctx, const CollectiveArgs& args) {
  constexpr char kName[] = "HalvingDoublingAllGather";
  const size_t count = args.count;
  const int n = ctx.size();
  const int rank = ctx.rank();
  LOOM_RETURN_IF_ERROR(CheckArgs(ctx, args, kName, count, n * count));
  LOOM_RETURN_IF_ERROR(CheckBlockAliasing(kName, args.input, args.output, rank));
  if (count == 0) return absl::OkStatus();

  const Slots slots{Fold(n, rank), count, /*per_rank=*/true};
  const Fold& fold = slots.fold;
  if (fold.sender()) {
    // Fold in: the rank above gathers for both; fold out: it hands back everything.
    LOOM_RETURN_IF_ERROR(SendTo(ctx, kFoldInStep, rank + 1, args.input));
    return ReceiveFrom(ctx, kFoldOutStep, rank + 1, args.output);
  }
  LOOM_RETURN_IF_ERROR(Copy(args.input, Slice(args.output, rank * count, count)));
  if (fold.stands_in()) {
    LOOM_RETURN_IF_ERROR(
        ReceiveFrom(ctx, kFoldInStep, rank - 1, Slice(args.output, (rank - 1) * count, count)));
  }
  LOOM_RETURN_IF_ERROR(AllGatherByDoubling(ctx, slots, args.output));
  if (fold.stands_in()) return SendTo(ctx, kFoldOutStep, rank - 1, args.output);
  return absl::OkStatus();
}

}  // namespace collectives_internal
}  // namespace loom
