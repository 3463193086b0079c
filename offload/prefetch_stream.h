// PrefetchStream: an in-order walk over a list of offloaded tensors, `depth` of them
// fetched ahead into host buffers while the caller computes on the current one.
// Depth 1 is classic double buffering: compute on tensor k while k+1 arrives.
//
// The stream owns depth + 1 buffers from a HostMemoryPool, each as large as the
// largest tensor; tensor i always lands in buffer i mod (depth + 1). Next() hands out
// tensor k and, since the caller is then done with k-1, starts fetching k+depth into
// k-1's buffer. A fetch error surfaces at the Next() that needs that tensor, with the
// tensor named; the stream stops there.
//
// Example:
//   std::vector<StreamTensor> tensors = {{"layer0.w", 4 << 20}, {"layer1.w", 4 << 20}};
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<PrefetchStream> stream, PrefetchStream::Create(
//       *engine, *pool, tensors, {.depth = 1},
//       [&](size_t i, absl::Span<std::byte> into, const CancelToken&) {
//         return tier->Read(tensors[i].name, into);
//       }));
//   while (true) {
//     LOOM_ASSIGN_OR_RETURN(std::optional<StreamItem> item,
//                           stream->Next(absl::Now() + absl::Seconds(30)));
//     if (!item.has_value()) break;    // every tensor was handed out
//     Compute(item->index, item->data);  // valid until the next Next()
//   }
#ifndef LOOM_OFFLOAD_PREFETCH_STREAM_H_
#define LOOM_OFFLOAD_PREFETCH_STREAM_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "offload/host_pool.h"
#include "offload/prefetch_engine.h"

namespace loom {

struct StreamTensor {
  std::string name;
  size_t bytes = 0;
};

struct StreamItem {
  size_t index = 0;
  const std::string* name = nullptr;
  absl::Span<std::byte> data;  // Exactly the tensor's bytes.
};

struct PrefetchStreamOptions {
  // Tensors fetched ahead of the one in use: at least 1.
  int depth = 1;
  // How long the destructor waits for fetches still running after it cancelled them.
  absl::Duration drain_timeout = absl::Seconds(10);
};

class PrefetchStream {
 public:
  // Fetch fills `into` (exactly tensors[index].bytes long) with tensor `index`.
  using Fetch =
      std::function<absl::Status(size_t index, absl::Span<std::byte> into, const CancelToken&)>;

  // Create allocates depth + 1 buffers from `pool` (ResourceExhausted naming the
  // depth and sizes when the budget is short) and submits the first depth + 1
  // fetches. InvalidArgument for depth < 1 or a missing fetch function. `engine`
  // and `pool` must outlive the stream.
  static absl::StatusOr<std::unique_ptr<PrefetchStream>> Create(
      PrefetchEngine& engine, HostMemoryPool& pool, std::vector<StreamTensor> tensors,
      const PrefetchStreamOptions& options, Fetch fetch);

  // The destructor cancels the fetches still outstanding and waits for them (up to
  // drain_timeout; a fetch running past that keeps its buffer alive on its own).
  ~PrefetchStream();
  PrefetchStream(const PrefetchStream&) = delete;
  PrefetchStream& operator=(const PrefetchStream&) = delete;

  // Next returns the next tensor in order once fetched, std::nullopt after the last;
  // the previous item's data becomes invalid. The fetch's error (named) if it failed;
  // DeadlineExceeded if `deadline` passes first (the stream can be asked again);
  // FailedPrecondition once a fetch has failed.
  absl::StatusOr<std::optional<StreamItem>> Next(absl::Time deadline);

  size_t size() const { return tensors_.size(); }

 private:
  PrefetchStream(PrefetchEngine& engine, std::vector<StreamTensor> tensors,
                 const PrefetchStreamOptions& options, Fetch fetch);
  absl::Status Submit(size_t index);

  PrefetchEngine& engine_;
  const std::vector<StreamTensor> tensors_;
  const PrefetchStreamOptions options_;
  // Shared with the transfers in flight, so a buffer outlives a stream destroyed
  // while a fetch into it still runs.
  const std::shared_ptr<const Fetch> fetch_;
  std::vector<std::shared_ptr<HostBlock>> buffers_;
  std::vector<PrefetchEngine::Ticket> tickets_;  // Per tensor; 0 when not outstanding.
  size_t next_ = 0;          // The tensor the next Next() returns.
  bool handed_out_ = false;  // Whether next_ - 1 is in the caller's hands.
  absl::Status broken_;
};

}  // namespace loom

#endif  // LOOM_OFFLOAD_PREFETCH_STREAM_H_
