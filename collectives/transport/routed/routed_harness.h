// Routed harnesses (testonly): TransportHarnesses whose endpoints are routed
// transports (routed_transport.h), the group's ranks spread over emulated hosts by
// `host_of(rank, world)`:
//   - MakeRoutedInprocHarness: ranks are threads; far is an inproc group of all of
//     them, near one inproc group per host (for the contract suite under TSan);
//   - MakeRoutedShmGlooHarness: ranks are processes (forked, as ShmHarness does);
//     far is gloo over loopback meeting in a fresh directory, near is shm, one job
//     per host: the pair a gloo job with several ranks a host uses.
// Example:
//   auto harness = MakeRoutedShmGlooHarness(BlocksOfTwo, ShmOptions::CopyMode::kStaged);
//   harness->Run(4, body);  // hosts {0,1} and {2,3}; body sees "gloo+shm" endpoints
#ifndef LOOM_COLLECTIVES_TRANSPORT_ROUTED_ROUTED_HARNESS_H_
#define LOOM_COLLECTIVES_TRANSPORT_ROUTED_ROUTED_HARNESS_H_

#include <functional>
#include <memory>
#include <vector>

#include "collectives/transport/shm/shm_transport.h"
#include "collectives/transport/transport_harness.h"

namespace loom {

// Which host a rank of a group of `world` is on.
using HostOf = std::function<int(int rank, int world)>;
// Hosts of two consecutive ranks each: {0,1}, {2,3}, ... (the last may hold one).
int BlocksOfTwo(int rank, int world);
// Two hosts, ranks alternating between them: {0,2,4,...}, {1,3,...}.
int Alternating(int rank, int world);

// The ranks of `host` in a group of `world`, in rank order: its near transport's ranks.
std::vector<int> RanksOnHost(const HostOf& host_of, int host, int world);

TransportHarnessFactory MakeRoutedInprocHarness(HostOf host_of);
TransportHarnessFactory MakeRoutedShmGlooHarness(HostOf host_of, ShmOptions::CopyMode mode);

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_ROUTED_ROUTED_HARNESS_H_
