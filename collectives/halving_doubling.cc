#include "collectives/halving_doubling.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "collectives/direct.h"
#include "collectives/group_transport.h"
#include "collectives/internal/arg_checks.h"
#include "collectives/internal/in_flight.h"
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

// Distances: the order in which the power-of-two group's exchanges take their
// partners. Farthest first (p/2, ..., 2, 1) leaves group rank g with slot g, in rank
// order, as reduce-scatter and all-gather need. Nearest first (1, 2, ..., p/2) leaves
// g with the slot whose bits are g's reversed; an all-reduce does not mind, and with
// several ranks per node (consecutive ranks share a node) its full-size first
// exchanges then stay inside the node and only the halved later ones cross between
// nodes (2 hosts of 2 ranks: 2 buffers each way on a host's link became 1).
struct Distances {
  Distances(int64_t group, bool nearest) : p(group), nearest_first(nearest) {}
  int count() const { return __builtin_ctzll(static_cast<uint64_t>(p)); }
  // The distance of exchange k, k in [0, count()).
  int64_t At(int k) const { return nearest_first ? int64_t{1} << k : (p >> 1) >> k; }
  // The slots group rank g holds after the first `k` halvings: [low, low + p >> k).
  int64_t Low(int64_t g, int k) const {
    int64_t low = 0, width = p;
    for (int i = 0; i < k; ++i) {
      width /= 2;
      if ((g & At(i)) != 0) low += width;
    }
    return low;
  }

  int64_t p;
  bool nearest_first;
};

// ReduceScatterByHalving: the power-of-two group's reduce-scatter by recursive
// halving. In exchange k the group rank swaps with the one distances.At(k) away: it
// sends the half of its current range of slots that the partner keeps (taken from
// `source`, the unreduced input before the first exchange) and reduces the half it
// keeps into `sums`. Afterwards sums holds the full reduction of this rank's slot
// (Distances: its own, farthest first); nothing else of `sums` is meaningful.
// `receive` holds at least the larger first half. With `halvings` >= 0 it stops
// after that many exchanges, sums then holding the reduction, over the ranks of
// this rank's group of 2^halvings, of the slots it holds (Distances::Low).
absl::Status ReduceScatterByHalving(const CallContext& ctx, const Slots& slots, ReduceOp op,
                                    ConstBufferView source, BufferView sums,
                                    absl::Span<std::byte> receive,
                                    bool nearest_first = false, int halvings = -1) {
  const Fold& fold = slots.fold;
  const Distances distances(fold.p, nearest_first);
  const DType dtype = sums.dtype();
  if (halvings < 0) halvings = distances.count();
  int64_t low = 0, width = fold.p;  // current range of slots: [low, low + width)
  for (int k = 0; k < halvings; ++k) {
    const int64_t distance = distances.At(k);
    const bool upper = (fold.group_rank & distance) != 0;
    width /= 2;
    const int64_t mid = low + width;
    const BlockRange keep = upper ? slots.Range(mid, mid + width) : slots.Range(low, mid);
    const BlockRange give = upper ? slots.Range(low, mid) : slots.Range(mid, mid + width);
    const BufferView theirs(receive.data(), keep.count, dtype);
    const int partner = fold.RealRank(static_cast<int>(fold.group_rank ^ distance));
    LOOM_RETURN_IF_ERROR(Exchange(ctx, kHalvingStep + static_cast<uint32_t>(k), partner,
                                  Slice(source, give), partner, theirs));
    LOOM_RETURN_IF_ERROR(ReduceTo(op, Slice(source, keep), theirs, Slice(sums, keep)));
    source = sums;
    if (upper) low = mid;
  }
  return absl::OkStatus();
}

