#include "collectives/transport/gloo/gloo_harness.h"

#include <gloo/rendezvous/hash_store.h>
#include <stdlib.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom {
namespace {

class GlooHarness final : public TransportHarness {
 public:
  GlooHarness(GlooStoreKind store, const GlooOptions& options) : store_(store), options_(options) {}

  std::string name() const override {
    return store_ == GlooStoreKind::kHash ? "gloo (hash store)" : "gloo (file store)";
  }
  bool measures_paths() const override { return true; }

  std::vector<absl::Status> Run(int world,
                                const std::function<absl::Status(Transport&)>& body) override {
    gloo::rendezvous::HashStore hash_store;
    GlooOptions options = options_;
    options.size = world;
    if (store_ == GlooStoreKind::kHash) {
      options.store = &hash_store;
    } else {
      const char* tmp = std::getenv("TEST_TMPDIR");
      std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/gloo_store_XXXXXX");
      if (mkdtemp(dir.data()) == nullptr) {
        return std::vector<absl::Status>(
            world, absl::InternalError(absl::StrCat("mkdtemp(", dir, ") failed")));
      }
      options.store_dir = dir;
    }
    std::vector<absl::Status> results(world);
    std::vector<std::unique_ptr<Transport>> endpoints(world);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < world; ++rank) {
      threads.emplace_back([&, rank] {
        GlooOptions mine = options;
        mine.rank = rank;
        absl::StatusOr<std::unique_ptr<Transport>> endpoint = ConnectGlooTransport(mine);
        if (!endpoint.ok()) {
          results[rank] = endpoint.status();
          return;
        }
        endpoints[rank] = *std::move(endpoint);
        results[rank] = body(*endpoints[rank]);
      });
    }
    for (auto& thread : threads) thread.join();
    // Every rank is done before any closes, as a job's ranks end together: a rank that
    // closed early would look gone to the others.
    threads.clear();
    for (int rank = 0; rank < world; ++rank) {
      threads.emplace_back([&, rank] { endpoints[rank].reset(); });
    }
    for (auto& thread : threads) thread.join();
    return results;
  }

 private:
  const GlooStoreKind store_;
  const GlooOptions options_;
};

}  // namespace

std::unique_ptr<TransportHarness> MakeGlooHarness(GlooStoreKind store, const GlooOptions& options) {
  return std::make_unique<GlooHarness>(store, options);
}

}  // namespace loom
