// Peer failures: who a transport's peer is, as a user would look for it (world
// rank, pid, host), and a process-wide record of the first peer failure any
// transport of this process saw.
//
// A rank usually fails because a peer failed first: it died, stopped
// responding, or aborted. Its own error then travels up through collectives and
// the job's code, which wrap the message; the record below keeps the fact that
// the cause was a peer, and which one, whatever happens to the message. A job
// (tools/train, tools/collective_bench) reads it when it fails, so that its
// launcher can blame the rank that failed first, not the survivors that
// noticed.
//
// Example:
//   PeerIdentity peer{.world_rank = 3, .pid = 4242, .host = "trainer1"};
//   DescribePeer(peer) == "world rank 3 (pid 4242 on trainer1)"
//   RecordPeerFailure({peer, PeerFault::kUnresponsive, absl::Now(), "silent"});
//   FirstPeerFailure()->peer.world_rank == 3  // the first record stays
#ifndef LOOM_COLLECTIVES_TRANSPORT_PEER_FAILURE_H_
#define LOOM_COLLECTIVES_TRANSPORT_PEER_FAILURE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace loom {

struct PeerIdentity {
  int world_rank = -1;  // -1: unknown (a transport used outside a job)
  int64_t pid = 0;      // 0: unknown
  std::string host;     // empty: unknown
};

// DescribePeer: "world rank 3 (pid 4242 on trainer1)"; the parts not known are
// left out ("pid 4242", "an unknown peer").
std::string DescribePeer(const PeerIdentity& peer);

// SelfIdentity: this process, with the world rank its caller knows.
PeerIdentity SelfIdentity(int world_rank);

// HostName: this host's name (gethostname), "" if it has none.
std::string HostName();

enum class PeerFault {
  kDied,          // the process is gone (killed, crashed)
  kUnresponsive,  // alive but silent past the heartbeat timeout (stopped, hung
                  // host)
  kAborted,       // it aborted its endpoint with an error of its own
};
absl::string_view PeerFaultName(PeerFault fault);  // "died", "stopped responding", "aborted"

struct PeerFailure {
  PeerIdentity peer;
  PeerFault fault = PeerFault::kDied;
  absl::Time when;
  std::string message;  // what the transport reported
};

// RecordPeerFailure keeps `failure` if it is the first of this process.
// Thread-safe.
void RecordPeerFailure(const PeerFailure& failure);

// SetPeerFailureObserver: `observer` is called (on the recording thread, outside any
// lock) with the first failure recorded from now on, so that a job can report it at
// once, before it unwinds. nullptr removes it.
void SetPeerFailureObserver(void (*observer)(const PeerFailure&));

// FirstPeerFailure: the first recorded, if any.
std::optional<PeerFailure> FirstPeerFailure();

// ProcessStateNote: " (its state: T (stopped))" from /proc/<pid>/stat for a
// process on this host, "" when it cannot be read; for messages about an
// unresponsive peer.
std::string ProcessStateNote(int64_t pid);

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_PEER_FAILURE_H_
