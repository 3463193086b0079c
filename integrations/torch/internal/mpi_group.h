// MPI for the process groups of a PyTorch job started by mpirun: the process's one
// MpiSession (started with the first group that needs it), a Loom MPI transport over
// the processes of one torch group, and MPI_Finalize when Python exits.
//
// torch.distributed creates a group on its member ranks only, so the group's MPI
// communicator is made with MPI_Comm_create_group (collective over the members
// alone), from the members' MPI_COMM_WORLD ranks, which they exchange through the
// group's store.
//
// Example (each member of a group of 4, ranks in group order):
//   LOOM_ASSIGN_OR_RETURN(int mine, StartMpi());            // this MPI_COMM_WORLD rank
//   ... exchange through the store: world_ranks = {0, 1, 2, 3} ...
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> t, ConnectMpiGroup(world_ranks, {}));
//   ... at exit, once every group is gone:
//   FinalizeMpi();
#ifndef LOOM_INTEGRATIONS_TORCH_INTERNAL_MPI_GROUP_H_
#define LOOM_INTEGRATIONS_TORCH_INTERNAL_MPI_GROUP_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/transport/mpi/mpi_transport.h"
#include "collectives/transport/transport.h"

namespace loom {
namespace pytorch_internal {

// StartMpi initializes MPI for this process once (later calls return at once) and
// returns this process's MPI_COMM_WORLD rank. FailedPrecondition unless mpirun
// started the process, or when MPI grants less than MPI_THREAD_MULTIPLE (groups are
// created on the caller's thread while other groups' transports run); MPI's errors
// otherwise.
absl::StatusOr<int> StartMpi();

// ConnectMpiGroup connects this rank's endpoint of the group whose members have the
// MPI_COMM_WORLD ranks `world_ranks`, in group-rank order (this process among them).
// Collective over the members only. Errors as ConnectMpiTransport's, and Internal
// naming the MPI call.
absl::StatusOr<std::unique_ptr<Transport>> ConnectMpiGroup(absl::Span<const int> world_ranks,
                                                           const MpiTransportOptions& options);

// MpiWorldRankFromEnvironment returns this process's MPI_COMM_WORLD rank as mpirun
// announces it (OMPI_COMM_WORLD_RANK, PMIX_RANK), without initializing MPI; -1 when
// mpirun did not start it.
int MpiWorldRankFromEnvironment();

// MpiStarted tells whether StartMpi has initialized MPI in this process.
bool MpiStarted();

// FinalizeMpi finalizes MPI if StartMpi started it; every transport over it must be
// gone. A no-op otherwise and on later calls.
void FinalizeMpi();

// AbortMpiJob ends the whole mpirun job after a fatal error on this rank
// (MpiSession::AbortJob: one line naming the rank and `reason` on stderr, then
// MPI_Abort), rather than finalizing while peers may wait on this rank. Returns
// only when MPI was not started.
void AbortMpiJob(const std::string& reason);

}  // namespace pytorch_internal
}  // namespace loom

#endif  // LOOM_INTEGRATIONS_TORCH_INTERNAL_MPI_GROUP_H_
