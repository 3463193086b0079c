// InFlight: a fixed-capacity set of posted requests waited for together, or the
// oldest first, shared by the tree algorithms and halving-doubling's middle exchange.
#ifndef LOOM_COLLECTIVES_INTERNAL_IN_FLIGHT_H_
#define LOOM_COLLECTIVES_INTERNAL_IN_FLIGHT_H_

#include <array>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/internal/call_context.h"

namespace loom {
namespace collectives_internal {

// InFlight holds up to kCapacity posted requests that are waited for together. Its
// destructor waits for whatever is still posted, so that returning early on an
// error never leaves the transport touching a buffer after the call returned
// (transport.h, "Buffers"); the first error is the one returned.
template <int kCapacity>
class InFlight {
 public:
  explicit InFlight(const CallContext& ctx) : ctx_(ctx) {}
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() { (void)Wait(); }

  absl::Status Send(uint32_t step, int peer, ConstBufferView data) {
    return Add(PostSend(ctx_, step, peer, data));
  }
  absl::Status Recv(uint32_t step, int peer, BufferView data) {
    return Add(PostRecv(ctx_, step, peer, data));
  }
  // A receive whose bytes arrive through `delivery` (which must outlive it).
  absl::Status Recv(uint32_t step, int peer, BufferView data, const Delivery& delivery) {
    return Add(PostRecv(ctx_, step, peer, data, delivery));
  }
  // WaitOldest waits for the oldest request not yet waited for (none: OK); it is
  // finished when this returns, even when it fails.
  absl::Status WaitOldest() {
    if (waited_ == size_) return absl::OkStatus();
    ++waited_;
    return WaitAll(ctx_, absl::MakeConstSpan(requests_.data() + waited_ - 1, 1));
  }
  // Wait waits for every request posted since the last Wait and not waited for by
  // WaitOldest; the first error.
  absl::Status Wait() {
    const size_t first = waited_;
    const size_t posted = size_;
    size_ = waited_ = 0;
    return WaitAll(ctx_, absl::MakeConstSpan(requests_.data() + first, posted - first));
  }

 private:
  absl::Status Add(absl::StatusOr<Request> request) {
    if (!request.ok()) return request.status();
    if (size_ == requests_.size()) {
      const Request lone[] = {*request};
      (void)WaitAll(ctx_, lone);
      return absl::InternalError(absl::StrCat("more than ", kCapacity, " requests in flight"));
    }
    requests_[size_++] = *request;
    return absl::OkStatus();
  }

  const CallContext& ctx_;
  std::array<Request, kCapacity> requests_{};
  size_t size_ = 0;
  size_t waited_ = 0;  // requests_[0, waited_) are finished
};

}  // namespace collectives_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_INTERNAL_IN_FLIGHT_H_
