// TransportHarness (testonly): runs one function per rank of a fresh group, the way
// a backend's ranks really run (threads for inproc, processes for shm), so one test
// suite (transport_conformance.h) checks every backend against the contract of
// transport.h.
#ifndef LOOM_COLLECTIVES_TRANSPORT_TRANSPORT_HARNESS_H_
#define LOOM_COLLECTIVES_TRANSPORT_TRANSPORT_HARNESS_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "collectives/transport/transport.h"

namespace loom {

class TransportHarness {
 public:
  virtual ~TransportHarness() = default;
  virtual std::string name() const = 0;
  // Whether the transport's RecvCombine delivers (a transport over device memory,
  // NCCL's, cannot run a host combiner on it and says Unimplemented instead).
  virtual bool combines() const { return true; }
  // Whether the transport measures the paths to its peers (Transport::EstimatePath:
  // MPI's round trips and rates); the others report zeros.
  virtual bool measures_paths() const { return false; }
  // Whether rank `from` of a group of `world` measures its path to `to`: all or none
  // for one backend, but a routed transport measures only the far ones.
  virtual bool measures_path(int from, int to, int world) const {
    (void)from;
    (void)to;
    (void)world;
    return measures_paths();
  }
  // Run starts `world` ranks, calls `body` with each rank's endpoint concurrently,
  // and returns every rank's result in rank order.
  virtual std::vector<absl::Status> Run(int world,
                                        const std::function<absl::Status(Transport&)>& body) = 0;
};

// A factory, so that each test gets a harness of its own.
using TransportHarnessFactory = std::function<std::unique_ptr<TransportHarness>()>;

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_TRANSPORT_HARNESS_H_
