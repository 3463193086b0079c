#include "collectives/transport/inproc/inproc_harness.h"

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "collectives/transport/inproc/inproc_transport.h"

namespace loom {
namespace {

class InprocHarness final : public TransportHarness {
 public:
  std::string name() const override { return "inproc"; }
  std::vector<absl::Status> Run(int world,
                                const std::function<absl::Status(Transport&)>& body) override {
    std::vector<absl::Status> results(world);
    absl::StatusOr<std::shared_ptr<InprocGroup>> group = InprocGroup::Create(world);
    if (!group.ok()) return std::vector<absl::Status>(world, group.status());
    std::vector<std::thread> threads;
    for (int rank = 0; rank < world; ++rank) {
      threads.emplace_back([&, rank] {
        absl::StatusOr<std::unique_ptr<Transport>> endpoint = (*group)->Endpoint(rank);
        results[rank] = endpoint.ok() ? body(**endpoint) : endpoint.status();
      });
    }
    for (auto& thread : threads) thread.join();
    return results;
  }
};

}  // namespace

std::unique_ptr<TransportHarness> MakeInprocHarness() { return std::make_unique<InprocHarness>(); }

}  // namespace loom
