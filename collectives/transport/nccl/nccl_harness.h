// NcclHarness (testonly): a TransportHarness whose ranks are threads of this process,
// rank r on CUDA device r, joined by ConnectNcclTransport over an inproc bootstrap, so
// that the transport conformance suite (transport_conformance.h) holds the nccl
// transport to the contract of transport.h.
//
// The suite passes host buffers, and the nccl transport moves device memory only; each
// rank's body therefore sees the nccl endpoint through a staging Transport: a send
// copies its bytes to a device buffer of its own when it is posted, a receive lands in
// one and is copied into the caller's span when a Wait returns OK (so a failed receive
// leaves the span as it was). Everything else (matching, ordering, errors) is the nccl
// transport's own.
//
// Example:
//   INSTANTIATE_TEST_SUITE_P(Nccl, TransportConformanceTest,
//       ::testing::Combine(::testing::Values(TransportHarnessFactory(MakeNcclHarness)),
//                          ::testing::ValuesIn(NcclWorldsWithDevices({1, 2, 4}))));
#ifndef LOOM_COLLECTIVES_TRANSPORT_NCCL_NCCL_HARNESS_H_
#define LOOM_COLLECTIVES_TRANSPORT_NCCL_NCCL_HARNESS_H_

#include <memory>
#include <vector>

#include "collectives/transport/transport_harness.h"

namespace loom {

// MakeNcclHarness returns a harness that runs world ranks on devices 0 .. world - 1;
// every rank of a run fails with ConnectNcclTransport's error where there are fewer.
std::unique_ptr<TransportHarness> MakeNcclHarness();

// NcclWorldsWithDevices returns the worlds of `worlds` that this machine's CUDA devices
// can hold (one per rank): none on a machine without one.
std::vector<int> NcclWorldsWithDevices(const std::vector<int>& worlds);

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_NCCL_NCCL_HARNESS_H_
