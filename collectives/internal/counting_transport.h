// CountingTransport: forwards to a Transport and counts the bytes posted to send and
// receive, attributed to the collective the communicator is running. The counters
// are atomics so callers may read them from any thread while the driving thread
// adds to them; only that one thread writes them, so Add is a plain load and store
// rather than a locked read-modify-write on every message.
#ifndef LOOM_COLLECTIVES_INTERNAL_COUNTING_TRANSPORT_H_
#define LOOM_COLLECTIVES_INTERNAL_COUNTING_TRANSPORT_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "collectives/collective_kind.h"
#include "collectives/transport/transport.h"

namespace loom {
namespace collectives_internal {

class CountingTransport final : public Transport {
 public:
  struct Counts {
    std::atomic<uint64_t> calls{0};
    std::atomic<uint64_t> failed_calls{0};
    std::atomic<uint64_t> bytes_sent{0};
    std::atomic<uint64_t> bytes_received{0};
  };
  static constexpr int kKinds = static_cast<int>(CollectiveKind::kSendRecv) + 1;

  // Add adds `n` to a counter of the driving thread.
  static void Add(std::atomic<uint64_t>& counter, uint64_t n) {
    counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }

  explicit CountingTransport(std::shared_ptr<Transport> inner) : inner_(std::move(inner)) {}

  // set_kind names the collective that the next messages belong to.
  void set_kind(CollectiveKind kind) { kind_ = kind; }
  Counts& counts(CollectiveKind kind) { return counts_[static_cast<int>(kind)]; }
  const Counts& counts(CollectiveKind kind) const { return counts_[static_cast<int>(kind)]; }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  absl::StatusOr<Request> Send(int peer, Tag tag, absl::Span<const std::byte> data) override {
    Add(counts(kind_).bytes_sent, data.size());
    return inner_->Send(peer, tag, data);
  }
  absl::StatusOr<Request> Recv(int peer, Tag tag, absl::Span<std::byte> data) override {
    Add(counts(kind_).bytes_received, data.size());
    return inner_->Recv(peer, tag, data);
  }
  absl::Status Wait(absl::Span<const Request> requests, absl::Time deadline) override {
    return inner_->Wait(requests, deadline);
  }
  void Abort(const absl::Status& reason) override { inner_->Abort(reason); }

 private:
  std::shared_ptr<Transport> inner_;
  CollectiveKind kind_ = CollectiveKind::kAllReduce;
  std::array<Counts, kKinds> counts_;
};

}  // namespace collectives_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_INTERNAL_COUNTING_TRANSPORT_H_
