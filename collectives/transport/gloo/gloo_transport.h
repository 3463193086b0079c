// The gloo backend of the Transport interface (collectives/transport/transport.h): the
// ranks of a group talk over TCP through Gloo's tcp transport (Debian's libgloo-dev,
// 0.0~git20220518), so Loom's algorithms run across hosts that have no MPI. Ranks meet
// through a Gloo rendezvous store: a directory every rank can reach (gloo's FileStore;
// /tmp on one host, a shared filesystem across hosts) or a store the caller owns (a
// HashStore shared by thread ranks in tests).
//
// Example (each of 4 processes, the directory shared by all of them):
//   loom::GlooOptions options;
//   options.rank = rank;                       // 0..3
//   options.size = 4;
//   options.world_rank = world_rank;           // errors name peers by it (-1: rank)
//   options.store_dir = "/mnt/shared/job42";   // exists; one directory per job
//   options.hostname = "10.0.0.7";             // this host's address the peers can reach
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<loom::Transport> t, loom::ConnectGlooTransport(options));
//   LOOM_ASSIGN_OR_RETURN(auto comm, loom::Communicator::Create(std::move(t)));
//   // comm->AllReduce(...) now runs Loom's algorithms over gloo's TCP pairs.
//
// HOW MESSAGES TRAVEL. Loom matches messages itself; gloo only moves bytes. Between
// every two ranks gloo carries frames on one slot: a 64-byte envelope (kind, Loom tag,
// size, send id) followed by the payload when it is at most 256 KiB. Each rank keeps
// four receives of frames posted per peer, so such a message is one gloo message that
// lands at once. A larger payload follows its frame on a second slot, cut into
// pieces of 256 KiB, each into a receive the receiver keeps posted there once a large
// payload has come from that peer (as many as for frames), over one of
// two more gloo contexts, one per direction between two ranks (internal/endpoint.h,
// GlooContexts: gloo's "ready to receive" notice would otherwise queue behind the
// receiver's own outgoing data, and two ranks exchanging large payloads take turns).
// Both slots carry the prefix 0x4C, clear of the prefixes 0x01..0x08 that gloo's own
// collectives use. The thread that posts a message queues it (under the endpoint's
// lock, so the wire order is the posting order) for gloo's own event-loop thread,
// which makes every gloo send and receive posting (internal/loop_poster.h: no other
// thread then holds a gloo pair's lock while bytes arrive); one thread per peer
// receives, and one frees messages gloo has sent. gloo never holds a pointer into a
// caller's buffer:
//   - Send copies the bytes. Up to `eager_bytes` it completes at once (buffered);
//     a larger send completes when the receiver has matched it (its acknowledgement
//     also carries a size mismatch back, so both sides fail, naming both sizes).
//   - A matched receive copies (or combines) from the frame or the payload buffer
//     into the caller's under the endpoint's lock, all at once: a receive is either
//     untouched or complete, so cancelling it at its deadline is exact.
//   - Sends to oneself never touch gloo.
// The cost is one extra copy on each side (two on the receiving side for a payload
// above 256 KiB: piece, whole, caller's), 1 MiB of posted frames per peer (up to 8 MiB
// on a long fat path: twice its measured bandwidth-delay product) and as much for
// payload pieces from a peer that sends large payloads, and a round trip for the
// acknowledgement of a send above `eager_bytes`. Every heartbeat is also a ping; with the receivers' timing of what
// arrives back to back it gives EstimatePath, from which the ring sizes its window.
//
// PEERS THAT FAIL. At connect every rank puts its identity (world rank, pid, host)
// and beat interval in the store, and errors name peers by them. A beat thread sends
// every peer a 64-byte heartbeat each interval (a tenth of `heartbeat_timeout`, in
// [10 ms, 1 s]); any frame from a peer counts as a beat. What a rank sees, for every
// pending and later request with the peer, and recorded as the process's first peer
// failure (peer_failure.h) where the peer is to blame:
//   - it died (kill -9, crash; its kernel closes its sockets): Unavailable "gloo rank
//     0: connection to world rank 3 (pid 4242 on h1) lost: <gloo's text>", at once;
//   - it stopped running with its sockets open (SIGSTOP, a frozen or vanished host):
//     Unavailable "gloo: world rank 3 (pid 4242 on h1) stopped responding: no
//     heartbeat for 10.05s (heartbeat timeout 10s) (its state: T, stopped)" within
//     about the timeout, whatever the requests' deadlines (the state for a peer on
//     this host only);
//   - it aborted: Unavailable "gloo: world rank 3 (...) aborted: <its reason>";
//   - it closed its endpoint (it says goodbye first; not recorded): Unavailable "gloo
//     rank 0: world rank 3 (...) closed its endpoint".
// A peer that is merely busy is no failure: its beat thread runs whatever it
// computes or waits for, and a rank that was stopped itself does not blame the peers
// it could not hear meanwhile. What the heartbeat cannot tell apart:
//   - a rank whose working thread is stuck (a deadlock in its code) while its beat
//     thread runs looks alive: only the requests' deadlines catch it;
//   - a beat queues behind the bytes ahead of it on the same TCP stream, so a huge
//     message delays it by its transfer time (1 GiB at 1 GB/s: a second), and a copy
//     or reduction of one holds the endpoint's lock the beat thread needs (several
//     GB/s): keep the timeout well above the largest message's transfer time.
//
// WHERE GLOO FALLS SHORT of the contract, and what this backend does instead:
//   - gloo cannot withdraw a message it is sending. A large send still pending at its
//     deadline fails with DeadlineExceeded and a withdrawal follows its bytes; the
//     receiver drops the message if no receive has matched it yet. If one matched it
//     in the meantime, the receiver got it (the sender saw DeadlineExceeded).
//   - gloo reports a dead or closed peer only as an IoException of the TCP pair,
//     the same for both: a closing endpoint says goodbye first, so its peers tell a
//     close from a death. A peer that stops without closing is not gloo's concern at
//     all: the heartbeats above find it.
//   - gloo never completes nor fails a send it had queued on a pair when the pair
//     broke (it signals the error to pinned buffers only), so messages to a peer
//     that is gone are not waited for: they are freed after the pairs close.
//   - A timed-out gloo wait closes every pair of its context (gloo's own rule), so
//     this backend never gives gloo a timeout after connecting: deadlines are kept by
//     Loom's Wait, and the threads' gloo waits end by being aborted at close.
// native() is null: gloo's collectives are not offered as a baseline.
#ifndef LOOM_COLLECTIVES_TRANSPORT_GLOO_GLOO_TRANSPORT_H_
#define LOOM_COLLECTIVES_TRANSPORT_GLOO_GLOO_TRANSPORT_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/transport/heartbeat.h"
#include "collectives/transport/transport.h"