// AllGatherByDoubling: the power-of-two group's all-gather by recursive doubling, the
// halvings' exchanges in reverse: before each, a group rank holds the slots its
// halvings had left it at that depth (Distances), and it swaps them with the partner
// for their sibling range, doubling what it holds. The first `done` doublings are
// skipped (MiddleExchange made them).
absl::Status AllGatherByDoubling(const CallContext& ctx, const Slots& slots, BufferView data,
                                 bool nearest_first = false, int done = 0) {
  const Fold& fold = slots.fold;
  const Distances distances(fold.p, nearest_first);
  const int64_t g = fold.group_rank;
  uint32_t step = kDoublingStep + static_cast<uint32_t>(done);
  for (int k = distances.count() - 1 - done; k >= 0; --k, ++step) {
    const int64_t distance = distances.At(k);
    const int64_t width = fold.p >> (k + 1);  // what each of the two holds now
    const int64_t mine = distances.Low(g, k + 1);
    const int64_t theirs = distances.Low(g ^ distance, k + 1);
    const int partner = fold.RealRank(static_cast<int>(g ^ distance));
    LOOM_RETURN_IF_ERROR(Exchange(ctx, step, partner, Slice(data, slots.Range(mine, mine + width)),
                                  partner, Slice(data, slots.Range(theirs, theirs + width))));
  }
  return absl::OkStatus();
}

// The most chunks MiddleExchange cuts each direction into: as direct's exchanges (a
// handful hides the staging and the fold; over shm each chunk costs a message).
constexpr int kMaxMiddleChunks = 8;

// MiddleExchange: an all-reduce's last halving and first doubling, which have the
// same partner, as one pipelined exchange of one slot each way. Both directions are
// cut into the same chunks (about ctx.chunk_bytes, at most kMaxMiddleChunks); the
// partner's chunk c of the slot this rank keeps is reduced as it arrives (Delivery:
// op(mine, theirs), as the whole-slot reduction did, so the same bits) and sent back
// at once, and the partner's reduced chunks of the other slot land in place. Before,
// the doubling waited for the whole halving and its reduction: at 2 ranks, the
// whole all-reduce ran as two exchanges in turn, a round trip and a reduction of
// half the buffer between them. Where the transport measures the path (between
// hosts), this rank's halving chunks go out a window at a time (SendWindow: 2 on a
// short path, enough to cover the bandwidth-delay product on a long one, all of
// them over memory): over gloo all 8 at once made a 16 MiB all-reduce between 2
// hosts 6% slower than one whole message, where 2 at a time does as the ring does.
// The receives are all posted at once, so each side's window is its own. `source`
// holds this rank's operands (the input at 2 ranks, else `data`); `data` receives
// the result.
absl::Status MiddleExchange(const CallContext& ctx, const Slots& slots, ReduceOp op,
                            ConstBufferView source, BufferView data) {
  const Fold& fold = slots.fold;
  const Distances distances(fold.p, /*nearest=*/true);
  const int k = distances.count() - 1;
  const int64_t distance = distances.At(k);
  const int64_t g = fold.group_rank;
  const int64_t low = distances.Low(g, k);  // two slots: [low, low + 2)
  const bool upper = (g & distance) != 0;
  const BlockRange keep = upper ? slots.Range(low + 1, low + 2) : slots.Range(low, low + 1);
  const BlockRange give = upper ? slots.Range(low, low + 1) : slots.Range(low + 1, low + 2);
  const int partner = fold.RealRank(static_cast<int>(g ^ distance));
  // The same on both ends: each cuts the longer of the two slots.
  const DType dtype = data.dtype();
  const size_t longer = std::max(keep.count, give.count);
  const int chunks = std::min(kMaxMiddleChunks, NumChunks(ctx, longer, dtype));
  const int window =
      SendWindow(ctx, Block(longer, chunks, 0).count * DTypeSize(dtype), partner, chunks);
  const uint32_t halving = kHalvingStep + static_cast<uint32_t>(k);
  const uint32_t doubling = kDoublingStep;
  const ConstBufferView mine = Slice(source, keep);
  const ConstBufferView given = Slice(source, give);
  const BufferView kept = Slice(data, keep);
  const BufferView returned = Slice(data, give);
  auto give_chunk = [&](int c) { return Slice(given, Block(give.count, chunks, c)); };
  std::array<Delivery, kMaxMiddleChunks> folds;
  InFlight<kMaxMiddleChunks> halving_sends(ctx);
  InFlight<kMaxMiddleChunks> doubling_sends(ctx);
  InFlight<kMaxMiddleChunks> arriving(ctx);  // the folds, chunk by chunk
  InFlight<kMaxMiddleChunks> returning(ctx);
  // Sends first: a small one leaves at once, and the receives still come before
  // this rank next looks for messages.
  for (int c = 0; c < window; ++c) {
    LOOM_RETURN_IF_ERROR(halving_sends.Send(halving, partner, give_chunk(c)));
  }
  for (int c = 0; c < chunks; ++c) {
    const BlockRange part = Block(keep.count, chunks, c);
    folds[c] = Delivery::Reduce(op, Slice(mine, part));
    LOOM_RETURN_IF_ERROR(arriving.Recv(halving, partner, Slice(kept, part), folds[c]));
  }
  for (int c = 0; c < chunks; ++c) {
    // The returned chunk lands where this rank's chunk c was sent from (in place, or
    // past the first halving): its receive is posted once that send is finished,
    // so no transport reads memory a receive writes. The partner returns it only
    // after it has it, so the receive is still posted before it comes.
    LOOM_RETURN_IF_ERROR(halving_sends.WaitOldest());
    LOOM_RETURN_IF_ERROR(
        returning.Recv(doubling, partner, Slice(returned, Block(give.count, chunks, c))));
    LOOM_RETURN_IF_ERROR(arriving.WaitOldest());
    LOOM_RETURN_IF_ERROR(folds[c].failure);
    LOOM_RETURN_IF_ERROR(
        doubling_sends.Send(doubling, partner, Slice(kept, Block(keep.count, chunks, c))));
    if (c + window < chunks) {
      LOOM_RETURN_IF_ERROR(halving_sends.Send(halving, partner, give_chunk(c + window)));
    }
  }
  const absl::Status sent = doubling_sends.Wait();
  const absl::Status received = returning.Wait();
  return sent.ok() ? received : sent;
}

