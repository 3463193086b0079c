#include "collectives/inproc_ranks_testing.h"

#include <cstdlib>
#include <iostream>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "collectives/transport/inproc/inproc_transport.h"

namespace loom {

CommunicatorOptions InprocTestOptions() {
  CommunicatorOptions options;
  options.timeout = absl::Seconds(60);
  return options;
}

void RunInprocRanks(int size, const std::function<void(int rank, Communicator& comm)>& body,
                    const CommunicatorOptions& options) {
  // A test helper: a setup failure is the test's bug, so it stops the test loudly.
  absl::StatusOr<std::shared_ptr<InprocGroup>> group = InprocGroup::Create(size);
  if (!group.ok()) {
    std::cerr << "RunInprocRanks: " << group.status() << "\n";
    std::abort();
  }
  std::vector<std::unique_ptr<Transport>> endpoints;
  for (int r = 0; r < size; ++r) {
    absl::StatusOr<std::unique_ptr<Transport>> endpoint = (*group)->Endpoint(r);
    if (!endpoint.ok()) {
      std::cerr << "RunInprocRanks: rank " << r << ": " << endpoint.status() << "\n";
      std::abort();
    }
    endpoints.push_back(std::move(*endpoint));
  }
  // Each rank makes its Communicator on its own thread, as a real rank would.
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(
          std::shared_ptr<Transport>(std::move(endpoints[static_cast<size_t>(r)])), options);
      if (!comm.ok()) {
        std::cerr << "RunInprocRanks: rank " << r << ": " << comm.status() << "\n";
        std::abort();
      }
      body(r, **comm);
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace loom
