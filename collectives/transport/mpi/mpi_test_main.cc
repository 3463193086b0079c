// main() of the MPI tests (in place of gtest_main). Run by `bazel test`, outside any
// MPI job, it starts itself again under mpirun with --mpi_ranks processes (default
// 4) on the shared-memory BTL, and returns mpirun's exit status; under mpirun it
// starts MPI, runs the tests in every process, and only rank 0 prints them and
// writes the XML report (every rank's expectations see the same shared results).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "collectives/transport/mpi/mpi_transport.h"
#include "collectives/transport/mpi/mpirun.h"
#include "gtest/gtest.h"


int main(int argc, char** argv) {
  int ranks = 4;
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--mpi_ranks=", 12) == 0) {
      ranks = std::atoi(argv[i] + 12);
    } else {
      rest.push_back(argv[i]);
    }
  }
  if (!loom::LaunchedByMpirun()) return loom::RunUnderMpirun(ranks, argc, argv);

  int rest_count = static_cast<int>(rest.size());
  char** rest_argv = rest.data();
  const char* world_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const bool leader = world_rank == nullptr || std::strcmp(world_rank, "0") == 0;
  if (!leader) {
    // One report: the other ranks neither write the XML nor touch the exit marker.
    unsetenv("XML_OUTPUT_FILE");
    unsetenv("TEST_PREMATURE_EXIT_FILE");
    unsetenv("GTEST_OUTPUT");
  }
  ::testing::InitGoogleTest(&rest_count, rest_argv);
  if (!leader) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  auto session = loom::MpiSession::Start(&rest_count, &rest_argv);
  if (!session.ok()) {
    std::fprintf(stderr, "mpi test: %s\n", std::string(session.status().message()).c_str());
    return 2;
  }
  const int result = RUN_ALL_TESTS();
  session->reset();
  return result;
}