// PairedFold: an all-reduce's ranks when n = p + r is not a power of two. Each pair
// (2i, 2i + 1), i < r, is group rank i of the power-of-two algorithm, the even rank
// holding the group rank's lower half of the slots and the odd one its upper half;
// rank j >= 2r is group rank j - r alone, holding both. The pair first swaps halves
// (each reduces the half it holds); in the first halving each half goes between its
// holders; afterwards a group rank is the rank holding the half it keeps (the other
// waits), and the last doubling hands each half back to its holders, who then swap
// halves again. So a pair's ranks each move half the data in and out at the fold,
// where handing all of it to one of them (Thakur et al.) moved all of it twice
// through that one's link: at 3 ranks a ceiling of 2/3 of a bus-optimal schedule's
// rate rather than 4/9.
struct PairedFold {
  PairedFold(int n, int rank) : fold(n, rank) {
    if (rank < 2 * fold.r) {
      group = rank / 2;
      paired = true;
      holds_upper = rank % 2 == 1;
    } else {
      group = rank - fold.r;
    }
  }
  // The rank holding group rank g's lower or upper half.
  int Holder(int64_t g, bool upper) const {
    const int gi = static_cast<int>(g);
    return gi < fold.r ? 2 * gi + (upper ? 1 : 0) : gi + fold.r;
  }
  // Whether group rank g keeps the upper half in the first halving.
  bool KeepsUpper(int64_t g) const { return (g & (fold.p / 2)) != 0; }
  // The rank that stands for group rank g between the first halving and the last
  // doubling: the holder of the half it keeps.
  int Keeper(int64_t g) const { return Holder(g, KeepsUpper(g)); }

