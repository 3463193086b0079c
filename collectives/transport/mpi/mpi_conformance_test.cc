// The Transport contract suite (transport_conformance.h) on MPI ranks: worlds of 1
// to 4 processes of one mpirun job (the test starts itself under mpirun, 4 ranks).
#include "collectives/transport/mpi/mpi_harness.h"
#include "collectives/transport/transport_conformance.h"

namespace loom {
namespace {

TransportHarnessFactory Default() { return MakeMpiHarnessFactory(); }

// Everything above 4 KiB through the rendezvous and in 4 KiB chunks: many pieces
// per combining receive, and the eager path for the smallest messages only.
TransportHarnessFactory SmallPieces() {
  MpiTransportOptions options;
  options.eager_bytes = 4096;
  options.chunk_bytes = 4096;
  return MakeMpiHarnessFactory(options);
}

INSTANTIATE_TEST_SUITE_P(Mpi, TransportConformanceTest,
                         ::testing::Combine(::testing::Values(Default(), SmallPieces()),
                                            ::testing::Values(1, 2, 3, 4)));

}  // namespace
}  // namespace loom
