// GlooHarness (testonly): a TransportHarness whose ranks are threads of this process,
// each with its own gloo context and TCP pairs over loopback, meeting through a
// rendezvous store: a HashStore shared by the threads, or a FileStore in a fresh
// directory (as separate processes or hosts would meet).
#ifndef LOOM_COLLECTIVES_TRANSPORT_GLOO_GLOO_HARNESS_H_
#define LOOM_COLLECTIVES_TRANSPORT_GLOO_GLOO_HARNESS_H_

#include <memory>

#include "collectives/transport/gloo/gloo_transport.h"
#include "collectives/transport/transport_harness.h"

namespace loom {

enum class GlooStoreKind { kHash, kFile };

// MakeGlooHarness returns a harness whose ranks connect with `options` (rank, size,
// store and store_dir are filled in per run; a kFile store lives in a new directory
// under $TEST_TMPDIR, or /tmp).
std::unique_ptr<TransportHarness> MakeGlooHarness(GlooStoreKind store = GlooStoreKind::kHash,
                                                  const GlooOptions& options = {});

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_GLOO_GLOO_HARNESS_H_
