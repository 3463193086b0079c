// FlightRecorder: the last few hundred calls of one communicator on one rank —
// sequence number, collective, dtype, count, root or peer, algorithm and how the
// call ended — so that a timeout error shows where this rank stood, and the errors
// of all ranks side by side show where the job stalled.
//
// Example:
//   FlightRecorder recorder(/*capacity=*/256);
//   const uint64_t id = recorder.Begin({.seq = 7, .kind = CollectiveKind::kAllReduce, ...});
//   recorder.End(id, absl::OkStatus());
//   recorder.Format(/*last=*/8);
//     // "#7 all_reduce f32 x1000 ring: ok in 52us"
#ifndef LOOM_COLLECTIVES_FLIGHT_RECORDER_H_
#define LOOM_COLLECTIVES_FLIGHT_RECORDER_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/collective_kind.h"
#include "core/clock.h"
#include "core/dtype.h"

namespace loom {

struct FlightRecord {
  enum class State : uint8_t { kRunning, kDone, kFailed };

  uint64_t seq = 0;
  CollectiveKind kind = CollectiveKind::kAllReduce;
  DType dtype = DType::kU8;
  size_t count = 0;
  int peer = -1;  // root of a rooted collective, peer of send/recv; -1 otherwise
  Algorithm algorithm = Algorithm::kAuto;
  State state = State::kRunning;
  absl::Time start;
  absl::Duration duration;
  std::string error;  // the failure, for kFailed

  std::string ToString() const;
};

// The recorder is written by the thread that drives its communicator and may be
// read from any thread (a watchdog, a signal-safe dump is not attempted).
class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity)
      : capacity_(capacity == 0 ? 1 : capacity), ring_(capacity_) {}

  // Begin records a call as running since `start` and returns its handle for End.
  // (A caller that has just read the clock passes its reading: on the latency
  // path of small collectives every clock read shows.)
  uint64_t Begin(const FlightRecord& record, absl::Time start);
  uint64_t Begin(const FlightRecord& record) { return Begin(record, loom::Now()); }
  // End marks the call done or failed; a handle that has left the window is ignored.
  void End(uint64_t handle, const absl::Status& status);

  // Snapshot returns the recorded calls, oldest first.
  std::vector<FlightRecord> Snapshot() const;
  // Format returns the last `last` calls, one per line, prefixed with how many
  // calls were recorded in all.
  std::string Format(size_t last) const;

 private:
  // The records of handles [next_handle_ - size, next_handle_), where size =
  // min(next_handle_, capacity_); handle h lives in ring_[h % capacity_]. A ring
  // allocated once: recording a call allocates nothing.
  size_t recorded() const { return next_handle_ < capacity_ ? next_handle_ : capacity_; }

  const size_t capacity_;
  mutable std::mutex mu_;
  std::vector<FlightRecord> ring_;  // guarded by mu_
  uint64_t next_handle_ = 0;        // guarded by mu_
};

}  // namespace loom

#endif  // LOOM_COLLECTIVES_FLIGHT_RECORDER_H_
