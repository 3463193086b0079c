// The Communicator over the shm transport: ranks are real processes on shared
// memory. The gloo-style suite (worlds 2..4, every algorithm of the main
// collectives, the counts of the issue, in and out of place, f32 and bf16), and a
// rank killed with SIGKILL in the middle of an all-reduce.
#include <signal.h>
#include <tuple>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectives/algorithm_registry.h"
#include "collectives/communicator.h"
#include "collectives/internal/algorithm_testing.h"
#include "collectives/internal/communicator_suite.h"
#include "collectives/internal/mismatch_suite.h"
#include "collectives/transport/shm/internal/shared_regions.h"
#include "collectives/transport/shm/shm_harness.h"
#include "core/sanitizers.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using collectives_internal::ExpectReduction;
using collectives_internal::ExpectSameBytes;
using collectives_internal::MakeInputs;
using collectives_internal::MutableViewOf;
using collectives_internal::RankInputs;
using collectives_internal::ViewOf;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;

// Wraps a harness endpoint (owned by the harness) for Communicator::Create.
std::shared_ptr<Transport> Borrow(Transport& transport) {
  return std::shared_ptr<Transport>(&transport, [](Transport*) {});
}

// One process group per (world, collective): the body runs every algorithm and
// count in turn, so the suite forks a few dozen processes, not thousands.
class ShmCommunicatorTest : public ::testing::TestWithParam<std::tuple<int, CollectiveKind>> {};

TEST_P(ShmCommunicatorTest, EveryAlgorithmAndCountMatchesTheReference) {
  // Named copies, not a structured binding: clang 14 cannot capture those in lambdas.
  const auto world = std::get<0>(GetParam());
  const auto kind = std::get<1>(GetParam());
  ShmHarness harness;
  const std::vector<absl::Status> results = harness.Run(world, [&](Transport& t) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, Communicator::Create(Borrow(t)));
    return collectives_internal::CheckEveryAlgorithmAndCount(*comm, kind);
  });
  for (int r = 0; r < world; ++r) EXPECT_THAT(results[r], IsOk()) << "rank " << r;
  EXPECT_THAT(harness.last_leftovers(), ::testing::IsEmpty());
}

INSTANTIATE_TEST_SUITE_P(
    Worlds, ShmCommunicatorTest,
    ::testing::Combine(::testing::Values(2, 3, 4),
                       ::testing::Values(CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter,
                                         CollectiveKind::kAllGather, CollectiveKind::kBroadcast,
                                         CollectiveKind::kAllToAll)),
    [](const auto& param_info) {
      return absl::StrCat(CollectiveKindName(std::get<1>(param_info.param)), "_world",
                          std::get<0>(param_info.param));
    });

// Buffers from AllocateBuffer over shm are SharedBuffers (zero_copy): peers map them,
// and the large messages out of them arrive as mapped receives (or, where the kernel
// refuses pidfd_getfd, as counted CMA fallbacks). Mixed: every other rank passes
// ordinary memory, and everything still matches. A split communicator allocates from
// the same endpoint.
// Every pair of 14 calls of equal size on 2 processes (a fresh pair each): both
// fail at once (well under a second; the deadline is 60 s), each naming both calls.
TEST(ShmMismatchTest, EveryMismatchFailsAtOnceOnBothRanksNamingBothCalls) {
  ShmHarness harness;
  EXPECT_THAT(collectives_internal::CheckEveryMismatchFailsAtOnce(harness), IsOk());
  EXPECT_THAT(harness.last_leftovers(), ::testing::IsEmpty());
}

TEST(ShmAllocatedBufferTest, CollectivesOverAllocatedBuffersAreMappedAndCorrect) {
  // A sanitizer build checks the same paths at 3 ranks only (mixed there still has
  // allocated and ordinary senders on every receive).
  for (int world : kUnderSanitizer ? std::vector<int>{3} : std::vector<int>{2, 3}) {
    for (bool mixed : {false, true}) {
      ShmHarness harness;
      const std::vector<absl::Status> results = harness.Run(world, [&](Transport& t) -> absl::Status {
        LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, Communicator::Create(Borrow(t)));
        const shm_internal::MappedReceiveCounts before = shm_internal::MappedReceives();
        LOOM_RETURN_IF_ERROR(collectives_internal::CheckAllocatedBuffers(*comm, mixed, true));
        const shm_internal::MappedReceiveCounts after = shm_internal::MappedReceives();
        const uint64_t mapped = after.mapped + after.fell_back - before.mapped - before.fell_back;
        // A rank whose peers send out of allocated buffers receives mapped messages.
        const bool peers_allocate = !mixed || world > 2 || t.rank() % 2 == 1;
        if (peers_allocate && mapped == 0) {
          return absl::InternalError(absl::StrCat("rank ", t.rank(), " received nothing mapped"));
        }
        std::vector<int> everyone(world);
        for (int r = 0; r < world; ++r) everyone[r] = r;
        LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> split, comm->Split(everyone));
        LOOM_ASSIGN_OR_RETURN(CommBuffer buffer, split->AllocateBuffer(1 << 20));
        if (!buffer.zero_copy()) return absl::InternalError("a split's buffer is not zero-copy");
        return absl::OkStatus();
      });
      for (int r = 0; r < world; ++r) {
        EXPECT_THAT(results[r], IsOk()) << "world " << world << " mixed " << mixed << " rank " << r;
      }
      EXPECT_THAT(harness.last_leftovers(), ::testing::IsEmpty());
    }
  }
}

