// GlooMpirunHarness (testonly): the gloo transport between the processes of an mpirun
// job, on one host or across hosts. mpirun only starts the processes and MpiHarness
// gathers each rank's result; the bytes under test travel over gloo's TCP pairs,
// from the address of a named network interface, and the ranks meet in a FileStore
// directory on a filesystem every host sees (as a real cluster shares one over NFS).
//
// Example (the test runs as `mpirun -np 4 test`, each host's interface eth0):
//   TransportHarnessFactory gloo = MakeGlooMpirunHarnessFactory("/shared/run", "eth0");
//   std::vector<absl::Status> results = gloo()->Run(4, [](Transport& t) { ... });
//   // t.name() == "gloo" on every rank; results[r] is rank r's status everywhere.
#ifndef LOOM_COLLECTIVES_TRANSPORT_GLOO_GLOO_MPIRUN_HARNESS_H_
#define LOOM_COLLECTIVES_TRANSPORT_GLOO_GLOO_MPIRUN_HARNESS_H_

#include <string>

#include "collectives/transport/gloo/gloo_transport.h"
#include "collectives/transport/transport_harness.h"

namespace loom {

// MakeGlooMpirunHarnessFactory returns harnesses whose groups connect gloo endpoints
// from `interface`'s address (see GlooOptions::interface) and meet in a new directory
// under `store_base` per group (it must exist and be shared by every host). `options`
// gives the rest (rank, size, world rank, store and interface are filled in).
TransportHarnessFactory MakeGlooMpirunHarnessFactory(std::string store_base,
                                                     std::string interface,
                                                     GlooOptions options = {});

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_GLOO_GLOO_MPIRUN_HARNESS_H_
