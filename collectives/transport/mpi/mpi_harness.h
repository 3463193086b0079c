// MpiHarness (testonly): runs a TransportHarness body on MPI ranks, for tests started
// under mpirun (mpi_test_main.cc starts them so from `bazel test`). Every process of
// the job calls Run with the same arguments, in the same order; the first `world`
// MPI ranks split off a communicator, connect a transport on it (MPI's, or any other
// whose connect function is given: mpirun then only starts the processes, on one
// host or several, and gathers the results) and run the body; then every process
// gets every rank's status (code and message), so the test's expectations see the
// same results on every process.
//
// Example (the test binary runs as `mpirun -np 4 test`):
//   MpiHarness harness;
//   std::vector<absl::Status> results = harness.Run(3, [](Transport& t) -> absl::Status {
//     ...  // runs on MPI ranks 0, 1 and 2; rank 3 only collects the statuses
//   });
//   // results[r] is rank r's status, on all four processes.
#ifndef LOOM_COLLECTIVES_TRANSPORT_MPI_MPI_HARNESS_H_
#define LOOM_COLLECTIVES_TRANSPORT_MPI_MPI_HARNESS_H_

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "collectives/transport/mpi/mpi_transport.h"
#include "collectives/transport/transport.h"
#include "collectives/transport/transport_harness.h"

namespace loom {

// MpiGroupConnect connects this process's endpoint of a transport among the members
// of `group` (its rank and size are the group's). Every member calls it at once; it
// may use `group` to agree on what the members share (a rendezvous directory).
using MpiGroupConnect =
    std::function<absl::StatusOr<std::unique_ptr<Transport>>(MPI_Comm group)>;

class MpiHarness final : public TransportHarness {
 public:
  // An MPI transport with `options` on each group.
  explicit MpiHarness(MpiTransportOptions options = {});
  // The transport `connect` makes on each group, named `name`; `measures_paths`
  // says whether it measures its paths (Transport::EstimatePath).
  MpiHarness(std::string name, MpiGroupConnect connect, bool measures_paths = false);

  std::string name() const override { return name_; }
  bool measures_paths() const override { return measures_paths_; }
  // Run returns FailedPrecondition for every rank when the job has fewer than
  // `world` processes.
  std::vector<absl::Status> Run(int world,
                                const std::function<absl::Status(Transport&)>& body) override;

 private:
  const std::string name_;
  const MpiGroupConnect connect_;
  const bool measures_paths_;
};

// MakeMpiHarnessFactory returns a TransportHarnessFactory of MpiHarness.
TransportHarnessFactory MakeMpiHarnessFactory(MpiTransportOptions options = {});
TransportHarnessFactory MakeMpiHarnessFactory(std::string name, MpiGroupConnect connect,
                                              bool measures_paths = false);

// MpiWorldSize returns the number of processes of the job (MPI_COMM_WORLD's size).
int MpiWorldSize();

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_MPI_MPI_HARNESS_H_
