// C10dStore: the c10d::Store PyTorch gives a process group (TCPStore, FileStore,
// HashStore, behind the group's PrefixStore) as a RendezvousStore, so that Loom's
// rendezvous (rendezvous.h) runs over it. c10d throws; this adapter returns Status.
//
// Example (in the backend's creator):
//   C10dStore store(c10_store);   // c10::intrusive_ptr<c10d::Store>
//   LOOM_ASSIGN_OR_RETURN(GroupConnection group, ConnectGroup(store, spec, options));
#ifndef LOOM_INTEGRATIONS_TORCH_C10D_STORE_H_
#define LOOM_INTEGRATIONS_TORCH_C10D_STORE_H_

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <cstdint>
#include <string>

#include "integrations/torch/rendezvous_store.h"

namespace loom {
namespace pytorch {

class C10dStore final : public RendezvousStore {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, absl::Time deadline) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace pytorch
}  // namespace loom

#endif  // LOOM_INTEGRATIONS_TORCH_C10D_STORE_H_
