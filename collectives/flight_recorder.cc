#include "collectives/flight_recorder.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace loom {

std::string FlightRecord::ToString() const {
  std::string out = absl::StrCat("#", seq, " ", CollectiveKindName(kind));
  if (kind != CollectiveKind::kBarrier) absl::StrAppend(&out, " ", DTypeName(dtype), " x", count);
  if (peer >= 0) {
    absl::StrAppend(&out, kind == CollectiveKind::kSendRecv ? " peer " : " root ", peer);
  }
  if (algorithm != Algorithm::kAuto) absl::StrAppend(&out, " ", AlgorithmName(algorithm));
  switch (state) {
    case State::kRunning:
      absl::StrAppend(&out, ": RUNNING for ", absl::FormatDuration(absl::Now() - start));
      break;
    case State::kDone: absl::StrAppend(&out, ": ok in ", absl::FormatDuration(duration)); break;
    case State::kFailed:
      absl::StrAppend(&out, ": FAILED after ", absl::FormatDuration(duration), " (", error, ")");
      break;
  }
  return out;
}

uint64_t FlightRecorder::Begin(const FlightRecord& record, absl::Time start) {
  std::lock_guard<std::mutex> lock(mu_);
  FlightRecord& slot = ring_[next_handle_ % capacity_];
  slot = record;
  slot.state = FlightRecord::State::kRunning;
  slot.start = start;
  return next_handle_++;
}

void FlightRecorder::End(uint64_t handle, const absl::Status& status) {
  const absl::Time end = loom::Now();
  std::lock_guard<std::mutex> lock(mu_);
  if (handle + recorded() < next_handle_ || handle >= next_handle_) return;
  FlightRecord& record = ring_[handle % capacity_];
  record.duration = end - record.start;
  record.state = status.ok() ? FlightRecord::State::kDone : FlightRecord::State::kFailed;
  if (!status.ok()) record.error = std::string(absl::StatusCodeToString(status.code()));
}

std::vector<FlightRecord> FlightRecorder::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<FlightRecord> records;
  records.reserve(recorded());
  for (uint64_t handle = next_handle_ - recorded(); handle < next_handle_; ++handle) {
    records.push_back(ring_[handle % capacity_]);
  }
  return records;
}

std::string FlightRecorder::Format(size_t last) const {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t shown = std::min(last, recorded());
  std::string out = absl::StrCat("last ", shown, " of ", next_handle_, " calls:");
  for (uint64_t handle = next_handle_ - shown; handle < next_handle_; ++handle) {
    absl::StrAppend(&out, "\n  ", ring_[handle % capacity_].ToString());
  }
  return out;
}

}  // namespace loom
