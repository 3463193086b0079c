#include "offload/prefetch_stream.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"

namespace loom {

absl::StatusOr<std::unique_ptr<PrefetchStream>> PrefetchStream::Create(
    PrefetchEngine& engine, HostMemoryPool& pool, std::vector<StreamTensor> tensors,
    const PrefetchStreamOptions& options, Fetch fetch) {
  if (options.depth < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prefetch stream: depth ", options.depth, " must be at least 1 (tensors fetched ahead)"));
  }
  if (!fetch) return absl::InvalidArgumentError("prefetch stream: no fetch function given");
  size_t largest = 0;
  for (const StreamTensor& tensor : tensors) largest = std::max(largest, tensor.bytes);
  std::unique_ptr<PrefetchStream> stream(
      new PrefetchStream(engine, std::move(tensors), options, std::move(fetch)));
  // No more buffers than tensors: a short list needs no spare.
  const size_t buffers = std::min(stream->tensors_.size(), static_cast<size_t>(options.depth) + 1);
  for (size_t i = 0; i < buffers && largest > 0; ++i) {
    absl::StatusOr<HostBlock> block = pool.Allocate(largest);
    if (!block.ok()) {
      return absl::Status(block.status().code(),
                          absl::StrCat("prefetch stream: depth ", options.depth, " needs ",
                                       buffers, " buffers of ", largest,
                                       " bytes (the largest tensor); buffer ", i, ": ",
                                       block.status().message()));
    }
    stream->buffers_.push_back(std::make_shared<HostBlock>(*std::move(block)));
  }
  for (size_t i = 0; i < buffers; ++i) LOOM_RETURN_IF_ERROR(stream->Submit(i));
  return stream;
}

PrefetchStream::PrefetchStream(PrefetchEngine& engine, std::vector<StreamTensor> tensors,
                               const PrefetchStreamOptions& options, Fetch fetch)
    : engine_(engine),
      tensors_(std::move(tensors)),
      options_(options),
      fetch_(std::make_shared<const Fetch>(std::move(fetch))),
      tickets_(tensors_.size(), 0) {}

PrefetchStream::~PrefetchStream() {
  const absl::Time deadline = absl::Now() + options_.drain_timeout;
  for (PrefetchEngine::Ticket ticket : tickets_) {
    if (ticket == 0) continue;
    engine_.Cancel(ticket, "the prefetch stream was destroyed").IgnoreError();
    // The result no longer matters; waiting frees the engine's record of it.
    engine_.Wait(ticket, deadline).IgnoreError();
  }
}

absl::Status PrefetchStream::Submit(size_t index) {
  const size_t bytes = tensors_[index].bytes;
  std::shared_ptr<HostBlock> buffer =
      buffers_.empty() ? nullptr : buffers_[index % buffers_.size()];
  LOOM_ASSIGN_OR_RETURN(
      tickets_[index],
      engine_.Submit(tensors_[index].name,
                     [fetch = fetch_, buffer = std::move(buffer), index,
                      bytes](const CancelToken& cancel) -> absl::Status {
                       const absl::Span<std::byte> into =
                           buffer == nullptr ? absl::Span<std::byte>()
                                             : buffer->bytes().subspan(0, bytes);
                       return (*fetch)(index, into, cancel);
                     }));
  return absl::OkStatus();
}

absl::StatusOr<std::optional<StreamItem>> PrefetchStream::Next(absl::Time deadline) {
  if (!broken_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("prefetch stream stopped after an earlier error: ", broken_.message()));
  }
  if (handed_out_) {
    // The caller is done with next_ - 1: its buffer takes the tensor depth + 1 later.
    handed_out_ = false;
    const size_t refill = next_ - 1 + buffers_.size();
    if (refill < tensors_.size()) {
      const absl::Status submitted = Submit(refill);
      if (!submitted.ok()) {
        broken_ = submitted;
        return submitted;
      }
    }
  }
  if (next_ == tensors_.size()) return std::nullopt;
  const absl::Status fetched = engine_.Wait(tickets_[next_], deadline);
  if (absl::IsDeadlineExceeded(fetched) && engine_.Outstanding(tickets_[next_])) {
    return fetched;  // This wait ran out, not the fetch: the caller may ask again.
  }
  tickets_[next_] = 0;
  if (!fetched.ok()) {
    broken_ = fetched;
    return fetched;
  }
  StreamItem item;
  item.index = next_;
  item.name = &tensors_[next_].name;
  if (!buffers_.empty()) {
    item.data = buffers_[next_ % buffers_.size()]->bytes().subspan(0, tensors_[next_].bytes);
  }
  ++next_;
  handed_out_ = true;
  return item;
}

}  // namespace loom
