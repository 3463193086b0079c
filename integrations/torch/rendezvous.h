// ConnectGroup: the ranks of one PyTorch process group meet through the group's
// store and connect a Loom Communicator over the transports their layout calls for
// (group_layout.h): Loom's shm transport on one host; across hosts, Loom's gloo
// transport (TCP) between hosts with shm inside each. torch.distributed calls the
// backend's creator once per group (the world, then every new_group, on member ranks
// only) with a PrefixStore of the group's name, so each group connects afresh: its
// own shm segments, its own TCP pairs, its own communicator.
//
// What travels through the store, under "loom/<round>/" (round: how many times this
// group's prefix was connected before, from a shared counter, so a store reused by
// a later group of the same name never serves stale keys):
//   rank/<r>  rank r's identity: host id, hostname, pid;
//   job       a job id made by rank 0, unique on its host: the shm segments are
//             /dev/shm/loom.<job>.* (and loom.<job>.n<host>.* for two levels), unlinked
//             as soon as every rank has mapped them;
//   gloo/...  gloo's own rendezvous keys, for two levels.
//
// Example (each rank of a group of 4; `store` adapts the c10d::Store torch gave):
//   GroupSpec spec;
//   spec.rank = rank;
//   spec.size = 4;
//   spec.timeout = absl::Minutes(30);
//   LOOM_ASSIGN_OR_RETURN(GroupConnection group, ConnectGroup(store, spec, BackendOptions{}));
//   group.layout.Describe();  // "shm among 4 ranks on one host"
//   LOOM_RETURN_IF_ERROR(group.communicator->Barrier());
#ifndef LOOM_INTEGRATIONS_TORCH_RENDEZVOUS_H_
#define LOOM_INTEGRATIONS_TORCH_RENDEZVOUS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/communicator.h"
#include "collectives/transport/transport.h"
#include "integrations/torch/backend_options.h"
#include "integrations/torch/group_layout.h"
#include "integrations/torch/rendezvous_store.h"

namespace loom {
namespace pytorch {

struct GroupSpec {
  // This rank in the group, and the group's size.
  int rank = 0;
  int size = 1;
  // This process's rank in the default (world) group; errors name peers by their
  // world rank. -1: `rank`.
  int world_rank = -1;
  // The group's name (torch's group id: "0" for the world, "1", ... for new_group),
  // for messages.
  std::string name;
  // Deadline of the rendezvous and default timeout of every call.
  absl::Duration timeout = absl::Minutes(30);
  // Processes sharing this host's CPUs, when more than the group's own ranks on it
  // (the world's, for a subgroup); 0: the group's ranks on this host. Each counts as
  // two busy threads (its progress thread and its computing thread), and shm's waits
  // yield the CPU rather than spin where those outnumber the CPUs.
  int host_ranks = 0;
};

struct GroupConnection {
  // What the communicator runs over (the inter-host one for two levels); point-to-
  // point calls use it directly, with tags of their own (ReserveTags).
  std::shared_ptr<Transport> transport;
  std::unique_ptr<Communicator> communicator;
  GroupLayout layout;
  // Where the communicator's cost model came from, when not the formulas: "cost
  // model from FILE", or AutoCalibration::ToString() ("cost model measured on 2
  // hosts ...", "cost model from cache ...").
  std::string cost_model_source;
};

// ConnectGroup connects rank spec.rank's communicator. Errors name the group, the
// rank and the step: the store's (DeadlineExceeded naming the key and the ranks
// still missing when some never arrive), the layout's, or the transport's
// (ConnectShmTransport, ConnectGlooTransport). A failed shm connect removes the
// job's segments.
absl::StatusOr<GroupConnection> ConnectGroup(RendezvousStore& store, const GroupSpec& spec,
                                             const BackendOptions& options);

// DefaultHostId returns this machine's hostname and boot id, "host:boot-id": equal
// for processes that share a kernel and a UTS namespace (so, as a rule, /dev/shm).
std::string DefaultHostId();

}  // namespace pytorch
}  // namespace loom

#endif  // LOOM_INTEGRATIONS_TORCH_RENDEZVOUS_H_
