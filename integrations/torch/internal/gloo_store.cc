#include "integrations/torch/internal/gloo_store.h"

#include <gloo/common/error.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "absl/time/clock.h"

namespace loom {
namespace pytorch_internal {
namespace {

[[noreturn]] void Throw(const absl::Status& status) {
  throw gloo::IoException(std::string(status.message()));
}

}  // namespace

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  const absl::Status status = store_.Set(key, std::string(data.begin(), data.end()));
  if (!status.ok()) Throw(status);
}

std::vector<char> GlooStore::get(const std::string& key) {
  absl::StatusOr<std::string> value = store_.Get(key, deadline_);
  if (!value.ok()) Throw(value.status());
  return std::vector<char>(value->begin(), value->end());
}

void GlooStore::wait(const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    const absl::StatusOr<std::string> value = store_.Get(key, deadline_);
    if (!value.ok()) Throw(value.status());
  }
}

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  const absl::Time deadline = std::min(deadline_, absl::Now() + absl::FromChrono(timeout));
  for (const std::string& key : keys) {
    const absl::StatusOr<std::string> value = store_.Get(key, deadline);
    if (!value.ok()) Throw(value.status());
  }
}

}  // namespace pytorch_internal
}  // namespace loom
