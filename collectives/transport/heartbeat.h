// Heartbeats: how a transport tells a peer that is alive but not progressing
// (stopped with SIGSTOP, swapped out, its host frozen) from one that is merely
// busy.
//
// Each process beats from a thread of its own every HeartbeatInterval(timeout);
// a peer whose last beat is older than `timeout` is reported unresponsive, to
// every request that involves it, without waiting for the operation's own
// deadline. A long legitimate collective is no failure: the beat thread runs
// whatever the rank computes or waits for. What a heartbeat cannot see: a rank
// whose beat thread runs while its working thread is stuck (a deadlock in user
// code); only the operation deadline catches that.
//
// Example:
//   ShmOptions options;  // MpiTransportOptions and GlooOptions have the same field
//   options.heartbeat_timeout = absl::Seconds(3);
//   // HeartbeatInterval(absl::Seconds(3)) == absl::Milliseconds(300)
#ifndef LOOM_COLLECTIVES_TRANSPORT_HEARTBEAT_H_
#define LOOM_COLLECTIVES_TRANSPORT_HEARTBEAT_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace loom {

// The default bound within which a silent peer is reported.
inline constexpr absl::Duration kDefaultHeartbeatTimeout = absl::Seconds(10);
// The shortest accepted: beats are 10 ms apart at best, and a loaded host
// delays them.
inline constexpr absl::Duration kMinHeartbeatTimeout = absl::Milliseconds(200);

// HeartbeatInterval: a tenth of the timeout, within [10 ms, 1 s]; 1 s for an
// infinite timeout (heartbeats off: nobody judges them, but peers still see
// them).
absl::Duration HeartbeatInterval(absl::Duration timeout);

// ValidateHeartbeatTimeout: InvalidArgument naming `what` and the value unless
// it is at least kMinHeartbeatTimeout or infinite (off).
absl::Status ValidateHeartbeatTimeout(absl::Duration timeout, absl::string_view what);

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_HEARTBEAT_H_
