#include "collectives/direct.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>

#include "absl/base/attributes.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "collectives/internal/arg_checks.h"
#include "collectives/reduce/reduce_kernels.h"
#include "core/dtype.h"
#include "core/status_macros.h"

namespace loom {
namespace collectives_internal {
namespace {

// One step number per function, so that functions composed in one call never match
// each other's messages.
constexpr uint32_t kAllReduceStep = 0;
constexpr uint32_t kReduceScatterStep = 1;
constexpr uint32_t kAllGatherStep = 2;
constexpr uint32_t kBroadcastStep = 3;
constexpr uint32_t kReduceStep = 4;
constexpr uint32_t kGatherStep = 5;
constexpr uint32_t kScatterStep = 6;
constexpr uint32_t kBarrierStep = 7;

// Wrap returns a mod n for a in (-n, 2n): a peer's rank from an offset to this one's,
// without the two divisions of a general modulo.
int Wrap(int a, int n) { return a < 0 ? a + n : (a >= n ? a - n : a); }

// PostedRequests: the requests a rank posts at once, kept in scratch so that a call
// allocates nothing. Destroying it with requests not yet waited for (an early return
// on an error) cancels them: Wait with a deadline in the past finishes, fails or
// withdraws each one (transport.h), after which no peer touches their buffers.
// Cancelling at once rather than at the deadline returns the error promptly; the
// call has failed anyway.
class PostedRequests {
  static_assert(std::is_trivially_destructible_v<Request>, "requests are never destroyed");

 public:
  // `storage` is raw scratch memory; each Add constructs its request in place.
  PostedRequests(const CallContext& ctx, absl::Span<std::byte> storage)
      : ctx_(ctx),
        requests_(reinterpret_cast<Request*>(storage.data())),
        capacity_(storage.size() / sizeof(Request)) {}
  PostedRequests(const PostedRequests&) = delete;
  PostedRequests& operator=(const PostedRequests&) = delete;
  ~PostedRequests() {
    if (size_ > waited_) {
      ctx_.transport->Wait(absl::MakeConstSpan(requests_ + waited_, size_ - waited_),
                           absl::InfinitePast())
          .IgnoreError();
    }
  }

  // Add records a posted request; returns the error of posting it, or Internal
  // (after cancelling it) when there is no room.
  // (By reference: a StatusOr moved into a parameter and destroyed there weighed on
  // every small call.)
  absl::Status Add(const absl::StatusOr<Request>& posted) {
    if (!posted.ok()) return posted.status();
    if (size_ == capacity_) {
      ctx_.transport->Wait({*posted}, absl::InfinitePast()).IgnoreError();
      return absl::InternalError(absl::StrCat("direct: more than ", capacity_, " requests"));
    }
    new (&requests_[size_++]) Request(*posted);
    return absl::OkStatus();
  }

  // WaitNext waits for the `count` oldest requests not yet waited for (fewer when
  // fewer are left); they are finished when it returns, even when it fails.
  absl::Status WaitNext(size_t count) {
    const size_t first = waited_;
    count = std::min(count, size_ - waited_);
    waited_ += count;
    return collectives_internal::WaitAll(ctx_, absl::MakeConstSpan(requests_ + first, count));
  }

  // WaitAll waits for every request added and not yet waited for; they are all
  // finished when it returns, even when it fails.
  absl::Status WaitAll() {
    absl::Status status = WaitNext(size_ - waited_);
    size_ = waited_ = 0;
    return status;
  }

