// The Transport contract (transport_conformance.h) on shm ranks that are processes,
// worlds 1 to 4, with large messages pulled by CMA (process_vm_readv). Where this host
// forbids CMA (ptrace restrictions in containers and CI) the suite has no instances,
// and ShmCmaConformance.CmaIsAvailable is skipped with the reason.
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/transport/shm/shm_harness.h"
#include "collectives/transport/shm/shm_transport.h"
#include "collectives/transport/transport_conformance.h"
#include "gtest/gtest.h"

namespace loom {
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(TransportConformanceTest);
namespace {

std::vector<std::tuple<TransportHarnessFactory, int>> ParamsIfCmaWorks() {
  if (!ProbeShmCma().ok()) return {};
  std::vector<std::tuple<TransportHarnessFactory, int>> params;
  for (int world : {1, 2, 3, 4}) {
    params.emplace_back(MakeShmHarnessFactory(ShmOptions::CopyMode::kCma), world);
  }
  return params;
}

INSTANTIATE_TEST_SUITE_P(
    ShmCma, TransportConformanceTest, ::testing::ValuesIn(ParamsIfCmaWorks()),
    [](const ::testing::TestParamInfo<std::tuple<TransportHarnessFactory, int>>& param_info) {
      return absl::StrCat("world", std::get<1>(param_info.param));
    });

TEST(ShmCmaConformance, CmaIsAvailable) {
  const absl::Status probe = ProbeShmCma();
  if (!probe.ok()) GTEST_SKIP() << "the ShmCma conformance suite did not run: " << probe;
}

}  // namespace
}  // namespace loom
