// The transport contract suite (transport_conformance.h) over routed transports:
// inproc+inproc threads and gloo+shm processes (shm's staged path, whose sends are fed
// by their senders, the case a routed wait must keep moving), with ranks in blocks of
// two per host and alternating between two hosts.
#include "collectives/transport/routed/routed_harness.h"
#include "collectives/transport/transport_conformance.h"

namespace loom {
namespace {

INSTANTIATE_TEST_SUITE_P(
    InprocBlocks, TransportConformanceTest,
    ::testing::Combine(::testing::Values(MakeRoutedInprocHarness(BlocksOfTwo)),
                       ::testing::Values(1, 2, 3, 5)));
INSTANTIATE_TEST_SUITE_P(
    InprocAlternating, TransportConformanceTest,
    ::testing::Combine(::testing::Values(MakeRoutedInprocHarness(Alternating)),
                       ::testing::Values(2, 4)));
INSTANTIATE_TEST_SUITE_P(
    GlooShmBlocks, TransportConformanceTest,
    ::testing::Combine(::testing::Values(MakeRoutedShmGlooHarness(
                           BlocksOfTwo, ShmOptions::CopyMode::kStaged)),
                       ::testing::Values(2, 3, 4)));
INSTANTIATE_TEST_SUITE_P(
    GlooShmAlternating, TransportConformanceTest,
    ::testing::Combine(::testing::Values(MakeRoutedShmGlooHarness(
                           Alternating, ShmOptions::CopyMode::kAuto)),
                       ::testing::Values(4)));

}  // namespace
}  // namespace loom
