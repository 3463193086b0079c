// MPI transport: the Transport interface of transport.h over MPI point-to-point
// (Open MPI 4.1 from Debian), so every Loom algorithm runs across hosts. Each process
// of an `mpirun -np N` job is one rank; the group is an MPI communicator (the world,
// or a part of it split off with MPI_Comm_split), which the transport duplicates, so
// its messages never meet the program's own.
//
// Example (in each process of `mpirun --allow-run-as-root -np 4 ./program`):
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<MpiSession> mpi, MpiSession::Start(&argc, &argv));
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport,
//   ConnectMpiTransport(MPI_COMM_WORLD));
//   // transport->name() == "mpi"; transport->rank() == the MPI rank; transport->size() == 4
//   LOOM_ASSIGN_OR_RETURN(int per_node, MpiRanksPerNode(MPI_COMM_WORLD));  // 4 on one host
//   CommunicatorOptions options;
//   options.ranks_per_node = per_node;  // for the hierarchical algorithm
//   LOOM_ASSIGN_OR_RETURN(auto comm, Communicator::Create(std::move(transport), options));
//
// How messages travel (all on the duplicated communicator). Loom tags are 64 bits
// and MPI's are 31, so Loom matches messages itself: every message starts with an
// envelope on one MPI tag (the control tag), which carries the Loom tag.
// - Up to `eager_bytes`, the payload rides in the envelope: one MPI message, and the
//   send completes at once (buffered; transport.h, Completion).
// - Larger messages are a rendezvous: the envelope announces the size; the receiver,
//   once it has a matching receive of that size, posts MPI receives for the data on
//   MPI tags of its own choosing and answers "clear to send" with them; only then does
//   the sender hand its data to MPI, in pieces of `chunk_bytes` copied into buffers
//   of its own (up to 1 MiB in flight to a peer; the next piece goes as one
//   completes); to a peer on another host the pieces are at most 60 KiB, which
//   Open MPI sends at once rather than through a rendezvous of its own. So a
//   send whose deadline passes before the receiver is ready is withdrawn cleanly (MPI
//   cannot cancel a send it was given), and a size mismatch fails both sides, as the
//   contract asks. Copy receives take the pieces straight into their buffer;
//   combining receives take them into the destination itself when the combiner
//   `lands_in_place`, otherwise into a few reused chunk buffers, and combine each as
//   it lands.
//
// Each endpoint measures the path to each peer (EstimatePath: the shortest round
// trip of a request to send, the fastest rate a transfer came in at), from which the
// ring sizes its window on a long link (collectives/internal/call_context.h).
//
// Waiting polls MPI (MPI_Improbe for envelopes, MPI_Testsome for data): it spins
// `spin_iterations` polls, then yields the CPU between polls, then sleeps 50 us
// between them, so more ranks than cores still progress. On a thread that naps
// when idle (core/idle_wait.h: a CommWorker's, overlapping compute) it spins 20 us
// at most, then sleeps 50 us between polls, and never yields: a yield would hand
// the core to a compute thread for its whole time slice. For the same reason Open
// MPI's own yield (mpi_yield_when_idle, which mpirun turns on when it oversubscribes
// a host) stalls such transfers: tools/cluster's mpirun-args turn it off unless the
// emulated hosts' ranks outnumber the machine's cores.
//
// Failure. Every error names the peer by world rank, pid and host ("world rank 3
// (pid 4242 on h1)", with its rank in the group when that differs). Abort sends
// every peer a message with the reason; their requests that involve the aborted rank
// fail with Unavailable ("mpi: world rank 3 (...) aborted: ..."). A peer that is
// alive but silent (stopped with SIGSTOP, its host frozen) is found by heartbeats:
// each endpoint's beat thread sends every peer a small message every
// HeartbeatInterval(heartbeat_timeout), and a Wait fails the requests that involve a
// peer silent past `heartbeat_timeout` with Unavailable ("... stopped responding: no
// heartbeat for 10.2s (heartbeat timeout 10s)"), whatever their own deadline. If MPI
// already holds data for that peer, the endpoint breaks as below. A process
// that dies is MPI's business: Open MPI's mpirun sees the death and kills the rest
// of the job, printing which rank ended how ("mpirun noticed that process rank 1
// with PID ... exited on signal 9 (Killed)"), and exits non-zero; the survivors do
// not get to return a Status (see README.md). A request still pending at its
// deadline fails with DeadlineExceeded naming the peer, tag and size. Data already
// handed to MPI (after "clear to send") cannot be withdrawn; Wait gives it
// `withdraw_grace` to land, and if it does not, the endpoint is broken: this and
// every later call fail with Internal. A send never leaves its buffer with MPI: its
// pieces are copied into the endpoint's own buffers as they go (a window of 1 MiB),
// which stay allocated while MPI holds them, so the caller may free its buffer once
// any Wait returns. A receive lands in its destination (copies, and combiners that
// `lands_in_place`) or in the endpoint's chunk buffers: after a break, the
// destination of a copy receive still in flight must stay alive until MPI is
// finalized.
//
// Closing an endpoint (destroying it) is local and keeps its duplicate communicator
// until MPI_Finalize, so a late message from a peer stays there; a process connects
// a few transports per job, not thousands.
//
// MPI errors (the duplicated communicator returns them rather than aborting) become
// Internal statuses naming the MPI call and MPI_Error_string's text.
//
// Threads. The transport serializes its MPI calls with one process-wide lock, so
// MPI_THREAD_SERIALIZED suffices (MpiSession asks for MPI_THREAD_MULTIPLE); Abort may
// come from any thread, as transport.h allows.
#ifndef LOOM_COLLECTIVES_TRANSPORT_MPI_MPI_TRANSPORT_H_
#define LOOM_COLLECTIVES_TRANSPORT_MPI_MPI_TRANSPORT_H_

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "collectives/transport/heartbeat.h"
#include "collectives/transport/transport.h"

