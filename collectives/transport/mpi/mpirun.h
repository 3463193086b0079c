// ExecUnderMpirun: lets a program started by hand (or by `bazel test`) become an
// Open MPI job of its own, as torchrun does for PyTorch: it replaces the process with
// `mpirun --allow-run-as-root --oversubscribe --bind-to none -np N <this binary>
// <args>`, one host, Open MPI's shared-memory BTL. Programs check LaunchedByMpirun()
// (mpi_transport.h) first; a multi-host job is started with mpirun by the user.
//
// Example:
//   if (!LaunchedByMpirun()) return ExecUnderMpirun(4, argc, argv);  // returns only on failure
//   LOOM_ASSIGN_OR_RETURN(auto session, MpiSession::Start(&argc, &argv));
#ifndef LOOM_COLLECTIVES_TRANSPORT_MPI_MPIRUN_H_
#define LOOM_COLLECTIVES_TRANSPORT_MPI_MPIRUN_H_

namespace loom {

// ExecUnderMpirun execs mpirun with `ranks` copies of /proc/self/exe and argv[1..];
// on failure it prints why (no mpirun: apt-get install openmpi-bin) and returns 2.
// Under AddressSanitizer the ranks get detect_leaks=0, under ThreadSanitizer
// detect_deadlocks=0: both report Open MPI's own internals (see mpirun.cc).
int ExecUnderMpirun(int ranks, int argc, char** argv);

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_MPI_MPIRUN_H_
