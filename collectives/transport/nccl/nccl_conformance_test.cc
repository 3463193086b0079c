// The Transport contract (transport_conformance.h) on nccl ranks that are threads, one
// CUDA device each (nccl_harness.h), on the worlds of 1, 2 and 4 ranks this machine's
// devices hold. Without a device the suite has no instances, and
// NcclConformance.HasADevice is skipped with the reason.
//
// The cases for the parts of the contract the nccl transport documents it does not
// keep (nccl_transport.h: no size check, no combining receives, stamps not compared,
// peers not told of an abort) are left out by the gtest filter in BUILD.
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/transport/nccl/nccl_harness.h"
#include "collectives/transport/transport_conformance.h"
#include "gtest/gtest.h"

namespace loom {
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TransportConformanceTest);
namespace {

std::vector<std::tuple<TransportHarnessFactory, int>> ParamsForThisMachine() {
  std::vector<std::tuple<TransportHarnessFactory, int>> params;
  for (const int world : NcclWorldsWithDevices({1, 2, 4})) {
    params.emplace_back(TransportHarnessFactory(MakeNcclHarness), world);
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(
    Nccl, TransportConformanceTest, ::testing::ValuesIn(ParamsForThisMachine()),
    [](const ::testing::TestParamInfo<std::tuple<TransportHarnessFactory, int>>& param_info) {
      return absl::StrCat("world", std::get<1>(param_info.param));
    });

TEST(NcclConformance, HasADevice) {
  if (NcclWorldsWithDevices({1}).empty()) {
    GTEST_SKIP() << "no CUDA device: the nccl conformance suite did not run";
  }
}

}  // namespace
}  // namespace loom
