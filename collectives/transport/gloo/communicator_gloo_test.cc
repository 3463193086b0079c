// The Communicator over the gloo transport: ranks are threads of this process with
// TCP pairs (loopback) between them. The gloo-style suite shared with the shm and MPI
// backends (collectives/internal/communicator_suite.h: worlds 2..4, every algorithm of
// the main collectives, counts 0, 1, 3, n-1, 1000, 65537, in and out of place, f32 and
// bf16, seeded distinct inputs checked against the reference), and the refusal of
// Algorithm::kNative, which this backend does not offer.
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/collective_kind.h"
#include "collectives/communicator.h"
#include "collectives/internal/communicator_suite.h"
#include "collectives/transport/gloo/gloo_harness.h"
#include "core/sanitizers.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

// Wraps a harness endpoint (owned by the harness) for Communicator::Create.
std::shared_ptr<Transport> Borrow(Transport& transport) {
  return std::shared_ptr<Transport>(&transport, [](Transport*) {});
}

// One group per (world, collective): the body runs every algorithm and count in turn.
class GlooCommunicatorTest : public ::testing::TestWithParam<std::tuple<int, CollectiveKind>> {};

TEST_P(GlooCommunicatorTest, EveryAlgorithmAndCountMatchesTheReference) {
  // Named copies, not a structured binding: clang 14 cannot capture those in lambdas.
  const auto world = std::get<0>(GetParam());
  const auto kind = std::get<1>(GetParam());
  const std::vector<absl::Status> results =
      MakeGlooHarness()->Run(world, [&](Transport& t) -> absl::Status {
        LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, Communicator::Create(Borrow(t)));
        return collectives_internal::CheckEveryAlgorithmAndCount(*comm, kind);
      });
  for (int r = 0; r < world; ++r) EXPECT_THAT(results[r], IsOk()) << "rank " << r;
}

std::vector<std::tuple<int, CollectiveKind>> Cases() {
  std::vector<std::tuple<int, CollectiveKind>> cases;
  for (CollectiveKind kind : collectives_internal::SuiteKinds()) {
    for (int world : {2, 3, 4}) cases.emplace_back(world, kind);
  }
  return cases;
}

std::string CaseName(const ::testing::TestParamInfo<std::tuple<int, CollectiveKind>>& info) {
  return absl::StrCat(CollectiveKindName(std::get<1>(info.param)), "_world",
                      std::get<0>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Worlds, GlooCommunicatorTest, ::testing::ValuesIn(Cases()), CaseName);

// Buffers from AllocateBuffer over gloo: ordinary memory (zero_copy false), on every
// rank and on every other rank.
TEST(GlooAllocatedBufferTest, CollectivesOverAllocatedBuffersMatchTheReference) {
  // Without zero copy both runs take the same paths; a sanitizer build runs the mixed
  // one only.
  for (bool mixed : kUnderSanitizer ? std::vector<bool>{true} : std::vector<bool>{false, true}) {
    const std::vector<absl::Status> results =
        MakeGlooHarness()->Run(3, [&](Transport& t) -> absl::Status {
          LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, Communicator::Create(Borrow(t)));
          return collectives_internal::CheckAllocatedBuffers(*comm, mixed, false);
        });
    for (int r = 0; r < 3; ++r) EXPECT_THAT(results[r], IsOk()) << "mixed " << mixed << " rank " << r;
  }
}

// The gloo transport offers no native collectives: Algorithm::kNative is refused by
// name on every rank.
TEST(GlooNativeTest, IsRefused) {
  const std::vector<absl::Status> results =
      MakeGlooHarness()->Run(2, [](Transport& t) -> absl::Status {
        if (t.native() != nullptr) return absl::InternalError("native() is not null");
        LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, Communicator::Create(Borrow(t)));
        std::vector<float> data = {1.0f};
        CallOptions call;
        call.algorithm = Algorithm::kNative;
        return comm->AllReduce(absl::MakeSpan(data), ReduceOp::kSum, call);
      });
  for (int r = 0; r < 2; ++r) {
    EXPECT_THAT(results[r], StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("native")))
        << "rank " << r;
  }
}

}  // namespace
}  // namespace loom
