#include "collectives/transport/nccl/internal/endpoint.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collectives/transport/nccl/internal/nccl_call.h"
#include "core/gpu/cuda_status.h"
#include "core/status_macros.h"

namespace loom {
namespace nccl_internal {
namespace {

// CheckDeviceMemory: NCCL moves device memory; a host pointer would fail deep in
// NCCL (or, for pinned memory, work slowly by accident), so it is refused here.
absl::Status CheckDeviceMemory(const std::byte* data, int device, absl::string_view what) {
  cudaPointerAttributes attributes{};
  const cudaError_t error = cudaPointerGetAttributes(&attributes, data);
  if (error != cudaSuccess) {
    cudaGetLastError();  // Clears the error, so later calls report their own.
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", CudaStatus(error, "cudaPointerGetAttributes(&a, data)").message()));
  }
  const bool on_device =
      attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
  if (on_device && attributes.device == device) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: buffer %p is %s; the nccl transport moves memory of device %d (its own)", what,
      static_cast<const void*>(data),
      on_device ? absl::StrCat("memory of device ", attributes.device) : "host memory", device));
}

}  // namespace

NcclEndpoint::NcclEndpoint(std::unique_ptr<NcclComm> comm,
                           std::unique_ptr<NativeCollectives> native)
    : comm_(std::move(comm)), native_(std::move(native)) {}

std::string NcclEndpoint::Describe(const Op& op) const {
  return absl::StrCat(op.send ? "send to" : "receive from", " rank ", op.peer, " (tag ", op.tag,
                      ", ", op.bytes, " bytes)");
}

absl::StatusOr<Request> NcclEndpoint::PostSend(int peer, Tag tag,
                                               absl::Span<const std::byte> data,
                                               const Stamp& /*stamp*/) {
  // NCCL reads a send buffer only; the Op type keeps one pointer type for both.
  return Post(/*send=*/true, peer, tag, const_cast<std::byte*>(data.data()), data.size());
}

absl::StatusOr<Request> NcclEndpoint::PostRecv(int peer, Tag tag, absl::Span<std::byte> data,
                                               Combiner combiner, const Stamp& /*stamp*/) {
  if (!combiner.copies()) {
    return absl::UnimplementedError(absl::StrCat(
        "nccl rank ", rank(), ": receive from rank ", peer, " (tag ", tag,
        "): combining receives are not supported (a Combiner is a host function and these "
        "buffers are device memory); receive, then reduce on the device"));
  }
  return Post(/*send=*/false, peer, tag, data.data(), data.size());
}

absl::StatusOr<Request> NcclEndpoint::Post(bool send, int peer, Tag tag, std::byte* data,
                                           size_t bytes) {
  if (peer < 0 || peer >= size()) {
    return absl::InvalidArgumentError(absl::StrCat("nccl rank ", rank(), ": ",
                                                   send ? "send to" : "receive from", " peer ",
                                                   peer, " is outside [0, ", size(), ")"));
  }
  LOOM_RETURN_IF_ERROR(comm_->health());
  Op op{send, peer, tag, data, bytes, 0};
  if (bytes > 0) {
    LOOM_RETURN_IF_ERROR(CheckDeviceMemory(data, comm_->device(),
                                           absl::StrCat("nccl rank ", rank(), ": ", Describe(op))));
  }
  const uint64_t id = next_id_++;
  ops_.emplace(id, op);
  queued_.push_back(id);
  return Request{id};
}

absl::Status NcclEndpoint::IssueQueued(absl::Time deadline) {
  // NCCL has no tags: between two ranks, sends and receives match in the order they
  // are issued. Issuing by (peer, tag, posting order) makes both sides agree whenever
  // they issue the same messages in the same Wait, whatever order they posted them in.
  std::vector<uint64_t> order = std::move(queued_);
  queued_.clear();
  std::sort(order.begin(), order.end(), [this](uint64_t a, uint64_t b) {
    const Op& x = ops_.at(a);
    const Op& y = ops_.at(b);
    return std::tie(x.peer, x.tag, a) < std::tie(y.peer, y.tag, b);
  });
  absl::Status issued = comm_->Group(
      [&](ncclComm_t comm, cudaStream_t stream) -> absl::Status {
        for (const uint64_t id : order) {
          const Op& op = ops_.at(id);
          if (op.send) {
            LOOM_NCCL_RETURN_IF_ERROR(ncclSend(op.data, op.bytes, ncclUint8, op.peer, comm, stream),
                                      comm);
          } else {
            LOOM_NCCL_RETURN_IF_ERROR(ncclRecv(op.data, op.bytes, ncclUint8, op.peer, comm, stream),
                                      comm);
          }
        }
        return absl::OkStatus();
      },
      deadline);
  absl::StatusOr<uint64_t> mark = issued.ok() ? comm_->Record() : issued;
  if (!mark.ok()) {
    if (!absl::IsDeadlineExceeded(mark.status())) comm_->Break(mark.status());
    // The group may have reached the stream in part: these operations can no longer be
    // told apart from ones in flight, so they fail as one.
    for (const uint64_t id : order) ops_.at(id).mark = UINT64_MAX;
    return mark.status();
  }
  for (const uint64_t id : order) ops_.at(id).mark = *mark;
  return absl::OkStatus();
}

absl::Status NcclEndpoint::Wait(absl::Span<const Request> requests, absl::Time deadline) {
  std::vector<uint64_t> named;
  named.reserve(requests.size());
  absl::Status status;
  for (const Request& request : requests) {
    if (ops_.contains(request.id)) {
      named.push_back(request.id);
    } else if (status.ok()) {
      status = absl::NotFoundError(absl::StrCat("nccl rank ", rank(), ": request ", request.id,
                                                " is unknown or was already waited for"));
    }
  }
  if (status.ok()) status = comm_->health();
  bool any_queued = false;
  for (const uint64_t id : named) any_queued |= ops_.at(id).mark == 0;
  if (status.ok() && any_queued) status = IssueQueued(deadline);
  uint64_t last = 0;
  for (const uint64_t id : named) last = std::max(last, ops_.at(id).mark);
  if (status.ok() && last > 0) status = comm_->Await(last, deadline);
  if (absl::IsDeadlineExceeded(status) && !named.empty()) {
    // NCCL cannot withdraw work it was given: the communicator is aborted (NCCL stops
    // its kernels) and the endpoint is broken.
    const std::string pending = Describe(ops_.at(named.front()));
    comm_->Break(absl::InternalError(absl::StrCat(
        "nccl rank ", rank(), ": the endpoint is broken: its NCCL communicator was aborted when a ",
        pending, " passed its deadline; connect a new transport")));
    status = absl::DeadlineExceededError(
        absl::StrCat("nccl rank ", rank(), ": ", pending, " still pending at its deadline (",
                     status.message(), "); the NCCL communicator was aborted"));
  }
  for (const uint64_t id : named) ops_.erase(id);
  return status;
}

void NcclEndpoint::Abort(const absl::Status& reason) { comm_->Break(reason); }

}  // namespace nccl_internal
}  // namespace loom
