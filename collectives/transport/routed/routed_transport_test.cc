// MakeRoutedTransport's refusals, and where a routed endpoint's messages go: to the
// ranks of its host through the near transport, to the others through the far one.
#include "collectives/transport/routed/routed_transport.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

absl::Time Soon() { return absl::Now() + absl::Seconds(30); }

std::unique_ptr<Transport> EndpointOf(const std::shared_ptr<InprocGroup>& group, int rank) {
  absl::StatusOr<std::unique_ptr<Transport>> endpoint = group->Endpoint(rank);
  EXPECT_THAT(endpoint.status(), IsOk());
  return endpoint.ok() ? *std::move(endpoint) : nullptr;
}

// Routed: MakeRoutedTransport over far rank `far_rank` of a fresh group of 4 and near
// rank `near_rank` of a fresh group of 2.
absl::Status Routed(int far_rank, int near_rank, std::vector<int> near_ranks) {
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<InprocGroup> far, InprocGroup::Create(4));
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<InprocGroup> near, InprocGroup::Create(2));
  return MakeRoutedTransport(EndpointOf(far, far_rank), EndpointOf(near, near_rank),
                             std::move(near_ranks))
      .status();
}

TEST(MakeRoutedTransportTest, RefusesLayoutsThatDoNotFitNamingThem) {
  EXPECT_THAT(Routed(0, 0, {0, 1}), IsOk());
  // Three near ranks named for a near group of 2.
  EXPECT_THAT(Routed(0, 0, {0, 1, 2}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("3 near ranks (0,1,2)")));
  EXPECT_THAT(Routed(1, 1, {1, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("named twice")));
  EXPECT_THAT(Routed(2, 0, {0, 7}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("group rank 7")));
  // Near rank 0 says it is group rank 2, but the far endpoint is group rank 3.
  EXPECT_THAT(Routed(3, 0, {2, 3}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("near rank 0 is group rank 2, but this endpoint is group rank 3")));
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> near, InprocGroup::Create(1));
  EXPECT_THAT(MakeRoutedTransport(nullptr, EndpointOf(near, 0), {0}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("missing")));
}

// Ranks 0 and 1 share a host, 2 is elsewhere. Rank 0 sends to 1 and to 2 through its
// routed endpoint; 1 and 2 receive on the raw transports, so a message that took the
// wrong one would never arrive.
TEST(RoutedTransportTest, SameHostPeersGoThroughTheNearTransport) {
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> far, InprocGroup::Create(3));
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> near, InprocGroup::Create(2));
  LOOM_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Transport> routed,
      MakeRoutedTransport(EndpointOf(far, 0), EndpointOf(near, 0), {0, 1}));
  EXPECT_EQ(routed->name(), "inproc+inproc");
  EXPECT_EQ(routed->rank(), 0);
  EXPECT_EQ(routed->size(), 3);
  std::unique_ptr<Transport> near_of_1 = EndpointOf(near, 1);
  std::unique_ptr<Transport> far_of_2 = EndpointOf(far, 2);
  std::vector<int> got_1(1, -1), got_2(1, -1);
  absl::Status status_1, status_2;
  std::thread rank_1([&] {
    status_1 = [&]() -> absl::Status {
      LOOM_ASSIGN_OR_RETURN(Request r, near_of_1->Recv(0, 9, AsWritableBytes(got_1)));
      return near_of_1->Wait({r}, Soon());
    }();
  });
  std::thread rank_2([&] {
    status_2 = [&]() -> absl::Status {
      LOOM_ASSIGN_OR_RETURN(Request r, far_of_2->Recv(0, 9, AsWritableBytes(got_2)));
      return far_of_2->Wait({r}, Soon());
    }();
  });
  const std::vector<int> to_1 = {11}, to_2 = {22};
  LOOM_ASSERT_OK_AND_ASSIGN(Request a, routed->Send(1, 9, AsBytes(to_1)));
  LOOM_ASSERT_OK_AND_ASSIGN(Request b, routed->Send(2, 9, AsBytes(to_2)));
  EXPECT_THAT(routed->Wait({a, b}, Soon()), IsOk());
  rank_1.join();
  rank_2.join();
  EXPECT_THAT(status_1, IsOk());
  EXPECT_THAT(status_2, IsOk());
  EXPECT_EQ(got_1[0], 11);
  EXPECT_EQ(got_2[0], 22);
  EXPECT_THAT(routed->Send(3, 9, AsBytes(to_1)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("peer 3")));
}

