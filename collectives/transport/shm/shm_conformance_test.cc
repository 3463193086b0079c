// The Transport contract (transport_conformance.h) on shm ranks that are processes,
// for worlds 1 to 4, over the CMA path (where this host allows it) and the staged one.
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/transport/shm/shm_harness.h"
#include "collectives/transport/shm/shm_transport.h"
#include "collectives/transport/transport_conformance.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

constexpr int kWorlds[] = {1, 2, 3, 4};

std::vector<std::tuple<TransportHarnessFactory, int>> Params(ShmOptions::CopyMode mode) {
  std::vector<std::tuple<TransportHarnessFactory, int>> params;
  for (int world : kWorlds) params.emplace_back(MakeShmHarnessFactory(mode), world);
  return params;
}

// Where CMA is forbidden (ptrace restrictions in containers and CI) the CMA
// instantiation is empty, and CmaIsAvailable below reports the skip and the reason.
std::vector<std::tuple<TransportHarnessFactory, int>> CmaParamsIfAvailable() {
  if (!ProbeShmCma().ok()) return {};
  return Params(ShmOptions::CopyMode::kCma);
}

std::string WorldName(const ::testing::TestParamInfo<std::tuple<TransportHarnessFactory, int>>& info) {
  return absl::StrCat("world", std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(ShmCma, TransportConformanceTest, ::testing::ValuesIn(CmaParamsIfAvailable()),
                         WorldName);
INSTANTIATE_TEST_SUITE_P(ShmStaged, TransportConformanceTest,
                         ::testing::ValuesIn(Params(ShmOptions::CopyMode::kStaged)), WorldName);

TEST(ShmCmaConformance, CmaIsAvailable) {
  const absl::Status probe = ProbeShmCma();
  if (!probe.ok()) GTEST_SKIP() << "the ShmCma conformance suite did not run: " << probe;
}

}  // namespace
}  // namespace loom
