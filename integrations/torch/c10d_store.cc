#include "integrations/torch/c10d_store.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace loom {
namespace pytorch {
namespace {

// c10::Error's what() carries a C++ backtrace; its first line is the message.
std::string FirstLine(const char* what) {
  const std::string text(what);
  return text.substr(0, text.find('\n'));
}

}  // namespace

absl::Status C10dStore::Set(const std::string& key, const std::string& value) {
  try {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("store set of \"", key, "\" failed: ", FirstLine(e.what())));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> C10dStore::Get(const std::string& key, absl::Time deadline) {
  // c10d reads a zero timeout as "none", so the wait gets at least a millisecond.
  const absl::Duration left = std::max(deadline - absl::Now(), absl::Milliseconds(1));
  try {
    store_->wait({key}, absl::ToChronoMilliseconds(left));
  } catch (const std::exception& e) {
    // c10d's waits count whole milliseconds from their own start, so one that
    // timed out may return a little before `deadline`.
    if (absl::Now() + absl::Milliseconds(20) >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("key \"", key, "\" not set within ",
                                                      absl::FormatDuration(left), " (",
                                                      FirstLine(e.what()), ")"));
    }
    return absl::UnavailableError(
        absl::StrCat("store wait for \"", key, "\" failed: ", FirstLine(e.what())));
  }
  try {
    const std::vector<uint8_t> value = store_->get(key);
    return std::string(value.begin(), value.end());
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("store get of \"", key, "\" failed: ", FirstLine(e.what())));
  }
}

absl::StatusOr<int64_t> C10dStore::Add(const std::string& key, int64_t delta) {
  try {
    return store_->add(key, delta);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("store add to \"", key, "\" failed: ", FirstLine(e.what())));
  }
}

}  // namespace pytorch
}  // namespace loom