namespace loom {

// MpiSession initializes MPI for the process and finalizes it when destroyed. One
// per process, created before any MPI transport and destroyed after the last.
//
// Only a clean run finalizes: MPI_Finalize is collective in practice (Open MPI's
// waits for its peers), so a rank that failed while others still wait on it would
// sit in ~MpiSession forever. After a fatal error a rank calls AbortJob instead:
//   if (!status.ok()) session->AbortJob("train", status, 2);  // does not return
//   session.reset();                                          // clean: MPI_Finalize
// How long AbortJob leaves a peer that aborted first to abort the job itself.
inline constexpr absl::Duration kPeerAbortGrace = absl::Seconds(3);

class MpiSession {
 public:
  // Start calls MPI_Init_thread (asking for MPI_THREAD_MULTIPLE). Internal with
  // MPI's error text when it fails; FailedPrecondition when MPI was already
  // initialized or finalized in this process, or when MPI grants less than
  // MPI_THREAD_SERIALIZED.
  static absl::StatusOr<std::unique_ptr<MpiSession>> Start(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // The thread level MPI granted (MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE).
  int thread_level() const { return thread_level_; }

  // AbortJob ends the whole job after a fatal error on this rank, instead of
  // finalizing with operations pending. It flushes stdout, prints "<program>: world
  // rank R of N (pid P on host H) aborts the MPI job: <cause's message>" to stderr
  // in one write, and calls MPI_Abort(MPI_COMM_WORLD, exit_code): mpirun then stops
  // every rank within seconds and exits non-zero (an `exit_code` of 0 is taken as 1).
  // It never returns; if MPI_Abort did, the process _exits with `exit_code`.
  // When this process's first recorded peer failure (peer_failure.h) is a peer that
  // aborted its endpoint, it waits kPeerAbortGrace before MPI_Abort, so that the
  // rank whose error started the failure aborts the job first and mpirun reports
  // that rank. Callable from any thread.
  [[noreturn]] void AbortJob(absl::string_view program, const absl::Status& cause,
                             int exit_code) const;

 private:
  MpiSession(int rank, int size, int level)
      : world_rank_(rank), world_size_(size), thread_level_(level) {}
  int world_rank_, world_size_, thread_level_;
};

// LaunchedByMpirun tells whether this process was started by an MPI launcher
// (Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE; PMIx launchers set PMIX_RANK).
bool LaunchedByMpirun();

struct MpiTransportOptions {
  // Messages of at most this many bytes travel inside their envelope and complete
  // as buffered; in [0, 1048576]. Every rank passes the same. The default and its
  // envelope stay under Open MPI's TCP eager limit (64 KiB with its header), so MPI
  // sends them at once too. A larger message is a rendezvous, a round trip before
  // its data moves: between 3 hosts 2 ms apart a 64 KiB all-reduce by direct (21
  // KiB messages) took 14.5 ms with 16 KiB here and 4.9 ms with 60 KiB.
  size_t eager_bytes = size_t{60} << 10;
  // The bytes of one data message of a rendezvous (each piece a sender stages, and
  // each chunk a combining receive combines); a multiple of 4096 in [4096, 1 GiB].
  // Every rank passes the same.
  size_t chunk_bytes = size_t{256} << 10;
  // Idle polls in Wait before it starts yielding the CPU.
  int spin_iterations = 4000;
  // How long a Wait past its deadline waits for data already handed to MPI.
  absl::Duration withdraw_grace = absl::Seconds(1);
  // A peer silent for longer fails the requests that need it (heartbeat.h); at least
  // kMinHeartbeatTimeout, or infinite to turn heartbeats off. Every rank passes the
  // same.
  absl::Duration heartbeat_timeout = kDefaultHeartbeatTimeout;
};

// ConnectMpiTransport makes this process's endpoint of the group `comm` (rank and
// size are the communicator's). Collective over `comm`: every member calls it, in
// the same order as its other collective calls on `comm`. The ranks exchange who
// they are (world rank, pid, host) for error messages. InvalidArgument for bad
// options or options that differ between ranks (naming the field and the ranks);
// FailedPrecondition when MPI is not initialized; Internal for an MPI error.
absl::StatusOr<std::unique_ptr<Transport>> ConnectMpiTransport(MPI_Comm comm,
                                                               MpiTransportOptions options = {});

// ConnectMpiTransportSplit connects the endpoint of this rank's part of `comm`: the
// members that pass the same `color`, ranked by `key` (MPI_Comm_split), as a job
// connects one group per line of a mesh dimension. Collective over all of `comm`.
// Errors as ConnectMpiTransport; InvalidArgument for a negative color.
absl::StatusOr<std::unique_ptr<Transport>> ConnectMpiTransportSplit(
    MPI_Comm comm, int color, int key, MpiTransportOptions options = {});

// MpiRanksPerNode returns the node layout of `comm` for CommunicatorOptions::
// ranks_per_node: the number of ranks per host, found with MPI_Comm_split_type
// (MPI_COMM_TYPE_SHARED). Collective over `comm`. `override_ranks_per_node` > 0
// emulates nodes of that many ranks instead (for testing a two-level layout on one
// host); it must divide the size. FailedPrecondition when hosts hold different
// numbers of ranks or a host's ranks are not consecutive (launch with
// `--map-by slot`, pass an override, or use MpiNodeOfRank); InvalidArgument for a
// bad override.
absl::StatusOr<int> MpiRanksPerNode(MPI_Comm comm, int override_ranks_per_node = 0);

// MpiNodeOfRank returns every rank's host for CommunicatorOptions::node_of_rank, in
// any layout (`mpirun --map-by node` deals ranks round-robin: h1,h2,h1,h2): hosts
// numbered in the order of their lowest rank, found with MPI_Comm_split_type
// (MPI_COMM_TYPE_SHARED). Collective over `comm`.
absl::StatusOr<std::vector<int>> MpiNodeOfRank(MPI_Comm comm);

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_MPI_MPI_TRANSPORT_H_
