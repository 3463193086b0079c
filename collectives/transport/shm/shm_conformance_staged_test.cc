// The Transport contract (transport_conformance.h) on shm ranks that are processes,
// worlds 1 to 4, with large messages streamed through the per-pair staging rings
// (the path taken where CMA is forbidden).
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "collectives/transport/shm/shm_harness.h"
#include "collectives/transport/shm/shm_transport.h"
#include "collectives/transport/transport_conformance.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

INSTANTIATE_TEST_SUITE_P(
    ShmStaged, TransportConformanceTest,
    ::testing::Combine(::testing::Values(MakeShmHarnessFactory(ShmOptions::CopyMode::kStaged)),
                       ::testing::Values(1, 2, 3, 4)),
    [](const ::testing::TestParamInfo<std::tuple<TransportHarnessFactory, int>>& param_info) {
      return absl::StrCat("world", std::get<1>(param_info.param));
    });

}  // namespace
}  // namespace loom
