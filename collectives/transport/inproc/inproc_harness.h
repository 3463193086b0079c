// InprocHarness (testonly): a TransportHarness whose ranks are threads of this
// process over a fresh InprocGroup; the harness of the transport conformance suite
// and of every algorithm and communicator test.
#ifndef LOOM_COLLECTIVES_TRANSPORT_INPROC_INPROC_HARNESS_H_
#define LOOM_COLLECTIVES_TRANSPORT_INPROC_INPROC_HARNESS_H_

#include <memory>

#include "collectives/transport/transport_harness.h"

namespace loom {

// MakeInprocHarness returns a harness that runs each rank's body on its own thread.
std::unique_ptr<TransportHarness> MakeInprocHarness();

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_INPROC_INPROC_HARNESS_H_
