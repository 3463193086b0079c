// NcclEndpoint: the nccl transport's Transport (see nccl_transport.h for the
// contract as NCCL keeps it). Sends and receives are queued when posted; a Wait
// issues every queued one as one NCCL group, sorted by (peer, tag, posting order),
// records the stream's progress, and polls it with the Wait's deadline.
#ifndef LOOM_COLLECTIVES_TRANSPORT_NCCL_INTERNAL_ENDPOINT_H_
#define LOOM_COLLECTIVES_TRANSPORT_NCCL_INTERNAL_ENDPOINT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collectives/transport/native_collectives.h"
#include "collectives/transport/nccl/internal/nccl_comm.h"
#include "collectives/transport/transport.h"

namespace loom {
namespace nccl_internal {

class NcclEndpoint final : public Transport {
 public:
  // `native` runs on `comm` too (it keeps a pointer to it).
  NcclEndpoint(std::unique_ptr<NcclComm> comm, std::unique_ptr<NativeCollectives> native);

  int rank() const override { return comm_->rank(); }
  int size() const override { return comm_->size(); }
  std::string name() const override { return "nccl"; }

  // Stamps are accepted but not compared (transport.h "Stamps"): NCCL's point-to-point
  // carries no header of Loom's, and matching is by posting order per peer.
  absl::StatusOr<Request> PostSend(int peer, Tag tag, absl::Span<const std::byte> data,
                                   const Stamp& stamp) override;
  absl::StatusOr<Request> PostRecv(int peer, Tag tag, absl::Span<std::byte> data,
                                   Combiner combiner, const Stamp& stamp) override;
  absl::Status Wait(absl::Span<const Request> requests, absl::Time deadline) override;
  void Abort(const absl::Status& reason) override;
  // NCCL moves device memory: host buffers are not for it (core/gpu's DeviceBuffer
  // allocates device memory).
  absl::StatusOr<CommBuffer> AllocateBuffer(size_t /*bytes*/) override {
    return absl::UnimplementedError(
        "the nccl transport moves device memory; host buffers from AllocateBuffer are not "
        "for it: allocate device buffers with DeviceBuffer (core/gpu)");
  }
  NativeCollectives* native() override { return native_.get(); }

 private:
  struct Op {
    bool send = false;
    int peer = 0;
    Tag tag = 0;
    std::byte* data = nullptr;
    size_t bytes = 0;
    uint64_t mark = 0;  // the stream mark after its group; 0 while queued
  };

  absl::StatusOr<Request> Post(bool send, int peer, Tag tag, std::byte* data, size_t bytes);
  // IssueQueued issues every queued operation as one group and records a mark.
  absl::Status IssueQueued(absl::Time deadline);
  // Describe names an operation for errors: "receive from rank 1 (tag 7, 64 bytes)".
  std::string Describe(const Op& op) const;

  // Declared first, destroyed last: native_ runs on it.
  std::unique_ptr<NcclComm> comm_;
  std::unique_ptr<NativeCollectives> native_;
  uint64_t next_id_ = 1;
  absl::flat_hash_map<uint64_t, Op> ops_;
  std::vector<uint64_t> queued_;
};

}  // namespace nccl_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_NCCL_INTERNAL_ENDPOINT_H_
