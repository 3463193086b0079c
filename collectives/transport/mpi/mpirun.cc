#include "collectives/transport/mpi/mpirun.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace loom {

int ExecUnderMpirun(int ranks, int argc, char** argv) {
  char self[4096];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length <= 0) {
    std::perror("mpirun: readlink /proc/self/exe");
    return 2;
  }
  self[length] = '\0';
  const std::string np = std::to_string(ranks);
  std::vector<const char*> args = {"mpirun", "--allow-run-as-root", "--oversubscribe",
                                   "--bind-to", "none", "--mca", "btl", "self,vader",
                                   "-np", np.c_str(), self};
  for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  // Under AddressSanitizer the ranks keep every check but the leak report: Open MPI
  // 4.1 leaves thousands of allocations behind at MPI_Finalize, most from MCA
  // components it has already unloaded (so LeakSanitizer can neither name nor
  // suppress them), and the MPI transport keeps its duplicate communicators on
  // purpose (endpoint.cc). Later options override earlier ones.
  if (const char* asan = std::getenv("ASAN_OPTIONS"); asan != nullptr) {
    setenv("ASAN_OPTIONS", (std::string(asan) + ":detect_leaks=0").c_str(), 1);
  }
  // Under ThreadSanitizer the ranks keep race detection but not the lock-order
  // (deadlock) detector: Open MPI is not instrumented, and its shared-memory BTL
  // takes two locks of its own in both orders (reported inside mca_btl_vader_send
  // in the conformance suite).
  if (const char* tsan = std::getenv("TSAN_OPTIONS"); tsan != nullptr) {
    setenv("TSAN_OPTIONS", (std::string(tsan) + ":detect_deadlocks=0").c_str(), 1);
  }
  std::fflush(stdout);
  execvp("mpirun", const_cast<char* const*>(args.data()));
  std::perror("mpirun: cannot run mpirun (apt-get install openmpi-bin)");
  return 2;
}


}  // namespace loom
