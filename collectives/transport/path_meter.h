// PathMeter: what a backend has measured of the path to each peer (PathEstimate,
// transport.h), from samples its endpoint takes while it moves messages: the
// shortest round trip seen and the fastest transfer seen. Thread-safe, so an
// endpoint's receiver threads and its callers may share one.
//
// A round trip sample is any exchange that waits for the peer and nothing else (a
// ping's echo, a request-to-send's clear-to-send). A rate sample is bytes that came
// in back to back over a measured time, at least kMinRateSampleBytes of them: a
// smaller one is mostly the wake-up of the thread that timed it. The minimum and the
// maximum are kept, not an average, because every disturbance (a busy CPU, a queue
// in front of the sample) only lengthens a round trip and only slows a transfer.
//
// Example:
//   PathMeter meter(/*peers=*/4);
//   meter.NoteRoundTrip(1, absl::Microseconds(4250));
//   meter.NoteTransfer(1, size_t{1} << 20, absl::Microseconds(4200));
//   meter.Estimate(1).BytesInFlight();  // ~1.06 MB: 4.25 ms at ~250 MB/s
#ifndef LOOM_COLLECTIVES_TRANSPORT_PATH_METER_H_
#define LOOM_COLLECTIVES_TRANSPORT_PATH_METER_H_

#include <cstddef>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "collectives/transport/transport.h"
#include "core/mutex.h"

namespace loom {

class PathMeter {
 public:
  // The smallest transfer taken as a rate sample.
  static constexpr size_t kMinRateSampleBytes = size_t{128} << 10;

  explicit PathMeter(int peers);

  // A round trip to `peer`; kept when it is the shortest so far. Non-positive
  // durations and peers outside [0, peers) are ignored.
  void NoteRoundTrip(int peer, absl::Duration round_trip) ABSL_LOCKS_EXCLUDED(mu_);
  // `bytes` from (or to) `peer` that took `elapsed`; a rate kept when it is the
  // fastest so far. Fewer than kMinRateSampleBytes or a non-positive time: ignored.
  void NoteTransfer(int peer, size_t bytes, absl::Duration elapsed) ABSL_LOCKS_EXCLUDED(mu_);
  // Zeros for a peer outside [0, peers) or one not measured yet.
  PathEstimate Estimate(int peer) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable Mutex mu_;
  std::vector<PathEstimate> paths_ ABSL_GUARDED_BY(mu_);
};

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_PATH_METER_H_