  Fold fold;
  int group = 0;
  bool paired = false;
  bool holds_upper = false;
};

// PairedFoldAllReduce: all-reduce on n = p + r ranks, r > 0 (see PairedFold). Every
// element is still reduced in one place and handed out from there, so every rank
// ends with the same bits.
absl::Status PairedFoldAllReduce(const CallContext& ctx, const CollectiveArgs& args) {
  const size_t count = args.count;
  const DType dtype = args.input.dtype();
  const PairedFold pf(ctx.size(), ctx.rank());
  const Slots slots{pf.fold, count, /*per_rank=*/false};
  const int64_t p = pf.fold.p;
  const int64_t half = p / 2;
  const BlockRange halves[2] = {slots.Range(0, half), slots.Range(half, p)};
  const int64_t g = pf.group;
  const bool keeps_upper = pf.KeepsUpper(g);
  const int64_t partner = g ^ half;
  // The larger of the halves (the lower one), which every receive fits.
  LOOM_ASSIGN_OR_RETURN(const absl::Span<std::byte> receive,
                        ctx.scratch->Get(kReceiveSlot, halves[0].count * DTypeSize(dtype)));
  auto theirs = [&](const BlockRange& range) {
    return BufferView(receive.data(), range.count, dtype);
  };
  const BlockRange keep = halves[keeps_upper ? 1 : 0];
  const BlockRange give = halves[keeps_upper ? 0 : 1];
  const int last_doubling =
      static_cast<int>(kDoublingStep) + __builtin_ctzll(static_cast<uint64_t>(p)) - 1;

  if (pf.paired) {
    // Fold in: swap halves with the other rank of the pair, each reducing its own.
    const BlockRange mine = halves[pf.holds_upper ? 1 : 0];
    const BlockRange other = halves[pf.holds_upper ? 0 : 1];
    const int pair = ctx.rank() ^ 1;
    LOOM_RETURN_IF_ERROR(
        Exchange(ctx, kFoldInStep, pair, Slice(args.input, other), pair, theirs(mine)));
    LOOM_RETURN_IF_ERROR(
        ReduceTo(args.op, Slice(args.input, mine), theirs(mine), Slice(args.output, mine)));
    if (pf.holds_upper != keeps_upper) {
      // This rank holds the half its group rank gives away: it goes to the partner's
      // holder of that half, and the result comes back in the last doubling.
      LOOM_RETURN_IF_ERROR(SendTo(ctx, kHalvingStep, pf.Holder(partner, !keeps_upper),
                                  Slice(args.output, give)));
      LOOM_RETURN_IF_ERROR(ReceiveFrom(ctx, static_cast<uint32_t>(last_doubling),
                                       pf.Holder(partner, !keeps_upper),
                                       Slice(args.output, give)));
    } else {
      LOOM_RETURN_IF_ERROR(
          ReceiveFrom(ctx, kHalvingStep, pf.Holder(partner, keeps_upper), theirs(keep)));
      LOOM_RETURN_IF_ERROR(
          ReduceTo(args.op, Slice(args.output, keep), theirs(keep), Slice(args.output, keep)));
    }
  } else {
    // The first halving, with the partner's two holders when it is a pair.
    LOOM_RETURN_IF_ERROR(Exchange(ctx, kHalvingStep, pf.Holder(partner, !keeps_upper),
                                  Slice(args.input, give), pf.Holder(partner, keeps_upper),
                                  theirs(keep)));
    LOOM_RETURN_IF_ERROR(
        ReduceTo(args.op, Slice(args.input, keep), theirs(keep), Slice(args.output, keep)));
  }

  if (!pf.paired || pf.holds_upper == keeps_upper) {
    // The power-of-two algorithm within the kept half, among the keepers.
    int64_t low = keeps_upper ? half : 0;
    uint32_t step = kHalvingStep + 1;
    for (int64_t distance = half / 2; distance >= 1; distance /= 2, ++step) {
      const bool upper = (g & distance) != 0;
      const int64_t mid = low + distance;
      const BlockRange k = upper ? slots.Range(mid, mid + distance) : slots.Range(low, mid);
      const BlockRange x = upper ? slots.Range(low, mid) : slots.Range(mid, mid + distance);
      const int peer = pf.Keeper(g ^ distance);
      LOOM_RETURN_IF_ERROR(Exchange(ctx, step, peer, Slice(args.output, x), peer, theirs(k)));
      LOOM_RETURN_IF_ERROR(
          ReduceTo(args.op, Slice(args.output, k), theirs(k), Slice(args.output, k)));
      if (upper) low = mid;
    }
    step = kDoublingStep;
    for (int64_t distance = 1; distance < half; distance *= 2, ++step) {
      const int64_t peer_g = g ^ distance;
      const int64_t mine = g & ~(distance - 1);
      const int64_t other = peer_g & ~(distance - 1);
      const int peer = pf.Keeper(peer_g);
      LOOM_RETURN_IF_ERROR(Exchange(ctx, step, peer,
                                    Slice(args.output, slots.Range(mine, mine + distance)), peer,
                                    Slice(args.output, slots.Range(other, other + distance))));
    }
    // The last doubling: the kept half to the partner's holder of it; the given half
    // back from the partner's keeper, to this rank unless its pair holds that half.
    if (pf.paired) {
      LOOM_RETURN_IF_ERROR(SendTo(ctx, static_cast<uint32_t>(last_doubling),
                                  pf.Holder(partner, keeps_upper), Slice(args.output, keep)));
    } else {
      LOOM_RETURN_IF_ERROR(Exchange(ctx, static_cast<uint32_t>(last_doubling),
                                    pf.Holder(partner, keeps_upper), Slice(args.output, keep),
                                    pf.Holder(partner, !keeps_upper), Slice(args.output, give)));
    }
  }
  if (!pf.paired) return absl::OkStatus();
  // Fold out: swap halves with the other rank of the pair again.
  const BlockRange mine = halves[pf.holds_upper ? 1 : 0];
  const BlockRange other = halves[pf.holds_upper ? 0 : 1];
  const int pair = ctx.rank() ^ 1;
  return Exchange(ctx, kFoldOutStep, pair, Slice(args.output, mine), pair,
                  Slice(args.output, other));
}

