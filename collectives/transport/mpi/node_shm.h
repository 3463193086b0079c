// Node shm: Loom's shared-memory transport among the ranks of an MPI job that share a
// host, for the two-level layout: the Communicator runs over MPI (between hosts) and
// hands the hierarchical algorithm this endpoint for its intra-node phases
// (CommunicatorOptions::node_transport), so bytes inside a host move through Loom's
// shm transport (CMA single copy, eager cells) rather than through MPI.
//
// Example (every rank of an mpirun job):
//   LOOM_ASSIGN_OR_RETURN(int k, MpiRanksPerNode(MPI_COMM_WORLD));
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> world, ConnectMpiTransport(MPI_COMM_WORLD));
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> node,
//                         ConnectNodeShmTransport(MPI_COMM_WORLD, k));
//   CommunicatorOptions options;
//   options.ranks_per_node = k;
//   options.node_transport = std::move(node);   // rank % k of k, name() "shm"
//   LOOM_ASSIGN_OR_RETURN(auto comm, Communicator::Create(std::move(world), options));
#ifndef LOOM_COLLECTIVES_TRANSPORT_MPI_NODE_SHM_H_
#define LOOM_COLLECTIVES_TRANSPORT_MPI_NODE_SHM_H_

#include <mpi.h>

#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/transport/shm/shm_transport.h"
#include "collectives/transport/transport.h"

namespace loom {

// ConnectNodeShmTransport connects this rank's shm endpoint among the ranks of its
// node of `comm`: node i holds the ranks i*k .. i*k+k-1 (k = ranks_per_node, as
// MpiRanksPerNode finds or emulates it), and this rank is rank % k there. Collective
// over `comm`. `shm` supplies the shm options other than job_id, rank and size
// (the job id is made by rank 0 of `comm` and broadcast, one per node).
// InvalidArgument when k does not divide the size; ConnectShmTransport's errors
// otherwise (a node whose ranks are not on one host fails to connect at its timeout).
absl::StatusOr<std::unique_ptr<Transport>> ConnectNodeShmTransport(MPI_Comm comm,
                                                                   int ranks_per_node,
                                                                   ShmOptions shm = {});

// The same for nodes in any order (MpiNodeOfRank's, CommunicatorOptions::node_of_rank):
// node `node_of_rank[r]` holds rank r, and this rank is its place among its node's
// ranks in rank order, as the Communicator numbers it. InvalidArgument when
// node_of_rank does not have a node for every rank of `comm`.
absl::StatusOr<std::unique_ptr<Transport>> ConnectNodeShmTransport(
    MPI_Comm comm, absl::Span<const int> node_of_rank, ShmOptions shm = {});

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_MPI_NODE_SHM_H_