// A Wait naming only far requests still moves the near transport: it is woken by the
// far request's finish, not by its deadline.
TEST(RoutedTransportTest, AFarFinishWakesAWaitAtOnce) {
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> far, InprocGroup::Create(2));
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> near, InprocGroup::Create(1));
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Transport> routed,
                       MakeRoutedTransport(EndpointOf(far, 0), EndpointOf(near, 0), {0}));
  std::unique_ptr<Transport> far_of_1 = EndpointOf(far, 1);
  std::vector<int> got(1, -1);
  LOOM_ASSERT_OK_AND_ASSIGN(Request r, routed->Recv(1, 4, AsWritableBytes(got)));
  std::thread sender([&] {
    absl::SleepFor(absl::Milliseconds(50));  // Most likely asleep by now.
    const std::vector<int> value = {5};
    absl::StatusOr<Request> s = far_of_1->Send(0, 4, AsBytes(value));
    if (s.ok()) far_of_1->Wait({*s}, Soon()).IgnoreError();
  });
  const absl::Time start = absl::Now();
  EXPECT_THAT(routed->Wait({r}, start + absl::Seconds(60)), IsOk());
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  sender.join();
  EXPECT_EQ(got[0], 5);
}

// A TryWait that returns false (a near receive still pending) after two far receives
// finished, one well and one with a size mismatch: a Wait on each afterwards reports
// each one's own status.
TEST(RoutedTransportTest, RequestsFinishedInATryWaitKeepTheirOwnStatus) {
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> far, InprocGroup::Create(3));
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> near, InprocGroup::Create(2));
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Transport> routed,
                            MakeRoutedTransport(EndpointOf(far, 0), EndpointOf(near, 0), {0, 1}));
  std::unique_ptr<Transport> far_of_2 = EndpointOf(far, 2);
  std::unique_ptr<Transport> near_of_1 = EndpointOf(near, 1);
  std::vector<int> good(1, -1), bad(2, -1), never(1, -1);
  LOOM_ASSERT_OK_AND_ASSIGN(Request x, routed->Recv(2, 5, AsWritableBytes(good)));
  LOOM_ASSERT_OK_AND_ASSIGN(Request y, routed->Recv(2, 6, AsWritableBytes(bad)));
  LOOM_ASSERT_OK_AND_ASSIGN(Request z, routed->Recv(1, 7, AsWritableBytes(never)));
  const std::vector<int> one = {42}, three = {1, 2, 3};
  LOOM_ASSERT_OK_AND_ASSIGN(Request s1, far_of_2->Send(0, 5, AsBytes(one)));
  LOOM_ASSERT_OK_AND_ASSIGN(Request s2, far_of_2->Send(0, 6, AsBytes(three)));  // 12 bytes into 8
  EXPECT_THAT(far_of_2->Wait({s1}, Soon()), IsOk());
  EXPECT_THAT(far_of_2->Wait({s2}, Soon()), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                     HasSubstr("12 bytes")));
  LOOM_ASSERT_OK_AND_ASSIGN(bool all, routed->TryWait({x, y, z}, absl::Now() + absl::Milliseconds(50)));
  EXPECT_FALSE(all);
  EXPECT_THAT(routed->Wait({x}, Soon()), IsOk());
  EXPECT_EQ(good[0], 42);
  EXPECT_THAT(routed->Wait({y}, Soon()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("12 bytes")));
  EXPECT_THAT(routed->Wait({z}, absl::InfinitePast()),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("rank 1")));
  (void)near_of_1;
}

}  // namespace
}  // namespace loom
