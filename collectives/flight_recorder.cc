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

uint64_t FlightRecorder::Begin(FlightRecord record) {
  record.state = FlightRecord::State::kRunning;
  record.start = absl::Now();
  std::lock_guard<std::mutex> lock(mu_);
  records_.push_back(std::move(record));
  if (records_.size() > capacity_) records_.pop_front();
  return next_handle_++;
}

void FlightRecorder::End(uint64_t handle, const absl::Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t oldest = next_handle_ - records_.size();
  if (handle < oldest || handle >= next_handle_) return;
  FlightRecord& record = records_[handle - oldest];
  record.duration = absl::Now() - record.start;
  record.state = status.ok() ? FlightRecord::State::kDone : FlightRecord::State::kFailed;
  if (!status.ok()) record.error = std::string(absl::StatusCodeToString(status.code()));
}

std::vector<FlightRecord> FlightRecorder::Snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return std::vector<FlightRecord>(records_.begin(), records_.end());
}

std::string FlightRecorder::Format(size_t last) const {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t shown = std::min(last, records_.size());
  std::string out = absl::StrCat("last ", shown, " of ", next_handle_, " calls:");
  for (size_t i = records_.size() - shown; i < records_.size(); ++i) {
    absl::StrAppend(&out, "\n  ", records_[i].ToString());
  }
  return out;
}

}  // namespace loom