namespace gloo {
namespace rendezvous {
class Store;
}  // namespace rendezvous
}  // namespace gloo

namespace loom {

struct GlooOptions {
  // This endpoint's rank in [0, size) and the number of ranks.
  int rank = 0;
  int size = 1;
  // This process's rank in the whole job, when `rank` is local to a group; -1 means
  // `rank`. Errors name peers by it, with their pid and host.
  int world_rank = -1;
  // A peer whose endpoint is open but from which nothing, not even a heartbeat, came
  // for this long (stopped, frozen) fails every pending and later request with it
  // with Unavailable naming it ("stopped responding"), whatever their deadlines. At
  // least 200 ms (heartbeat.h); absl::InfiniteDuration() turns the judging off (this
  // rank still beats for its peers).
  absl::Duration heartbeat_timeout = kDefaultHeartbeatTimeout;
  // Rendezvous directory for gloo's FileStore, shared by every rank and existing
  // before they connect; one per job (or a distinct `prefix` per group).
  std::string store_dir;
  // A store to use instead of `store_dir` (not owned; it must outlive the call to
  // ConnectGlooTransport only). Thread ranks of one process share a HashStore.
  gloo::rendezvous::Store* store = nullptr;
  // Prefix of this group's keys in the store: groups sharing a store differ in it.
  std::string prefix = "loom";
  // The address peers reach this rank at (gloo's tcp attr.hostname) ...
  std::string hostname = "127.0.0.1";
  // ... or, when set, the network interface whose address to use (attr.iface).
  std::string interface;
  // How long to wait for every rank to arrive at the store and connect.
  absl::Duration connect_timeout = absl::Seconds(30);
  // Sends of at most this many bytes complete as soon as they are copied (buffered);
  // larger ones when the receiver has matched them. The default is the inline limit
  // of a frame, so the pipelined algorithms' 256 KiB chunks never wait for a round trip.
  size_t eager_bytes = size_t{256} << 10;
  // How long closing the endpoint waits for its queued messages (acknowledgements,
  // buffered sends, abort notices) to leave, and then for every peer's goodbye (or
  // its end), before giving up on them and closing the connections.
  absl::Duration close_grace = absl::Seconds(2);
};

// ConnectGlooTransport connects rank `options.rank` to the other ranks of the group
// named by the store and prefix, and returns its endpoint once gloo's full mesh of
// TCP pairs is up. Every rank of the group calls it. InvalidArgument for bad options
// (naming them), DeadlineExceeded when the ranks do not all arrive within
// `connect_timeout`, Unavailable for gloo's IO errors, Internal for any other gloo
// error; each carries gloo's own text.
absl::StatusOr<std::unique_ptr<Transport>> ConnectGlooTransport(const GlooOptions& options);

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_GLOO_GLOO_TRANSPORT_H_
