#include "collectives/internal/call_context.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
#include "collectives/reduce/reduce_kernels.h"
#include "core/dtype.h"
#include "core/status_macros.h"

namespace loom {
namespace collectives_internal {

absl::StatusOr<absl::Span<std::byte>> Scratch::Grow(int slot, size_t bytes) {
  if (slot < 0) return absl::InvalidArgumentError(absl::StrCat("scratch slot ", slot));
  if (static_cast<size_t>(slot) >= slots_.size()) slots_.resize(slot + 1);
  CommBuffer& buffer = slots_[slot];
  if (buffer.size() < bytes) {
    // Grow geometrically: calls of slowly growing sizes do not reallocate each time.
    const size_t grown = std::max(bytes, buffer.size() + buffer.size() / 2);
    absl::StatusOr<CommBuffer> bigger = allocator_ != nullptr
                                            ? allocator_->AllocateBuffer(grown)
                                            : CommBuffer::Ordinary(grown);
    if (absl::IsUnimplemented(bigger.status())) bigger = CommBuffer::Ordinary(grown);
    if (!bigger.ok()) return bigger.status();
    // The old contents up to the old size, as Get promises.
    if (!buffer.empty()) std::memcpy(bigger->data(), buffer.data(), buffer.size());
    buffer = std::move(*bigger);
  }
  return buffer.bytes().subspan(0, bytes);
}

int NumChunks(const CallContext& ctx, size_t count, DType dtype) {
  const size_t bytes = count * DTypeSize(dtype);
  const size_t chunk = std::max<size_t>(ctx.chunk_bytes, 1);
  const size_t chunks = (bytes + chunk - 1) / chunk;
  return static_cast<int>(std::clamp<size_t>(chunks, 1, std::max<size_t>(count, 1)));
}

namespace {

// WindowFor: chunks of `chunk_bytes` enough for twice `path`'s bandwidth-delay
// product and one more, at least `least`, at most kMaxChunksInFlight.
int WindowFor(const PathEstimate& path, size_t chunk_bytes, int least) {
  const size_t path_bytes = path.BytesInFlight();
  const size_t chunk = std::max<size_t>(chunk_bytes, 1);
  const size_t wanted = std::min<size_t>((2 * path_bytes + chunk - 1) / chunk + 1,
                                         static_cast<size_t>(kMaxChunksInFlight));
  return std::clamp(static_cast<int>(wanted), std::min(least, kMaxChunksInFlight),
                    kMaxChunksInFlight);
}

}  // namespace

int ChunksInFlight(const CallContext& ctx, size_t chunk_bytes, std::initializer_list<int> peers,
                   int least) {
  // The longest round trip and the fastest rate over the peers: a rank of a ring
  // only receives from its left and only sends to its right, so one peer may have
  // a rate measured and the other a round trip; the paths are taken to be alike.
  PathEstimate path;
  for (const int peer : peers) {
    const PathEstimate estimate = ctx.transport->EstimatePath(peer);
    path.round_trip = std::max(path.round_trip, estimate.round_trip);
    path.bytes_per_second = std::max(path.bytes_per_second, estimate.bytes_per_second);
  }
  return WindowFor(path, chunk_bytes, least);
}

int SendWindow(const CallContext& ctx, size_t chunk_bytes, int peer, int chunks) {
  const PathEstimate path = ctx.transport->EstimatePath(peer);
  const bool measured = path.round_trip > absl::ZeroDuration() || path.bytes_per_second > 0;
  if (!measured) return chunks;
  return std::min(chunks, ChunksInFlight(ctx, chunk_bytes, {peer}, /*least=*/2));
}

int AgreedChunksInFlight(const CallContext& ctx, size_t chunk_bytes, int least) {
  return WindowFor(ctx.agreed_path, chunk_bytes, least);
}

int AgreedWindow(const CallContext& ctx, size_t count, DType dtype) {
  const int chunks = NumChunks(ctx, count, dtype);
  const size_t chunk_bytes = Block(count, chunks, 0).count * DTypeSize(dtype);
  return std::min(AgreedChunksInFlight(ctx, chunk_bytes, /*least=*/2), std::max(chunks, 2));
}

absl::StatusOr<Request> PostSend(const CallContext& ctx, uint32_t step, int peer,
                                 ConstBufferView data) {
  const absl::Span<const std::byte> bytes = data.bytes();
  if (ctx.counters != nullptr) CallCounters::Add(ctx.counters->bytes_sent, bytes.size());
  return ctx.transport->PostSend(peer, ctx.StepTag(step), bytes, ctx.stamp);
}

absl::StatusOr<Request> PostRecv(const CallContext& ctx, uint32_t step, int peer,
                                 BufferView data) {
  const absl::Span<std::byte> bytes = data.bytes();
  if (ctx.counters != nullptr) CallCounters::Add(ctx.counters->bytes_received, bytes.size());
  return ctx.transport->PostRecv(peer, ctx.StepTag(step), bytes, Combiner{}, ctx.stamp);
}

absl::StatusOr<Request> PostRecv(const CallContext& ctx, uint32_t step, int peer, BufferView data,
                                 const Delivery& delivery) {
  const absl::Span<std::byte> bytes = data.bytes();
  if (ctx.counters != nullptr) CallCounters::Add(ctx.counters->bytes_received, bytes.size());
  Combiner combiner = delivery.AsCombiner();
  // A reduction may read the message where it landed in `data`, unless its own
  // operand is `data` too (in place), which the landing would overwrite.
  const ConstBufferView mine = delivery.mine;
  const std::byte* begin = data.data();
  combiner.lands_in_place =
      mine.empty() || data.empty() || mine.data() + mine.size_bytes() <= begin ||
      begin + data.size_bytes() <= mine.data();
  return ctx.transport->PostRecv(peer, ctx.StepTag(step), bytes, combiner, ctx.stamp);
}

void Delivery::Apply(const void* state, std::byte* dst, const std::byte* src, size_t offset,
                     size_t bytes) {
  // Only kReduce gets here: a copy is the transport's own (AsCombiner).
  const Delivery& delivery = *static_cast<const Delivery*>(state);
  const DType dtype = delivery.mine.dtype();
  const size_t element = DTypeSize(dtype);
  const size_t count = bytes / element;
  const size_t first = offset / element;
  if (bytes % element != 0 || offset % element != 0 || first + count > delivery.mine.size()) {
    delivery.failure = absl::InternalError(
        absl::StrCat("delivery of ", bytes, " bytes at ", offset, " into ",
                     delivery.mine.size(), " ", DTypeName(dtype), " elements"));
    return;
  }
  absl::Status reduced = ReduceTo(delivery.op, Slice(delivery.mine, first, count),
                                  ConstBufferView(src, count, dtype), BufferView(dst, count, dtype));
  if (!reduced.ok() && delivery.failure.ok()) delivery.failure = std::move(reduced);
}

absl::Status WaitAll(const CallContext& ctx, absl::Span<const Request> requests) {
  if (requests.empty()) return absl::OkStatus();
  return ctx.transport->Wait(requests, ctx.deadline);
}

absl::Status Exchange(const CallContext& ctx, uint32_t step, int send_peer, ConstBufferView send,
                      int recv_peer, BufferView recv) {
  for (int peer : {send_peer, recv_peer}) {
    if (peer < 0 || peer >= ctx.size()) {
      return absl::InternalError(absl::StrCat("exchange with rank ", peer, " of ", ctx.size()));
    }
  }
  LOOM_ASSIGN_OR_RETURN(const Request r, PostRecv(ctx, step, recv_peer, recv));
  absl::StatusOr<Request> s = PostSend(ctx, step, send_peer, send);
  if (!s.ok()) {
    // With valid peers a post fails only on an aborted endpoint, whose posted
    // receive then fails at once; finish it so nothing writes `recv` after return.
    (void)ctx.transport->Wait({r}, ctx.deadline);
    return s.status();
  }
  const Request both[] = {r, *s};
  return WaitAll(ctx, both);
}

namespace {

// Out of line and cold: building the message would weigh on every Copy.
ABSL_ATTRIBUTE_NOINLINE ABSL_ATTRIBUTE_COLD absl::Status CopyError(ConstBufferView src,
                                                                  BufferView dst) {
  return absl::InternalError(absl::StrCat("copy of ", src.size(), " ", DTypeName(src.dtype()),
                                          " into ", dst.size(), " ", DTypeName(dst.dtype())));
}

}  // namespace

absl::Status Copy(ConstBufferView src, BufferView dst) {
  if (src.dtype() != dst.dtype() || src.size() != dst.size()) return CopyError(src, dst);
  if (src.data() != dst.data() && src.size_bytes() > 0) {
    std::memcpy(dst.data(), src.data(), src.size_bytes());
  }
  return absl::OkStatus();
}

}  // namespace collectives_internal
}  // namespace loom
