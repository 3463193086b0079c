// A rank that dies mid all-reduce, under mpirun (for mpi_dead_rank_test.sh): every
// rank loops over 1 MiB all-reduces on the MPI transport; rank 1 SIGKILLs itself
// from a thread after 300 ms, at an arbitrary point inside one. What the test checks
// is what a user sees: mpirun notices, names the rank and the signal, ends the
// survivors and exits non-zero, within seconds.
#include <signal.h>
#include <unistd.h>

#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "collectives/communicator.h"
#include "collectives/transport/mpi/mpi_transport.h"

int main(int argc, char** argv) {
  auto session = loom::MpiSession::Start(&argc, &argv);
  if (!session.ok()) {
    std::cerr << session.status() << "\n";
    return 2;
  }
  auto transport = loom::ConnectMpiTransport(MPI_COMM_WORLD);
  if (!transport.ok()) {
    std::cerr << transport.status() << "\n";
    return 2;
  }
  loom::CommunicatorOptions options;
  options.timeout = absl::Seconds(20);
  auto comm = loom::Communicator::Create(std::move(*transport), options);
  if (!comm.ok()) {
    std::cerr << comm.status() << "\n";
    return 2;
  }
  if ((*comm)->rank() == 1) {
    std::thread([] {
      absl::SleepFor(absl::Milliseconds(300));
      kill(getpid(), SIGKILL);
    }).detach();
  }
  std::vector<float> data(1 << 18, 1.0f);
  for (;;) {
    const absl::Status status = (*comm)->AllReduce(absl::MakeSpan(data), loom::ReduceOp::kMax);
    if (!status.ok()) {
      std::cerr << "rank " << (*comm)->rank() << ": " << status << "\n";
      return 1;
    }
  }
}