 private:
  const CallContext& ctx_;
  Request* const requests_;
  const size_t capacity_;
  size_t size_ = 0;
  size_t waited_ = 0;  // requests_[0, waited_) are finished
};

absl::StatusOr<absl::Span<std::byte>> RequestStorage(const CallContext& ctx, size_t requests) {
  return ctx.scratch->Get(kDirectRequestsSlot, std::max<size_t>(requests, 1) * sizeof(Request));
}

// The most chunks ExchangeInChunks cuts a message into. Over shm a chunk costs a
// message's overhead and one whole message is a single copy: 256 KiB chunks made a
// 64 MiB all-reduce on 2 ranks 40% slower there, while across hosts over gloo a
// handful of chunks already hides the staging and the fold. Eight kept shm within
// its noise and most of gloo's gain.
constexpr int kMaxChunks = 8;

// Chunks returns how many chunks a message of `count` elements of `dtype` (the
// longest of the exchange) is cut into: chunks of about ctx.chunk_bytes, at most
// kMaxChunks.
int Chunks(const CallContext& ctx, size_t count, DType dtype) {
  return std::min(kMaxChunks, NumChunks(ctx, count, dtype));
}

// ExchangeInChunks sends send(k) to and receives recv(k) from every other rank k,
// each message cut into `chunks` messages (Block(size, chunks, c), in order; the same
// count on every rank, so both ends of a message cut it alike), all posted at once in
// chunk order. As chunk c of every exchange finishes, on_chunk(c) runs while later
// chunks are still moving: the fold of chunk c overlaps the transfer of the rest, and
// a transport that stages a message (gloo) stages a chunk at a time. (The transports
// bound the bytes in flight to a peer themselves: mpi's send window is per peer.)
// Rank r sends to r+1, r+2, ... and receives from r-1, r-2, ..., so that the ranks do
// not all start on the same peer. With one rank it runs on_chunk for every chunk.
template <typename SendFn, typename RecvFn, typename OnChunk>
absl::Status ExchangeInChunks(const CallContext& ctx, uint32_t step, int chunks, SendFn send,
                              RecvFn recv, OnChunk on_chunk) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const size_t per_chunk = 2 * static_cast<size_t>(n - 1);
  LOOM_ASSIGN_OR_RETURN(const absl::Span<std::byte> storage,
                        RequestStorage(ctx, per_chunk * static_cast<size_t>(chunks)));
  PostedRequests requests(ctx, storage);
  for (int c = 0; c < chunks; ++c) {
    for (int i = 1; i < n; ++i) {
      const int from = Wrap(r - i, n);
      const int to = Wrap(r + i, n);
      // Send first: a small send leaves at once, and the receive posted after it
      // still comes before this rank next looks for messages (in Wait).
      const ConstBufferView out = send(to);
      const BufferView in = recv(from);
      LOOM_RETURN_IF_ERROR(
          requests.Add(PostSend(ctx, step, to, Slice(out, Block(out.size(), chunks, c)))));
      LOOM_RETURN_IF_ERROR(
          requests.Add(PostRecv(ctx, step, from, Slice(in, Block(in.size(), chunks, c)))));
    }
  }
  for (int c = 0; c < chunks; ++c) {
    LOOM_RETURN_IF_ERROR(requests.WaitNext(per_chunk));
    LOOM_RETURN_IF_ERROR(on_chunk(c));
  }
  return absl::OkStatus();
}

// GatherToRoot: every rank but the root sends `mine` to the root, which receives rank
// k's message into at_root(k), all at once.
template <typename AtRoot>
absl::Status GatherToRoot(const CallContext& ctx, uint32_t step, int root, ConstBufferView mine,
                          AtRoot at_root) {
  const int n = ctx.size();
  const int r = ctx.rank();
  LOOM_ASSIGN_OR_RETURN(const absl::Span<std::byte> storage, RequestStorage(ctx, n - 1));
  PostedRequests requests(ctx, storage);
  if (r != root) {
    LOOM_RETURN_IF_ERROR(requests.Add(PostSend(ctx, step, root, mine)));
  } else {
    for (int i = 1; i < n; ++i) {
      const int from = Wrap(r + i, n);
      LOOM_RETURN_IF_ERROR(requests.Add(PostRecv(ctx, step, from, at_root(from))));
    }
  }
  return requests.WaitAll();
}

// ScatterFromRoot: the root sends at_root(k) to every other rank k, all at once; each
// of them receives it into `mine`.
template <typename AtRoot>
absl::Status ScatterFromRoot(const CallContext& ctx, uint32_t step, int root, AtRoot at_root,
                             BufferView mine) {
  const int n = ctx.size();
  const int r = ctx.rank();
  LOOM_ASSIGN_OR_RETURN(const absl::Span<std::byte> storage, RequestStorage(ctx, n - 1));
  PostedRequests requests(ctx, storage);
  if (r != root) {
    LOOM_RETURN_IF_ERROR(requests.Add(PostRecv(ctx, step, root, mine)));
  } else {
    for (int i = 1; i < n; ++i) {
      const int to = Wrap(r + i, n);
      LOOM_RETURN_IF_ERROR(requests.Add(PostSend(ctx, step, to, at_root(to))));
    }
  }
  return requests.WaitAll();
}

// Contributions: where the n operands of a rank-order fold into `result` live. Rank
// k's arrives in block k of scratch; this rank's own is read where it is, unless it
// is the result itself (in place), which the fold overwrites before it reaches this
// rank's turn; then it is copied into its scratch block first. When the result is
// not this rank's own memory, the first of x_0, x_1 that another rank sends arrives
// in `result` itself: the fold's first step then reduces into it where it lies (the
// ops commute, see ReduceTo) instead of first copying x_0 there, a pass over the
// block that showed as much as the reduction itself in small calls.
class Contributions {
 public:
  static absl::StatusOr<Contributions> Make(const CallContext& ctx, ConstBufferView own,
                                            BufferView result) {
    const size_t size = result.size();
    LOOM_ASSIGN_OR_RETURN(
        const absl::Span<std::byte> bytes,
        ctx.scratch->Get(kDirectContributionsSlot, ctx.size() * size * DTypeSize(result.dtype())));
    const bool own_copied = SameMemory(own, result);
    const int lands_in_result = own_copied || ctx.size() == 1 ? -1 : (ctx.rank() == 0 ? 1 : 0);
    const Contributions contributions(ctx.rank(), own,
                                      BufferView(bytes.data(), ctx.size() * size, result.dtype()),
                                      result, size, own_copied, lands_in_result);
    if (own_copied) {
      LOOM_RETURN_IF_ERROR(Copy(own, contributions.Received(ctx.rank())));
    }
    return contributions;
  }

