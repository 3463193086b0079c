// NcclNative: NCCL's own collectives (ncclAllReduce, ncclReduceScatter,
// ncclAllGather, ncclBroadcast, ncclReduce; all-to-all as grouped ncclSend/ncclRecv;
// the barrier as a one-element all-reduce) as the nccl transport's
// NativeCollectives, on the transport's communicator and stream.
//
// Buffers are device memory of the transport's device (NCCL refuses others with
// InvalidArgument). Every call returns once its work has completed on the device.
// NativeCollectives has no deadline: each call waits at most `timeout`
// (NcclTransportOptions::native_timeout; infinite by default, as NCCL itself), after
// which the communicator is aborted and DeadlineExceeded names the call.
#ifndef LOOM_COLLECTIVES_TRANSPORT_NCCL_INTERNAL_NATIVE_H_
#define LOOM_COLLECTIVES_TRANSPORT_NCCL_INTERNAL_NATIVE_H_

#include <nccl.h>

#include <memory>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/transport/native_collectives.h"
#include "collectives/transport/nccl/internal/nccl_comm.h"
#include "core/gpu/device_buffer.h"

namespace loom {
namespace nccl_internal {

class NcclNative final : public NativeCollectives {
 public:
  // Create allocates the barrier's one device word. `comm` must outlive the object.
  static absl::StatusOr<std::unique_ptr<NcclNative>> Create(NcclComm* comm, absl::Duration timeout);

  // name is "NCCL <major>.<minor>.<patch>" of the library loaded.
  std::string name() const override;
  absl::Status AllReduce(const void* input, void* output, size_t count, DType dtype,
                         ReduceOp op) override;
  absl::Status ReduceScatter(const void* input, void* output, size_t count, DType dtype,
                             ReduceOp op) override;
  absl::Status AllGather(const void* input, void* output, size_t count, DType dtype) override;
  absl::Status Broadcast(const void* input, void* output, size_t count, DType dtype,
                         int root) override;
  absl::Status Reduce(const void* input, void* output, size_t count, DType dtype, ReduceOp op,
                      int root) override;
  absl::Status AllToAll(const void* input, void* output, size_t count, DType dtype) override;
  absl::Status Barrier() override;

 private:
  NcclNative(NcclComm* comm, absl::Duration timeout, DeviceBuffer barrier_word)
      : comm_(comm), timeout_(timeout), barrier_word_(std::move(barrier_word)) {}
  // Run issues `group` as one NCCL group (after `before`, plain CUDA work on the
  // stream, and followed by `after`), then waits for it; `what` names the call in a
  // DeadlineExceeded.
  absl::Status Run(absl::string_view what,
                   absl::FunctionRef<absl::Status(ncclComm_t, cudaStream_t)> group,
                   absl::FunctionRef<absl::Status(cudaStream_t)> before,
                   absl::FunctionRef<absl::Status(cudaStream_t)> after);
  absl::Status Run(absl::string_view what,
                   absl::FunctionRef<absl::Status(ncclComm_t, cudaStream_t)> group);

  NcclComm* const comm_;
  const absl::Duration timeout_;
  DeviceBuffer barrier_word_;
};

}  // namespace nccl_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_NCCL_INTERNAL_NATIVE_H_
