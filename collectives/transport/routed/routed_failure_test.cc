// A routed endpoint's peer dies (SIGKILL, real processes, 2 hosts x 2 ranks over
// gloo+shm): its host mate learns it through shm, the ranks of the other host through
// gloo, each within seconds and naming it, whatever their requests' deadlines; a
// wait naming requests of both transports fails the same way.
#include <signal.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/transport/routed/routed_harness.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::ContainsRegex;

TEST(RoutedFailureTest, ADeadRankIsNamedOnItsHostAndAcross) {
  constexpr int kDead = 3;  // on host 1 with rank 2
  const std::vector<absl::Status> results =
      MakeRoutedShmGlooHarness(BlocksOfTwo, ShmOptions::CopyMode::kAuto)()->Run(
          4, [](Transport& t) -> absl::Status {
            // Everyone connected and talking first: a ring step over both transports.
            const int next = (t.rank() + 1) % t.size();
            const int prev = (t.rank() + t.size() - 1) % t.size();
            std::vector<int> out = {t.rank()}, in(1, -1);
            LOOM_ASSIGN_OR_RETURN(Request s, t.Send(next, 1, AsBytes(out)));
            LOOM_ASSIGN_OR_RETURN(Request r, t.Recv(prev, 1, AsWritableBytes(in)));
            LOOM_RETURN_IF_ERROR(t.Wait({s, r}, absl::Now() + absl::Seconds(30)));
            // Then each tells the rank it heard from: a buffered gloo send may still be
            // in the sender's process when it completes, so rank 3 dies only once rank
            // 0 says it got rank 3's message (its own word to rank 2 goes over shm,
            // where a completed send is in shared memory).
            std::vector<int> ack(1);
            LOOM_ASSIGN_OR_RETURN(Request told, t.Send(prev, 4, AsBytes(out)));
            LOOM_ASSIGN_OR_RETURN(Request heard, t.Recv(next, 4, AsWritableBytes(ack)));
            LOOM_RETURN_IF_ERROR(t.Wait({told, heard}, absl::Now() + absl::Seconds(30)));
            if (t.rank() == kDead) raise(SIGKILL);
            // Each waits on the dead rank (through one transport) and on a live rank
            // (through the other) that does send: ranks 0 and 1 hear from the dead
            // one over gloo and from each other over shm, rank 2 over shm and from
            // rank 0 over gloo. The live exchanges are posted first: a receive from
            // a rank already known dead fails at once, when it is posted.
            std::vector<int> from_dead(1), from_live(1);
            const int live = t.rank() == 1 ? 0 : (t.rank() == 0 ? 1 : 0);
            std::vector<Request> requests;
            LOOM_ASSIGN_OR_RETURN(Request b, t.Recv(live, 3, AsWritableBytes(from_live)));
            requests.push_back(b);
            const std::vector<int> tell = t.rank() == 0   ? std::vector<int>{1, 2}
                                          : t.rank() == 1 ? std::vector<int>{0}
                                                          : std::vector<int>{};
            for (int to : tell) {
              LOOM_ASSIGN_OR_RETURN(Request send, t.Send(to, 3, AsBytes(out)));
              requests.push_back(send);
            }
            const absl::StatusOr<Request> a = t.Recv(kDead, 2, AsWritableBytes(from_dead));
            if (a.ok()) requests.push_back(*a);
            const absl::Time start = absl::Now();
            const absl::Status status = t.Wait(requests, start + absl::Seconds(60));
            const absl::Duration took = absl::Now() - start;
            if (took > absl::Seconds(20)) {
              return absl::InternalError(absl::StrCat("the death was seen after ",
                                                      absl::FormatDuration(took), ": ",
                                                      status.ToString()));
            }
            if (!a.ok()) {
              // Known at the post: the live exchanges must still have gone through.
              if (!status.ok()) return absl::InternalError(status.ToString());
              return a.status();
            }
            return status;
          });
  ASSERT_EQ(results.size(), 4u);
  EXPECT_THAT(results[kDead], StatusIs(absl::StatusCode::kUnavailable,
                                       ::testing::HasSubstr("signal 9")));
  for (int rank = 0; rank < 3; ++rank) {
    // shm (rank 2, on the dead rank's host): "world rank 3 (pid P on H) died"; gloo:
    // "connection to world rank 3 (...) lost".
    EXPECT_THAT(results[rank],
                StatusIs(absl::StatusCode::kUnavailable, ContainsRegex("rank 3 \\(pid [0-9]+")))
        << "rank " << rank;
  }
}

}  // namespace
}  // namespace loom
