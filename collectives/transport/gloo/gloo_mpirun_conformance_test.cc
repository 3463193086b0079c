// The Transport contract suite over gloo between processes that mpirun started, on
// one host or across hosts (collectives/cross_host_mpi_test.sh runs it on 2 and 3
// emulated hosts of tools/cluster). Each group's ranks connect from the address of
// the interface in LOOM_TEST_GLOO_INTERFACE (default lo) and meet in a new directory
// under LOOM_TEST_STORE_BASE (default $TEST_TMPDIR, else /tmp), which every host must
// see. Worlds: 3, and the whole job (every host).
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/transport/gloo/gloo_mpirun_harness.h"
#include "collectives/transport/transport_conformance.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value == nullptr || *value == '\0' ? fallback : value;
}

TransportHarnessFactory Gloo() {
  return MakeGlooMpirunHarnessFactory(
      EnvOr("LOOM_TEST_STORE_BASE", EnvOr("TEST_TMPDIR", "/tmp")),
      EnvOr("LOOM_TEST_GLOO_INTERFACE", "lo"));
}

// Read before MPI starts, when the cases are made: mpirun sets it in every rank.
int JobSize() { return std::atoi(EnvOr("OMPI_COMM_WORLD_SIZE", "4").c_str()); }

std::vector<int> Worlds() {
  if (JobSize() <= 3) return {JobSize()};
  return {3, JobSize()};
}

INSTANTIATE_TEST_SUITE_P(
    GlooAcrossProcesses, TransportConformanceTest,
    ::testing::Combine(::testing::Values(Gloo()), ::testing::ValuesIn(Worlds())),
    [](const auto& param_info) { return absl::StrCat("world", std::get<1>(param_info.param)); });

}  // namespace
}  // namespace loom
