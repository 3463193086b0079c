#include "collectives/transport/nccl/internal/native.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/transport/nccl/internal/nccl_call.h"
#include "collectives/transport/nccl/internal/nccl_types.h"
#include "core/gpu/cuda_status.h"
#include "core/status_macros.h"

namespace loom {
namespace nccl_internal {
namespace {

absl::Status NoStreamWork(cudaStream_t) { return absl::OkStatus(); }

absl::Status CopyOnStream(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
  return absl::OkStatus();
}

std::string Call(absl::string_view nccl_call, size_t count, DType dtype) {
  return absl::StrCat(nccl_call, " of ", count, " ", DTypeName(dtype), " elements");
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclNative>> NcclNative::Create(NcclComm* comm,
                                                               absl::Duration timeout) {
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer word, DeviceBuffer::Allocate(MemorySpace::kDevice,
                                                                  sizeof(int32_t), comm->device()));
  return std::unique_ptr<NcclNative>(new NcclNative(comm, timeout, std::move(word)));
}

std::string NcclNative::name() const {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return "NCCL";
  // NCCL_VERSION_CODE since 2.9: major * 10000 + minor * 100 + patch.
  return absl::StrCat("NCCL ", version / 10000, ".", version / 100 % 100, ".", version % 100);
}

absl::Status NcclNative::Run(absl::string_view what,
                             absl::FunctionRef<absl::Status(ncclComm_t, cudaStream_t)> group) {
  return Run(what, group, NoStreamWork, NoStreamWork);
}

absl::Status NcclNative::Run(absl::string_view what,
                             absl::FunctionRef<absl::Status(ncclComm_t, cudaStream_t)> group,
                             absl::FunctionRef<absl::Status(cudaStream_t)> before,
                             absl::FunctionRef<absl::Status(cudaStream_t)> after) {
  const absl::Time deadline = absl::Now() + timeout_;  // InfiniteFuture for an infinite timeout
  absl::Status status = comm_->OnStream(before);
  if (status.ok()) status = comm_->Group(group, deadline);
  if (status.ok()) status = comm_->OnStream(after);
  // (A StatusOr made from an OK Status is a fatal error, not an empty one.)
  absl::StatusOr<uint64_t> mark =
      status.ok() ? comm_->Record() : absl::StatusOr<uint64_t>(status);
  status = mark.ok() ? comm_->Await(*mark, deadline) : mark.status();
  if (absl::IsDeadlineExceeded(status)) {
    comm_->Break(absl::InternalError(absl::StrCat(
        "nccl rank ", comm_->rank(), ": the endpoint is broken: its NCCL communicator ",
        "was aborted when the native ", what, " passed native_timeout")));
    return absl::DeadlineExceededError(
        absl::StrCat("nccl rank ", comm_->rank(), ": native ", what,
                     " not finished within native_timeout ", absl::FormatDuration(timeout_), " (",
                     status.message(), "); the NCCL communicator was aborted"));
  }
  return status;
}

absl::Status NcclNative::AllReduce(const void* input, void* output, size_t count, DType dtype,
                                   ReduceOp op) {
  LOOM_ASSIGN_OR_RETURN(const ncclDataType_t type, NcclDataType(dtype));
  LOOM_ASSIGN_OR_RETURN(const ncclRedOp_t nccl_op, NcclRedOp(op));
  return Run(Call("ncclAllReduce", count, dtype), [&](ncclComm_t comm, cudaStream_t stream) {
    LOOM_NCCL_RETURN_IF_ERROR(ncclAllReduce(input, output, count, type, nccl_op, comm, stream),
                              comm);
    return absl::OkStatus();
  });
}

absl::Status NcclNative::ReduceScatter(const void* input, void* output, size_t count, DType dtype,
                                       ReduceOp op) {
  LOOM_ASSIGN_OR_RETURN(const ncclDataType_t type, NcclDataType(dtype));
  LOOM_ASSIGN_OR_RETURN(const ncclRedOp_t nccl_op, NcclRedOp(op));
  const size_t bytes = count * DTypeSize(dtype);
  const auto* in = static_cast<const std::byte*>(input);
  auto* out = static_cast<std::byte*>(output);
  // NCCL's in place is Loom's other form (the output is this rank's block of the
  // input); for input == output the result is moved to the front afterwards.
  const bool front = out == in && comm_->rank() != 0 && bytes > 0;
  std::byte* const result = front ? out + comm_->rank() * bytes : out;
  return Run(
      Call("ncclReduceScatter", count, dtype),
      [&](ncclComm_t comm, cudaStream_t stream) {
        LOOM_NCCL_RETURN_IF_ERROR(
            ncclReduceScatter(input, result, count, type, nccl_op, comm, stream), comm);
        return absl::OkStatus();
      },
      NoStreamWork,
      [&](cudaStream_t stream) {
        return front ? CopyOnStream(out, result, bytes, stream) : absl::OkStatus();
      });
}

absl::Status NcclNative::AllGather(const void* input, void* output, size_t count, DType dtype) {
  LOOM_ASSIGN_OR_RETURN(const ncclDataType_t type, NcclDataType(dtype));
  const size_t bytes = count * DTypeSize(dtype);
  auto* out = static_cast<std::byte*>(output);
  std::byte* const mine = out + comm_->rank() * bytes;
  // input == output (this rank's block at the front) would be overwritten by rank 0's
  // block while NCCL reads it: it is first moved to its place, NCCL's in place form.
  const bool front = input == output && comm_->rank() != 0 && bytes > 0;
  const void* const send = front ? mine : input;
  return Run(
      Call("ncclAllGather", count, dtype),
      [&](ncclComm_t comm, cudaStream_t stream) {
        LOOM_NCCL_RETURN_IF_ERROR(ncclAllGather(send, output, count, type, comm, stream), comm);
        return absl::OkStatus();
      },
      [&](cudaStream_t stream) {
        return front ? CopyOnStream(mine, input, bytes, stream) : absl::OkStatus();
      },
      NoStreamWork);
}

absl::Status NcclNative::Broadcast(const void* input, void* output, size_t count, DType dtype,
                                   int root) {
  LOOM_ASSIGN_OR_RETURN(const ncclDataType_t type, NcclDataType(dtype));
  if (root < 0 || root >= comm_->size()) {
    return absl::InvalidArgumentError(absl::StrCat("nccl native ncclBroadcast: root ", root,
                                                   " is outside [0, ", comm_->size(), ")"));
  }
  return Run(Call("ncclBroadcast", count, dtype), [&](ncclComm_t comm, cudaStream_t stream) {
    LOOM_NCCL_RETURN_IF_ERROR(ncclBroadcast(input, output, count, type, root, comm, stream), comm);
    return absl::OkStatus();
  });
}

absl::Status NcclNative::Reduce(const void* input, void* output, size_t count, DType dtype,
                                ReduceOp op, int root) {
  LOOM_ASSIGN_OR_RETURN(const ncclDataType_t type, NcclDataType(dtype));
  LOOM_ASSIGN_OR_RETURN(const ncclRedOp_t nccl_op, NcclRedOp(op));
  if (root < 0 || root >= comm_->size()) {
    return absl::InvalidArgumentError(absl::StrCat("nccl native ncclReduce: root ", root,
                                                   " is outside [0, ", comm_->size(), ")"));
  }
  return Run(Call("ncclReduce", count, dtype), [&](ncclComm_t comm, cudaStream_t stream) {
    LOOM_NCCL_RETURN_IF_ERROR(ncclReduce(input, output, count, type, nccl_op, root, comm, stream),
                              comm);
    return absl::OkStatus();
  });
}

absl::Status NcclNative::AllToAll(const void* input, void* output, size_t count, DType dtype) {
  const size_t bytes = count * DTypeSize(dtype);
  const int size = comm_->size();
  auto* out = static_cast<std::byte*>(output);
  // In place, the blocks to send would be overwritten by the ones arriving: they are
  // sent from a copy (allocated per call; in-place all-to-all is the rare form).
  DeviceBuffer copy;
  const bool in_place = input == output && bytes > 0;
  if (in_place) {
    LOOM_ASSIGN_OR_RETURN(
        copy, DeviceBuffer::Allocate(MemorySpace::kDevice, bytes * size, comm_->device()));
  }
  const std::byte* const send = in_place ? copy.data() : static_cast<const std::byte*>(input);
  return Run(
      Call("all-to-all (grouped ncclSend/ncclRecv)", count, dtype),
      [&](ncclComm_t comm, cudaStream_t stream) {
        for (int peer = 0; peer < size; ++peer) {
          LOOM_NCCL_RETURN_IF_ERROR(
              ncclSend(send + peer * bytes, bytes, ncclUint8, peer, comm, stream), comm);
          LOOM_NCCL_RETURN_IF_ERROR(
              ncclRecv(out + peer * bytes, bytes, ncclUint8, peer, comm, stream), comm);
        }
        return absl::OkStatus();
      },
      [&](cudaStream_t stream) {
        return in_place ? CopyOnStream(copy.data(), input, bytes * size, stream) : absl::OkStatus();
      },
      NoStreamWork);
}

absl::Status NcclNative::Barrier() {
  void* const word = barrier_word_.data();
  return Run("barrier (ncclAllReduce of one i32)", [&](ncclComm_t comm, cudaStream_t stream) {
    LOOM_NCCL_RETURN_IF_ERROR(ncclAllReduce(word, word, 1, ncclInt32, ncclSum, comm, stream), comm);
    return absl::OkStatus();
  });
}

}  // namespace nccl_internal
}  // namespace loom