// RadixAllReduce: all-reduce on n = p * m ranks by the power-of-two algorithm around
// a radix-m step (halving_doubling.h). Block q is ranks q*p .. q*p + p - 1, which
// reduce-scatter by halving and all-gather by doubling; between the two, the m ranks
// holding slot c (ranks c, p + c, 2p + c, ...) all-reduce it directly. Consecutive
// ranks share a node where there are several per node (topology's NodeLayout), so
// the blocks' full-size exchanges stay within nodes and only a p-th of the data
// crosses between them. Each phase runs on a view of the call's transport in its own
// quarter of the call's steps, so no two phases' messages match even between the
// same two ranks.
absl::Status RadixAllReduce(const CallContext& ctx, const CollectiveArgs& args, int m) {
  const int n = ctx.size();
  const int p = n / m;
  const int block = ctx.rank() / p;
  const int c = ctx.rank() % p;
  std::vector<int> block_ranks, slot_ranks;
  for (int i = 0; i < p; ++i) block_ranks.push_back(block * p + i);
  for (int q = 0; q < m; ++q) slot_ranks.push_back(q * p + c);
  // The views borrow the call's transport and live only for this call.
  const std::shared_ptr<Transport> borrowed(ctx.transport, [](Transport*) {});
  LOOM_ASSIGN_OR_RETURN(const std::unique_ptr<GroupTransport> within_block,
                        GroupTransport::Create(borrowed, block_ranks));
  LOOM_ASSIGN_OR_RETURN(const std::unique_ptr<GroupTransport> across_blocks,
                        GroupTransport::Create(borrowed, slot_ranks));
  constexpr uint32_t kPhaseSteps = kMaxSteps / 4;
  const auto phase = [&](Transport* view, uint32_t index) {
    CallContext phase_ctx = ctx;
    phase_ctx.transport = view;
    phase_ctx.tag_base = ctx.tag_base + index * kPhaseSteps;
    return phase_ctx;
  };
  if (p == 1) return DirectAllReduce(phase(across_blocks.get(), 2), args);
  // 1. The block reduce-scatters by halving, nearest partner first: one slot of the
  // output holds the block's sum, the same slot on every rank c of every block.
  const Slots slots{Fold(p, c), args.count, /*per_rank=*/false};
  const Distances distances(p, /*nearest_first=*/true);
  const int64_t held = distances.Low(c, distances.count());
  const BlockRange mine = slots.Range(held, held + 1);
  LOOM_ASSIGN_OR_RETURN(
      const absl::Span<std::byte> receive,
      ctx.scratch->Get(kReceiveSlot, slots.Start(p / 2) * DTypeSize(args.input.dtype())));
  LOOM_RETURN_IF_ERROR(ReduceScatterByHalving(phase(within_block.get(), 1), slots, args.op,
                                              args.input, args.output, receive,
                                              /*nearest_first=*/true));
  // 2. The m ranks holding slot c all-reduce it directly, in place.
  CollectiveArgs slot = args;
  slot.count = mine.count;
  slot.input = Slice(args.output, mine);
  slot.output = Slice(args.output, mine);
  LOOM_RETURN_IF_ERROR(DirectAllReduce(phase(across_blocks.get(), 2), slot));
  // 3. The block all-gathers its p slots by doubling.
  return AllGatherByDoubling(phase(within_block.get(), 3), slots, args.output,
                             /*nearest_first=*/true);
}

}  // namespace

