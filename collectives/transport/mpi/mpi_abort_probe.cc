// A job whose ranks wait on a peer that fails (for mpi_abort_test.sh). Started by
// hand, it becomes a 3-rank mpirun job of itself (RunUnderMpirun). Every rank
// connects the MPI transport and prints "rank R waiting". The rank named by argv[1]
// then waits 5 s for a message from rank 0 that never comes, and ends the job with
// MpiSession::AbortJob on that DeadlineExceeded; the others wait in a receive from
// it with a 60 s deadline. With argv[1] = -1 no rank fails: all wait 60 s, for the
// test to signal the job from outside.
#include <cstdlib>
#include <iostream>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectives/transport/mpi/mpi_transport.h"
#include "collectives/transport/mpi/mpirun.h"
#include "collectives/transport/transport.h"

int main(int argc, char** argv) {
  if (!loom::LaunchedByMpirun()) return loom::RunUnderMpirun(3, argc, argv);
  const int failing = argc > 1 ? std::atoi(argv[1]) : 1;
  auto session = loom::MpiSession::Start(&argc, &argv);
  if (!session.ok()) {
    std::cerr << session.status() << "\n";
    return 2;
  }
  auto transport = loom::ConnectMpiTransport(MPI_COMM_WORLD);
  if (!transport.ok()) (*session)->AbortJob("mpi_abort_probe", transport.status(), 2);
  loom::Transport& t = **transport;
  std::cout << "rank " << t.rank() << " waiting" << std::endl;
  const bool fails = t.rank() == failing;
  const int peer = fails ? 0 : (failing >= 0 ? failing : (t.rank() + 1) % t.size());
  const absl::Duration deadline = fails ? absl::Seconds(5) : absl::Seconds(60);
  std::vector<std::byte> buffer(8);
  absl::StatusOr<loom::Request> receive = t.Recv(peer, 1, absl::MakeSpan(buffer));
  absl::Status status =
      receive.ok() ? t.Wait({*receive}, absl::Now() + deadline) : receive.status();
  if (status.ok()) status = absl::InternalError("a receive that no rank sends to completed");
  (*session)->AbortJob("mpi_abort_probe", status, 2);
}
