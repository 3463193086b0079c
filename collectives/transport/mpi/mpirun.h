// RunUnderMpirun: lets a program started by hand (or by `bazel test`) become an Open
// MPI job of its own, as torchrun does for PyTorch: it runs `mpirun
// --allow-run-as-root --oversubscribe --bind-to none -np N <this binary> <args>`, one
// host, Open MPI's shared-memory BTL, waits for it and returns its exit code.
// Programs check LaunchedByMpirun() (mpi_transport.h) first; a multi-host job is
// started with mpirun by the user.
//
// Whatever Open MPI writes for the job (its session directory, PMIx's files, the
// vader BTL's shared-memory segments) goes into two directories of the job's own,
// $TMPDIR/loom-mpirun-<pid>-XXXXXX (or /tmp/...) and /dev/shm/loom-mpirun-<pid>-XXXXXX,
// which are removed once mpirun has exited, however it ended: by itself, by a
// signal forwarded to it (SIGINT, SIGTERM, SIGHUP, SIGQUIT sent to this process), by
// being killed, or because this process was SIGKILLed. See README.md ("Leftovers").
//
// Example:
//   if (!LaunchedByMpirun()) return RunUnderMpirun(4, argc, argv);  // the job's exit code
//   LOOM_ASSIGN_OR_RETURN(auto session, MpiSession::Start(&argc, &argv));
#ifndef LOOM_COLLECTIVES_TRANSPORT_MPI_MPIRUN_H_
#define LOOM_COLLECTIVES_TRANSPORT_MPI_MPIRUN_H_

namespace loom {

// RunUnderMpirun runs mpirun with `ranks` copies of /proc/self/exe and argv[1..] and
// returns mpirun's exit code (128 + the signal when a signal ended it), or 128 + n
// when this process got signal n (SIGINT, SIGTERM, SIGHUP, SIGQUIT) and passed it on. It forks, so
// call it before the program starts threads (at the top of main). When it cannot
// start the job it prints why (no mpirun: apt-get install openmpi-bin; no temporary
// directory) and returns 2.
// Under AddressSanitizer the ranks get detect_leaks=0, under ThreadSanitizer
// detect_deadlocks=0: both report Open MPI's own internals (see mpirun.cc).
int RunUnderMpirun(int ranks, int argc, char** argv);

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_MPI_MPIRUN_H_
