// GlooStore: a RendezvousStore seen as gloo's rendezvous store, so that Loom's gloo
// transport meets its peers through the store PyTorch gave the process group (gloo's
// TCP pairs exchange their addresses there), not through a shared directory.
//
// Example:
//   GlooStore gloo_store(store, absl::Now() + absl::Minutes(5));
//   GlooOptions gloo;
//   gloo.store = &gloo_store;
//   gloo.prefix = "loom/0/gloo";
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> t, ConnectGlooTransport(gloo));
#ifndef LOOM_INTEGRATIONS_TORCH_INTERNAL_GLOO_STORE_H_
#define LOOM_INTEGRATIONS_TORCH_INTERNAL_GLOO_STORE_H_

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "integrations/torch/rendezvous_store.h"

namespace loom {
namespace pytorch_internal {

// gloo's interface throws: errors of the store become gloo::IoException with the
// store's message (Loom's gloo transport turns them back into a Status). Waits end
// at the earlier of `deadline` and the timeout gloo passes.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  GlooStore(pytorch::RendezvousStore& store, absl::Time deadline)
      : store_(store), deadline_(deadline) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  pytorch::RendezvousStore& store_;
  const absl::Time deadline_;
};

}  // namespace pytorch_internal
}  // namespace loom

#endif  // LOOM_INTEGRATIONS_TORCH_INTERNAL_GLOO_STORE_H_
