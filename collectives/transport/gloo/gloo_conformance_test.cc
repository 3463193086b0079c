// The transport contract suite over gloo: thread ranks, each with its own gloo context
// over TCP loopback, on worlds of 1..4 ranks with a shared HashStore and the default
// eager size, and on 3 ranks with a FileStore and every send acknowledged (eager 0).
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "collectives/transport/gloo/gloo_harness.h"
#include "collectives/transport/gloo/gloo_transport.h"
#include "collectives/transport/transport_conformance.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

std::unique_ptr<TransportHarness> HashStoreHarness() { return MakeGlooHarness(); }

std::unique_ptr<TransportHarness> FileStoreUnbufferedHarness() {
  GlooOptions options;
  options.eager_bytes = 0;
  return MakeGlooHarness(GlooStoreKind::kFile, options);
}

INSTANTIATE_TEST_SUITE_P(
    Gloo, TransportConformanceTest,
    ::testing::Combine(::testing::Values(TransportHarnessFactory(HashStoreHarness)),
                       ::testing::Values(1, 2, 3, 4)),
    [](const auto& param_info) {
      return absl::StrCat("HashStore_world", std::get<1>(param_info.param));
    });

// The same paths at one odd world, to keep the test short: ranks meet through files
// and every send waits for its receiver's acknowledgement.
INSTANTIATE_TEST_SUITE_P(
    GlooFileStoreUnbuffered, TransportConformanceTest,
    ::testing::Combine(::testing::Values(TransportHarnessFactory(FileStoreUnbufferedHarness)),
                       ::testing::Values(3)),
    [](const auto& param_info) { return absl::StrCat("world", std::get<1>(param_info.param)); });

}  // namespace
}  // namespace loom