absl::Status HalvingDoublingAllReduce(const CallContext& ctx, const CollectiveArgs& args) {
  constexpr char kName[] = "HalvingDoublingAllReduce";
  const size_t count = args.count;
  LOOM_RETURN_IF_ERROR(CheckArgs(ctx, args, kName, count, count));
  if (count == 0) return absl::OkStatus();
  if (ctx.size() == 1) return Copy(args.input, args.output);

  if (const int m = HalvingDoublingRadix(ctx.size(), count * DTypeSize(args.input.dtype())); m > 1) {
    return RadixAllReduce(ctx, args, m);
  }
  const Slots slots{Fold(ctx.size(), ctx.rank()), count, /*per_rank=*/false};
  if (slots.fold.r > 0) return PairedFoldAllReduce(ctx, args);
  // Rabenseifner: reduce-scatter, then all-gather, both within the output; nearest
  // partner first, so that with several ranks per node the full-size exchanges stay
  // in the node (Distances). The last halving and the first doubling share a partner
  // and run as one pipelined exchange (MiddleExchange).
  const int halvings = Distances(slots.fold.p, /*nearest=*/true).count();
  // The halvings before the middle receive into scratch, the first the larger half;
  // the middle reduces as it receives, so at 2 ranks there is none.
  absl::Span<std::byte> receive;
  if (halvings > 1) {
    const size_t receive_bytes = slots.Start(slots.fold.p / 2) * DTypeSize(args.input.dtype());
    LOOM_ASSIGN_OR_RETURN(receive, ctx.scratch->Get(kReceiveSlot, receive_bytes));
  }
  LOOM_RETURN_IF_ERROR(ReduceScatterByHalving(ctx, slots, args.op, args.input, args.output,
                                              receive, /*nearest_first=*/true, halvings - 1));
  const ConstBufferView operands = halvings == 1 ? args.input : ConstBufferView(args.output);
  LOOM_RETURN_IF_ERROR(MiddleExchange(ctx, slots, args.op, operands, args.output));
  return AllGatherByDoubling(ctx, slots, args.output, /*nearest_first=*/true, /*done=*/1);
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
