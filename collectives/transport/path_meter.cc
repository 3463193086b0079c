#include "collectives/transport/path_meter.h"

#include <algorithm>

namespace loom {

PathMeter::PathMeter(int peers) : paths_(static_cast<size_t>(std::max(peers, 0))) {}

void PathMeter::NoteRoundTrip(int peer, absl::Duration round_trip) {
  if (round_trip <= absl::ZeroDuration()) return;
  MutexLock lock(&mu_);
  if (peer < 0 || static_cast<size_t>(peer) >= paths_.size()) return;
  PathEstimate& path = paths_[peer];
  if (path.round_trip == absl::ZeroDuration() || round_trip < path.round_trip) {
    path.round_trip = round_trip;
  }
}

void PathMeter::NoteTransfer(int peer, size_t bytes, absl::Duration elapsed) {
  if (bytes < kMinRateSampleBytes || elapsed <= absl::ZeroDuration()) return;
  const double rate = static_cast<double>(bytes) / absl::ToDoubleSeconds(elapsed);
  MutexLock lock(&mu_);
  if (peer < 0 || static_cast<size_t>(peer) >= paths_.size()) return;
  PathEstimate& path = paths_[peer];
  path.bytes_per_second = std::max(path.bytes_per_second, rate);
}

PathEstimate PathMeter::Estimate(int peer) const {
  MutexLock lock(&mu_);
  if (peer < 0 || static_cast<size_t>(peer) >= paths_.size()) return {};
  return paths_[peer];
}

}  // namespace loom