  // Received returns where rank k's contribution arrives.
  BufferView Received(int k) const {
    return k == lands_in_result_ ? result_ : Slice(blocks_, k * size_, size_);
  }

  // Of returns rank k's contribution.
  ConstBufferView Of(int k) const { return k == rank_ && !own_copied_ ? own_ : Received(k); }

 private:
  Contributions(int rank, ConstBufferView own, BufferView blocks, BufferView result, size_t size,
                bool own_copied, int lands_in_result)
      : rank_(rank),
        own_(own),
        blocks_(blocks),
        result_(result),
        size_(size),
        own_copied_(own_copied),
        lands_in_result_(lands_in_result) {}

  int rank_;
  ConstBufferView own_;
  BufferView blocks_;
  BufferView result_;
  size_t size_;
  bool own_copied_;
  int lands_in_result_;  // The rank whose contribution arrives in result; -1 for none.
};

// FoldInRankOrder sets elements `range` of result to ((x_0 op x_1) op x_2) ... op
// x_{n-1}, x_k = those of contributions.Of(k); only x_0 or x_1 may be `result` itself
// (see Contributions). ReduceTo and ReduceInto apply the kernels exactly as
// RankOrderReduce does, element by element, so the bits are the same whatever the
// ranges.
absl::Status FoldInRankOrder(ReduceOp op, int n, const Contributions& contributions,
                             BlockRange range, BufferView result) {
  const BufferView out = Slice(result, range);
  if (n == 1) return Copy(Slice(contributions.Of(0), range), out);
  LOOM_RETURN_IF_ERROR(
      ReduceTo(op, Slice(contributions.Of(0), range), Slice(contributions.Of(1), range), out));
  for (int k = 2; k < n; ++k) {
    LOOM_RETURN_IF_ERROR(ReduceInto(op, Slice(contributions.Of(k), range), out));
  }
  return absl::OkStatus();
}

// ReduceScatterInRankOrder: every rank sends block Block(input.size(), n, k) of its
// input to rank k and folds the n blocks it receives, in rank order, into `result`
// (the size of its own block).
absl::Status ReduceScatterInRankOrder(const CallContext& ctx, ReduceOp op, ConstBufferView input,
                                      BufferView result) {
  const int n = ctx.size();
  const size_t total = input.size();
  LOOM_ASSIGN_OR_RETURN(
      const Contributions contributions,
      Contributions::Make(ctx, Slice(input, Block(total, n, ctx.rank())), result));
  // Cut by the longest block, as every rank counts it.
  const int chunks = Chunks(ctx, Block(total, n, 0).count, input.dtype());
  return ExchangeInChunks(
      ctx, kReduceScatterStep, chunks, [&](int k) { return Slice(input, Block(total, n, k)); },
      [&](int k) { return contributions.Received(k); },
      [&](int c) {
        return FoldInRankOrder(op, n, contributions, Block(result.size(), chunks, c), result);
      });
}

}  // namespace

absl::Status DirectAllReduce(const CallContext& ctx, const CollectiveArgs& args) {
  LOOM_RETURN_IF_ERROR(CheckArgs(ctx, args, "direct all_reduce", args.count, args.count));
  if (args.count == 0) return absl::OkStatus();
  const int n = ctx.size();
  if (DirectAllReduceInTwoShots(n, args.count * DTypeSize(args.input.dtype()))) {
    // Each rank folds its own block of every input, then hands it to everyone: the
    // same folds, in the same order, as the one-shot path below.
    LOOM_RETURN_IF_ERROR(DirectReduceScatterBlocks(ctx, args.op, args.input, args.output));
    return DirectAllGatherBlocks(ctx, args.output);
  }
  LOOM_ASSIGN_OR_RETURN(const Contributions contributions,
                        Contributions::Make(ctx, args.input, args.output));
  const int chunks = Chunks(ctx, args.count, args.input.dtype());
  return ExchangeInChunks(
      ctx, kAllReduceStep, chunks, [&](int) { return args.input; },
      [&](int k) { return contributions.Received(k); },
      [&](int c) {
        return FoldInRankOrder(args.op, n, contributions, Block(args.count, chunks, c),
                               args.output);
      });
}

absl::Status DirectReduceScatter(const CallContext& ctx, const CollectiveArgs& args) {
  const int n = ctx.size();
  LOOM_RETURN_IF_ERROR(CheckArgs(ctx, args, "direct reduce_scatter", n * args.count, args.count));
  if (args.count == 0) return absl::OkStatus();
  return ReduceScatterInRankOrder(ctx, args.op, args.input, args.output);
}

absl::Status DirectReduceScatterBlocks(const CallContext& ctx, ReduceOp op, ConstBufferView input,
                                       BufferView output) {
  if (input.size() != output.size() || (!input.empty() && input.dtype() != output.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "direct reduce-scatter blocks: input has ", input.size(), " ", DTypeName(input.dtype()),
        ", output ", output.size(), " ", DTypeName(output.dtype())));
  }
  if (input.empty()) return absl::OkStatus();
  return ReduceScatterInRankOrder(ctx, op, input,
                                  Slice(output, Block(output.size(), ctx.size(), ctx.rank())));
}

