#include "collectives/flight_recorder.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/clock.h"

namespace loom {
namespace {

// Durations come from the coarse clock: below one tick they are only "under a tick".
std::string FormatTicks(absl::Duration duration) {
  const absl::Duration tick = CoarseResolution();
  if (duration < tick) return absl::StrCat("<", absl::FormatDuration(tick));
  return absl::FormatDuration(duration);
}

}  // namespace

std::string FlightRecord::ToString() const {
  std::string out = absl::StrCat("#", seq, " ", CollectiveKindName(kind));
  if (kind != CollectiveKind::kBarrier) absl::StrAppend(&out, " ", DTypeName(dtype), " x", count);
  if (peer >= 0) {
    absl::StrAppend(&out, kind == CollectiveKind::kSendRecv ? " peer " : " root ", peer);
  }
  if (algorithm != Algorithm::kAuto) absl::StrAppend(&out, " ", AlgorithmName(algorithm));
  switch (state) {
    case State::kRunning:
      absl::StrAppend(&out, ": RUNNING for ", FormatTicks(absl::Now() - start));
      break;
    case State::kDone: absl::StrAppend(&out, ": ok in ", FormatTicks(duration)); break;
    case State::kFailed:
      absl::StrAppend(&out, ": FAILED after ", FormatTicks(duration), " (", error, ")");
      break;
  }
  return out;
}

FlightRecorder::FlightRecorder(size_t capacity)
    : capacity_(capacity == 0 ? 1 : capacity), slots_(new Slot[capacity_]) {}

uint64_t FlightRecorder::Begin(const FlightRecord& record, int64_t start_unix_nanos) {
  const uint64_t handle = next_handle_.load(std::memory_order_relaxed);
  // Stepping the newest slot rather than taking handle % capacity_ saves a division
  // here and, since calls end in the order they began, one in End.
  newest_slot_ = handle == 0 || newest_slot_ + 1 == capacity_ ? 0 : newest_slot_ + 1;
  Slot& slot = slots_[newest_slot_];
  const uint64_t version = slot.version.load(std::memory_order_relaxed);
  // Fields are stored with release, so a reader that sees any new field also sees
  // the odd version stored before it (a fence would do the same, but TSan does not
  // support fences).
  slot.version.store(version + 1, std::memory_order_relaxed);
  slot.seq.store(record.seq, std::memory_order_release);
  slot.count.store(record.count, std::memory_order_release);
  slot.start_ns.store(start_unix_nanos, std::memory_order_release);
  slot.duration_ns.store(0, std::memory_order_release);
  slot.peer.store(record.peer, std::memory_order_release);
  slot.code.store(0, std::memory_order_release);
  slot.kind.store(static_cast<uint8_t>(record.kind), std::memory_order_release);
  slot.dtype.store(static_cast<uint8_t>(record.dtype), std::memory_order_release);
  slot.algorithm.store(static_cast<uint8_t>(record.algorithm), std::memory_order_release);
  slot.state.store(static_cast<uint8_t>(FlightRecord::State::kRunning), std::memory_order_release);
  slot.version.store(version + 2, std::memory_order_release);
  next_handle_.store(handle + 1, std::memory_order_release);
  return handle;
}

void FlightRecorder::End(uint64_t handle, const absl::Status& status) {
  const int64_t end_ns = CoarseNowNanos();
  const uint64_t next = next_handle_.load(std::memory_order_relaxed);
  if (handle < first_recorded(next) || handle >= next) return;
  Slot& slot = slots_[handle + 1 == next ? newest_slot_ : handle % capacity_];
  const uint64_t version = slot.version.load(std::memory_order_relaxed);
  slot.version.store(version + 1, std::memory_order_relaxed);
  slot.duration_ns.store(end_ns - slot.start_ns.load(std::memory_order_relaxed),
                         std::memory_order_release);
  // Status::code() is an out-of-line call; an OK status needs none.
  slot.code.store(status.ok() ? 0 : static_cast<int32_t>(status.code()),
                  std::memory_order_release);
  slot.state.store(static_cast<uint8_t>(status.ok() ? FlightRecord::State::kDone
                                                    : FlightRecord::State::kFailed),
                   std::memory_order_release);
  slot.version.store(version + 2, std::memory_order_release);
}

FlightRecord FlightRecorder::Read(uint64_t handle) const {
  const Slot& slot = slots_[handle % capacity_];
  FlightRecord record;
  while (true) {
    const uint64_t before = slot.version.load(std::memory_order_acquire);
    if (before % 2 == 0) {
      record.seq = slot.seq.load(std::memory_order_acquire);
      record.count = slot.count.load(std::memory_order_acquire);
      record.start = absl::FromUnixNanos(slot.start_ns.load(std::memory_order_acquire));
      record.duration = absl::Nanoseconds(slot.duration_ns.load(std::memory_order_acquire));
      record.peer = slot.peer.load(std::memory_order_acquire);
      const auto code = static_cast<absl::StatusCode>(slot.code.load(std::memory_order_acquire));
      record.kind = static_cast<CollectiveKind>(slot.kind.load(std::memory_order_acquire));
      record.dtype = static_cast<DType>(slot.dtype.load(std::memory_order_acquire));
      record.algorithm = static_cast<Algorithm>(slot.algorithm.load(std::memory_order_acquire));
      record.state = static_cast<FlightRecord::State>(slot.state.load(std::memory_order_acquire));
      // The acquire loads above keep this re-check after them.
      if (slot.version.load(std::memory_order_relaxed) == before) {
        record.error = record.state == FlightRecord::State::kFailed
                           ? std::string(absl::StatusCodeToString(code))
                           : std::string();
        return record;
      }
    }
    std::this_thread::yield();
  }
}

std::vector<FlightRecord> FlightRecorder::Snapshot() const {
  const uint64_t next = next_handle_.load(std::memory_order_acquire);
  std::vector<FlightRecord> records;
  records.reserve(next - first_recorded(next));
  for (uint64_t handle = first_recorded(next); handle < next; ++handle) {
    records.push_back(Read(handle));
  }
  return records;
}

std::string FlightRecorder::Format(size_t last) const {
  const uint64_t next = next_handle_.load(std::memory_order_acquire);
  const uint64_t shown = std::min<uint64_t>(last, next - first_recorded(next));
  std::string out = absl::StrCat("last ", shown, " of ", next, " calls:");
  for (uint64_t handle = next - shown; handle < next; ++handle) {
    absl::StrAppend(&out, "\n  ", Read(handle).ToString());
  }
  return out;
}

}  // namespace loom
