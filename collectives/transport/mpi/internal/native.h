// MpiNative: MPI's own collectives (MPI_Allreduce, MPI_Reduce_scatter_block, ...) as
// the MPI transport's NativeCollectives, on a communicator of their own, so they
// never meet the transport's point-to-point messages. MPI calls are made under
// MpiLock, and they block: while one runs, no other Loom MPI endpoint of the process
// moves.
#ifndef LOOM_COLLECTIVES_TRANSPORT_MPI_INTERNAL_NATIVE_H_
#define LOOM_COLLECTIVES_TRANSPORT_MPI_INTERNAL_NATIVE_H_

#include <mpi.h>

#include <string>

#include "collectives/transport/native_collectives.h"

namespace loom {
namespace mpi_internal {

class MpiNative final : public NativeCollectives {
 public:
  // `comm` is a duplicate the object keeps (see Endpoint's destructor for why it is
  // never freed).
  explicit MpiNative(MPI_Comm comm);

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
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace mpi_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_MPI_INTERNAL_NATIVE_H_