absl::Status DirectAllGatherBlocks(const CallContext& ctx, BufferView buffer) {
  if (buffer.empty()) return absl::OkStatus();
  const int n = ctx.size();
  const BufferView mine = Slice(buffer, Block(buffer.size(), n, ctx.rank()));
  return ExchangeInChunks(
      ctx, kAllGatherStep, Chunks(ctx, Block(buffer.size(), n, 0).count, buffer.dtype()),
      [&](int) { return mine; }, [&](int k) { return Slice(buffer, Block(buffer.size(), n, k)); },
      [](int) { return absl::OkStatus(); });
}

absl::Status DirectAllGather(const CallContext& ctx, const CollectiveArgs& args) {
  const int n = ctx.size();
  LOOM_RETURN_IF_ERROR(CheckArgs(ctx, args, "direct all_gather", args.count, n * args.count));
  if (args.count == 0) return absl::OkStatus();
  LOOM_RETURN_IF_ERROR(Copy(args.input, Slice(args.output, ctx.rank() * args.count, args.count)));
  return DirectAllGatherBlocks(ctx, args.output);
}

absl::Status DirectBroadcast(const CallContext& ctx, const CollectiveArgs& args) {
  LOOM_RETURN_IF_ERROR(CheckRoot(ctx, args, "direct broadcast"));
  const bool is_root = ctx.rank() == args.root;
  LOOM_RETURN_IF_ERROR(
      CheckArgs(ctx, args, "direct broadcast", is_root ? args.count : kUnchecked, args.count));
  if (args.count == 0) return absl::OkStatus();
  if (is_root) LOOM_RETURN_IF_ERROR(Copy(args.input, args.output));
  return ScatterFromRoot(
      ctx, kBroadcastStep, args.root, [&](int) { return args.input; }, args.output);
}

