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
//     // "#7 all_reduce f32 x1000 ring: ok in <4ms"
#ifndef LOOM_COLLECTIVES_FLIGHT_RECORDER_H_
#define LOOM_COLLECTIVES_FLIGHT_RECORDER_H_

#include <cstddef>
#include <cstdint>
#include <atomic>
#include <memory>
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
  // Start and duration have the coarse clock's resolution (core/clock.h: a kernel
  // tick, 4 ms here), which is what the latency path can afford and enough to see
  // where a stalled job stood; the recorder is not a profiler.
  absl::Time start;
  absl::Duration duration;
  std::string error;  // the failure, for kFailed

  std::string ToString() const;
};

// The recorder is written by the thread that drives its communicator and may be
// read from any thread (a watchdog; a signal-safe dump is not attempted). Writing
// takes no lock: each record is a set of atomics behind a version counter (a
// seqlock), which readers retry on, so a call costs a few plain stores rather than
// two mutex round trips on the latency path.
class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity);

  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Begin records a call as running since `start_unix_nanos` (nanoseconds since 1970,
  // as core/clock.h's CoarseNowNanos returns them) and returns its handle for End. A
  // caller that has just read the clock passes its reading: on the latency path of
  // small collectives every clock read shows, and so does converting an absl::Time.
  uint64_t Begin(const FlightRecord& record, int64_t start_unix_nanos);
  uint64_t Begin(const FlightRecord& record) { return Begin(record, loom::NowNanos()); }
  // End marks the call done or failed, at the coarse clock's time; a handle that has
  // left the window is ignored.
  void End(uint64_t handle, const absl::Status& status);

  // Snapshot returns the recorded calls, oldest first.
  std::vector<FlightRecord> Snapshot() const;
  // Format returns the last `last` calls, one per line, prefixed with how many
  // calls were recorded in all.
  std::string Format(size_t last) const;

 private:
  // One record, every field an atomic so that a reader racing the writer reads
  // torn values at worst, never undefined behaviour; `version` is odd while the
  // writer is between its stores, and readers retry until it is even and unchanged.
  struct Slot {
    std::atomic<uint64_t> version{0};
    std::atomic<uint64_t> seq{0};
    std::atomic<uint64_t> count{0};
    std::atomic<int64_t> start_ns{0};
    std::atomic<int64_t> duration_ns{0};
    std::atomic<int32_t> peer{-1};
    std::atomic<int32_t> code{0};  // absl::StatusCode of a failed call
    std::atomic<uint8_t> kind{0};
    std::atomic<uint8_t> dtype{0};
    std::atomic<uint8_t> algorithm{0};
    std::atomic<uint8_t> state{0};
  };

  // Read copies the slot of `handle` consistently.
  FlightRecord Read(uint64_t handle) const;
  // The handles [first, next) still in the window, from a consistent `next`.
  uint64_t first_recorded(uint64_t next) const { return next < capacity_ ? 0 : next - capacity_; }

  const size_t capacity_;
  std::unique_ptr<Slot[]> slots_;      // handle h lives in slots_[h % capacity_]
  std::atomic<uint64_t> next_handle_{0};  // written by the driving thread only
  size_t newest_slot_ = 0;  // slot of handle next_handle_ - 1; driving thread only
};

}  // namespace loom

#endif  // LOOM_COLLECTIVES_FLIGHT_RECORDER_H_