// Rank 1 sends out of an allocated buffer, which rank 0 maps, then dies (SIGKILL)
// while rank 0 waits on a second message from it: rank 0 gets an error naming rank 1,
// not a fault, and the data it already received from the mapping is intact.
TEST(ShmAllocatedBufferTest, APeerDyingWhileItsBufferIsMappedIsAnError) {
  ShmHarness harness;
  const std::vector<absl::Status> results = harness.Run(2, [&](Transport& t) -> absl::Status {
    CommunicatorOptions options;
    options.timeout = absl::Seconds(10);
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, Communicator::Create(Borrow(t), options));
    const size_t count = 1 << 20;
    LOOM_ASSIGN_OR_RETURN(CommBuffer buffer, comm->AllocateBuffer(count * sizeof(float)));
    absl::Span<float> values = buffer.As<float>();
    if (t.rank() == 1) {
      for (size_t i = 0; i < count; ++i) values[i] = static_cast<float>(i % 1000);
      LOOM_RETURN_IF_ERROR(comm->Send(ConstBufferView::Of(absl::Span<const float>(values)), 0));
      kill(getpid(), SIGKILL);
    }
    LOOM_RETURN_IF_ERROR(comm->Recv(BufferView::Of(values), 1));
    for (size_t i = 0; i < count; ++i) {
      if (values[i] != static_cast<float>(i % 1000)) {
        return absl::InternalError(absl::StrCat("element ", i, " is ", values[i]));
      }
    }
    const absl::Status second = comm->Recv(BufferView::Of(values.first(16)), 1);
    if (second.ok()) return absl::InternalError("a receive from a dead peer succeeded");
    if (!absl::StrContains(second.message(), "rank 1")) {
      return absl::InternalError(absl::StrCat("the error does not name rank 1: ", second.ToString()));
    }
    return absl::OkStatus();
  });
  EXPECT_THAT(results[0], IsOk());
  EXPECT_THAT(results[1], Not(IsOk()));  // killed
  EXPECT_THAT(harness.last_leftovers(), ::testing::IsEmpty());
}

// Rank 1 is SIGKILLed by a thread of its own while it loops over all-reduces, so it
// dies at an arbitrary point inside one. Ranks 0 and 2 must return an error naming
// rank 1 within their timeout plus a small slack, and no segment may be left.
TEST(ShmFailureTest, KillNineMidAllReduceIsReportedNamingTheRank) {
  const absl::Duration timeout = absl::Seconds(3);
  ShmHarness harness;
  const absl::Time start = absl::Now();
  const std::vector<absl::Status> results = harness.Run(3, [&](Transport& t) -> absl::Status {
    CommunicatorOptions options;
    options.timeout = timeout;
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, Communicator::Create(Borrow(t), options));
    std::vector<float> data(1 << 18, 1.0f);
    if (comm->rank() == 1) {
      std::thread([] {
        absl::SleepFor(absl::Milliseconds(150));
        kill(getpid(), SIGKILL);
      }).detach();
    }
    for (int i = 0;; ++i) {
      const absl::Time call_start = absl::Now();
      const absl::Status status = comm->AllReduce(absl::MakeSpan(data), ReduceOp::kMax);
      if (!status.ok()) {
        const absl::Duration took = absl::Now() - call_start;
        if (took > timeout + absl::Seconds(1)) {
          return absl::InternalError(absl::StrCat("failure took ", absl::FormatDuration(took), ": ",
                                                  status.message()));
        }
        return status;
      }
      if (absl::Now() - call_start > absl::Seconds(60)) return absl::InternalError("no failure");
    }
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_THAT(results[1], StatusIs(absl::StatusCode::kUnavailable, HasSubstr("signal 9")));
  for (int r : {0, 2}) {
    EXPECT_THAT(results[r].code(), AnyOf(absl::StatusCode::kUnavailable,
                                         absl::StatusCode::kDeadlineExceeded)) << results[r];
    EXPECT_THAT(results[r].message(), HasSubstr("rank 1")) << r;
    EXPECT_THAT(results[r].message(), HasSubstr("flight recorder")) << r;
  }
  EXPECT_THAT(harness.last_leftovers(), ::testing::IsEmpty());
}

}  // namespace
}  // namespace loom
