// PeerWatch: the heartbeat bookkeeping of a message transport (MPI, Gloo), whose
// peers beat by sending it small messages (the shm transport reads its peers'
// beats from their shared segments instead; heartbeat.h has the policy).
//
// Every message from a peer counts as a beat (Heard). A peer is judged silent
// when nothing came from it for longer than the allowed time: the timeout, or
// three of its own beat intervals when it beats more slowly. Silence counts only
// while this process was listening: whoever judges calls Listen as it goes, and a
// gap between two calls longer than the beat interval (this process was stopped
// itself, or its transport was not polled) starts the count afresh, so a rank
// that was stopped does not blame the peers whose beats it could not read.
//
// Example (a transport's waiting loop and its receive path):
//   PeerWatch watch("mpi", /*self=*/0, peers, absl::Seconds(10));
//   watch.Heard(1);                          // on every message from rank 1
//   watch.Listen();                          // on every poll
//   absl::Status silent = watch.Judge(1);    // Unavailable once rank 1 is silent:
//   // "mpi: world rank 1 (pid 4242 on h1) stopped responding: no heartbeat for
//   //  10.2s (heartbeat timeout 10s) (its state: T (stopped))"
//   // and the first such failure of the process is recorded (peer_failure.h).
#ifndef LOOM_COLLECTIVES_TRANSPORT_PEER_WATCH_H_
#define LOOM_COLLECTIVES_TRANSPORT_PEER_WATCH_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collectives/transport/peer_failure.h"

namespace loom {

class PeerWatch {
 public:
  // `peers` holds every rank of the group by group rank (this one at `self`);
  // `peer_intervals`, when not empty, each peer's beat interval (from its own
  // timeout). An infinite `timeout` judges nobody (Judge is always OK).
  PeerWatch(std::string transport, int self, std::vector<PeerIdentity> peers,
            absl::Duration timeout, std::vector<absl::Duration> peer_intervals = {});

  bool judging() const { return timeout_ != absl::InfiniteDuration(); }
  absl::Duration timeout() const { return timeout_; }
  // How often this process beats: HeartbeatInterval(timeout).
  absl::Duration interval() const { return interval_; }
  const PeerIdentity& identity(int peer) const { return peers_[peer]; }
  // Describe: DescribePeer of `peer`, with its group rank when that differs from
  // its world rank ("world rank 5 (pid 77 on h1), rank 1 of the group").
  std::string Describe(int peer) const;

  // Heard: a message from `peer` arrived now. Thread-safe.
  void Heard(int peer);
  // Listen: this process is listening now. Thread-safe.
  void Listen();
  // Judge: Unavailable naming the peer when it is silent past its allowed time,
  // else OK. The first verdict on a peer is recorded with RecordPeerFailure; a
  // judged peer stays judged. Thread-safe.
  absl::Status Judge(int peer);

 private:
  const std::string transport_;
  const int self_;
  const std::vector<PeerIdentity> peers_;
  const absl::Duration timeout_;
  const absl::Duration interval_;
  std::vector<absl::Duration> allowed_;               // by peer
  std::unique_ptr<std::atomic<int64_t>[]> heard_ns_;  // by peer, monotonic clock
  std::unique_ptr<std::atomic<bool>[]> judged_;       // by peer
  std::atomic<int64_t> listening_since_ns_;
  std::atomic<int64_t> last_listen_ns_;
};

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_PEER_WATCH_H_
