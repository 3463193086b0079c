// RendezvousStore: the key-value store a process group's ranks meet through, seen
// from Loom. PyTorch hands every process group a c10d::Store (a TCPStore or FileStore
// behind a PrefixStore of the group's name); c10d_store.h adapts it, so the
// rendezvous logic (rendezvous.h) needs no torch header.
//
// Example:
//   LOOM_RETURN_IF_ERROR(store.Set("loom/0/job", "pt1a2b-..."));
//   LOOM_ASSIGN_OR_RETURN(std::string job, store.Get("loom/0/job", deadline));
//   LOOM_ASSIGN_OR_RETURN(int64_t n, store.Add("loom/arrivals", 1));   // 1, 2, ...
#ifndef LOOM_INTEGRATIONS_TORCH_RENDEZVOUS_STORE_H_
#define LOOM_INTEGRATIONS_TORCH_RENDEZVOUS_STORE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace loom {
namespace pytorch {

class RendezvousStore {
 public:
  virtual ~RendezvousStore() = default;
  // Set stores `value` under `key`. Unavailable with the store's own text when the
  // store fails.
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // Get returns the value of `key`, waiting for it to be set until `deadline`.
  // DeadlineExceeded naming the key when it was not set by then; Unavailable when
  // the store fails.
  virtual absl::StatusOr<std::string> Get(const std::string& key, absl::Time deadline) = 0;
  // Add adds `delta` to the integer under `key` (0 when absent) and returns the sum.
  virtual absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) = 0;
};

}  // namespace pytorch
}  // namespace loom

#endif  // LOOM_INTEGRATIONS_TORCH_RENDEZVOUS_STORE_H_
