// Native: Algorithm::kNative, the collectives of the transport itself (MPI's own
// MPI_Allreduce, ...; see transport/native_collectives.h), run through a
// Communicator so that Loom's algorithms and the backend's are compared in one run
// with one flag. The selector (--algo=auto) chooses it where a native curve measured
// by Calibrate predicts it faster and the communicator is not deterministic.
//
// Example (every rank of an MPI group):
//   CallOptions call;
//   call.algorithm = Algorithm::kNative;
//   LOOM_RETURN_IF_ERROR(comm->AllReduce(input, output, ReduceOp::kSum, call));  // MPI_Allreduce
#ifndef LOOM_COLLECTIVES_NATIVE_H_
#define LOOM_COLLECTIVES_NATIVE_H_

#include "absl/status/statusor.h"
#include "collectives/collective_kind.h"
#include "collectives/internal/call_context.h"

namespace loom {

using NativeFn = absl::Status (*)(const collectives_internal::CallContext&,
                                  const collectives_internal::CollectiveArgs&);

// FindNative returns the native implementation of `kind` (all_reduce,
// reduce_scatter, all_gather, broadcast, reduce, all_to_all, barrier); InvalidArgument
// for the others. The function fails with FailedPrecondition when the call's
// transport has no native collectives (inproc, shm, a split communicator's group).
absl::StatusOr<NativeFn> FindNative(CollectiveKind kind);

}  // namespace loom

#endif  // LOOM_COLLECTIVES_NATIVE_H_
