// MpiHarness (testonly): runs a TransportHarness body on MPI ranks, for tests started
// under mpirun (mpi_test_main.cc starts them so from `bazel test`). Every process of
// the job calls Run with the same arguments, in the same order; the first `world`
// MPI ranks split off a communicator, connect an MPI transport on it and run the
// body; then every process gets every rank's status (code and message), so the
// test's expectations see the same results on every process.
//
// Example (the test binary runs as `mpirun -np 4 test`):
//   MpiHarness harness;
//   std::vector<absl::Status> results = harness.Run(3, [](Transport& t) -> absl::Status {
//     ...  // runs on MPI ranks 0, 1 and 2; rank 3 only collects the statuses
//   });
//   // results[r] is rank r's status, on all four processes.
#ifndef LOOM_COLLECTIVES_TRANSPORT_MPI_MPI_HARNESS_H_
#define LOOM_COLLECTIVES_TRANSPORT_MPI_MPI_HARNESS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collectives/transport/mpi/mpi_transport.h"
#include "collectives/transport/transport.h"
#include "collectives/transport/transport_harness.h"

namespace loom {

class MpiHarness final : public TransportHarness {
 public:
  explicit MpiHarness(MpiTransportOptions options = {}) : options_(options) {}

  std::string name() const override { return "mpi"; }
  // Run returns FailedPrecondition for every rank when the job has fewer than
  // `world` processes.
  std::vector<absl::Status> Run(int world,
                                const std::function<absl::Status(Transport&)>& body) override;

 private:
  const MpiTransportOptions options_;
};

// MakeMpiHarnessFactory returns a TransportHarnessFactory of MpiHarness.
TransportHarnessFactory MakeMpiHarnessFactory(MpiTransportOptions options = {});

// MpiWorldSize returns the number of processes of the job (MPI_COMM_WORLD's size).
int MpiWorldSize();

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_MPI_MPI_HARNESS_H_