absl::Status DirectReduce(const CallContext& ctx, const CollectiveArgs& args) {
  LOOM_RETURN_IF_ERROR(CheckRoot(ctx, args, "direct reduce"));
  const bool is_root = ctx.rank() == args.root;
  LOOM_RETURN_IF_ERROR(CheckArgs(ctx, args, "direct reduce", args.count, is_root ? args.count : 0));
  if (args.count == 0) return absl::OkStatus();
  if (!is_root) {
    return GatherToRoot(ctx, kReduceStep, args.root, args.input, [](int) { return BufferView(); });
  }
  LOOM_ASSIGN_OR_RETURN(const Contributions contributions,
                        Contributions::Make(ctx, args.input, args.output));
  LOOM_RETURN_IF_ERROR(GatherToRoot(ctx, kReduceStep, args.root, args.input,
                                    [&](int k) { return contributions.Received(k); }));
  return FoldInRankOrder(args.op, ctx.size(), contributions, BlockRange{0, args.count},
                         args.output);
}

absl::Status DirectGather(const CallContext& ctx, const CollectiveArgs& args) {
  LOOM_RETURN_IF_ERROR(CheckRoot(ctx, args, "direct gather"));
  const bool is_root = ctx.rank() == args.root;
  const size_t count = args.count;
  LOOM_RETURN_IF_ERROR(
      CheckArgs(ctx, args, "direct gather", count, is_root ? ctx.size() * count : kUnchecked));
  if (count == 0) return absl::OkStatus();
  if (is_root) LOOM_RETURN_IF_ERROR(Copy(args.input, Slice(args.output, args.root * count, count)));
  return GatherToRoot(ctx, kGatherStep, args.root, args.input,
                      [&](int k) { return Slice(args.output, k * count, count); });
}

absl::Status DirectScatter(const CallContext& ctx, const CollectiveArgs& args) {
  LOOM_RETURN_IF_ERROR(CheckRoot(ctx, args, "direct scatter"));
  const bool is_root = ctx.rank() == args.root;
  const size_t count = args.count;
  LOOM_RETURN_IF_ERROR(
      CheckArgs(ctx, args, "direct scatter", is_root ? ctx.size() * count : kUnchecked, count));
  if (count == 0) return absl::OkStatus();
  if (is_root) LOOM_RETURN_IF_ERROR(Copy(Slice(args.input, args.root * count, count), args.output));
  return ScatterFromRoot(
      ctx, kScatterStep, args.root, [&](int k) { return Slice(args.input, k * count, count); },
      args.output);
}

absl::Status DirectBarrier(const CallContext& ctx, const CollectiveArgs& args) {
  LOOM_RETURN_IF_ERROR(CheckArgs(ctx, args, "direct barrier", 0, 0));
  return ExchangeInChunks(
      ctx, kBarrierStep, /*chunks=*/1, [](int) { return ConstBufferView(); },
      [](int) { return BufferView(); }, [](int) { return absl::OkStatus(); });
}

}  // namespace collectives_internal
}  // namespace loom
