// RunInprocRanks: a test's data-parallel group on threads. It makes one inproc
// group of `size` ranks, runs body(rank, comm) on a thread per rank with a
// Communicator over that rank's endpoint (made with `options`), and joins them.
// For tests of libraries that drive a Communicator (zero3's engine and store).
//
// Example:
//   RunInprocRanks(4, [](int rank, Communicator& comm) {
//     ...each rank's part, with gtest assertions...
//   });
#ifndef LOOM_COLLECTIVES_INPROC_RANKS_TESTING_H_
#define LOOM_COLLECTIVES_INPROC_RANKS_TESTING_H_

#include <functional>

#include "collectives/communicator.h"

namespace loom {

// The options RunInprocRanks uses unless told otherwise: a 60 s timeout, so that a
// hung test fails instead of waiting for Bazel's.
CommunicatorOptions InprocTestOptions();

void RunInprocRanks(int size, const std::function<void(int rank, Communicator& comm)>& body,
                    const CommunicatorOptions& options = InprocTestOptions());

}  // namespace loom

#endif  // LOOM_COLLECTIVES_INPROC_RANKS_TESTING_H_
