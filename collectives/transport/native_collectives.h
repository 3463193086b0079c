// NativeCollectives: a transport backend's own collectives (MPI's MPI_Allreduce and
// kin; NCCL's ncclAllReduce and kin on device buffers). A Communicator runs them
// when a call names Algorithm::kNative, so Loom's algorithms and the backend's can
// be compared with one flag (collective_bench --algo=native). Backends that have
// them return them from Transport::native().
//
// Buffers are as the Communicator's collectives take them, and the Communicator has
// already done its part: a dtype here is never f16 or bf16 (it widens those to f32
// and rounds once afterwards) and an op is never kAvg (it sums, then divides).
// `count` is per rank for ReduceScatter, AllGather and AllToAll (the blocks), the
// whole vector otherwise. input == output means in place; ReduceScatter's output may
// also be this rank's block of its input.
//
// Unlike Loom's algorithms, native collectives have no deadline: they wait as long
// as the backend does (MPI: until the peers arrive or the job is killed).
#ifndef LOOM_COLLECTIVES_TRANSPORT_NATIVE_COLLECTIVES_H_
#define LOOM_COLLECTIVES_TRANSPORT_NATIVE_COLLECTIVES_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "core/dtype.h"
#include "core/reduce_op.h"

namespace loom {

class NativeCollectives {
 public:
  virtual ~NativeCollectives() = default;
  // name says whose collectives these are ("MPI (Open MPI v4.1.4)").
  virtual std::string name() const = 0;

  virtual absl::Status AllReduce(const void* input, void* output, size_t count, DType dtype,
                                 ReduceOp op) = 0;
  virtual absl::Status ReduceScatter(const void* input, void* output, size_t count, DType dtype,
                                     ReduceOp op) = 0;
  virtual absl::Status AllGather(const void* input, void* output, size_t count, DType dtype) = 0;
  virtual absl::Status Broadcast(const void* input, void* output, size_t count, DType dtype,
                                 int root) = 0;
  virtual absl::Status Reduce(const void* input, void* output, size_t count, DType dtype,
                              ReduceOp op, int root) = 0;
  virtual absl::Status AllToAll(const void* input, void* output, size_t count, DType dtype) = 0;
  virtual absl::Status Barrier() = 0;
};

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_NATIVE_COLLECTIVES_H_
