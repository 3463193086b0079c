#include "collectives/group_transport.h"

#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "collectives/transport/inproc/inproc_transport.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(GroupTransportTest, RejectsBadGroups) {
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> group, InprocGroup::Create(4));
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Transport> endpoint, group->Endpoint(1));
  std::shared_ptr<Transport> parent = std::move(endpoint);
  EXPECT_THAT(GroupTransport::Create(parent, {1, 4}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("group [1,4] names rank 4, outside a inproc group of 4")));
  EXPECT_THAT(GroupTransport::Create(parent, {1, 3, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("names rank 1 twice")));
  EXPECT_THAT(GroupTransport::Create(parent, {0, 2}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("group [0,2] does not contain this rank, 1")));
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<GroupTransport> view, GroupTransport::Create(parent, {3, 1}));
  EXPECT_EQ(view->rank(), 1);
  EXPECT_EQ(view->size(), 2);
  EXPECT_EQ(view->ParentRank(0), 3);
  std::vector<int> data(1);
  EXPECT_THAT(view->Send(2, 0, AsBytes(data)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("peer 2 is outside a group of 2")));
}

// Tag ranges (transport.h): a user's range is refused while another user's overlaps it,
// on the endpoint and through every view of it; freed when the reservation goes.
TEST(TagRangesTest, OverlappingReservationsAreRefusedNamingBothUsers) {
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> group, InprocGroup::Create(2));
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Transport> endpoint, group->Endpoint(0));
  std::shared_ptr<Transport> parent = std::move(endpoint);
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<GroupTransport> view, GroupTransport::Create(parent, {0}));

  LOOM_ASSERT_OK_AND_ASSIGN(TagReservation a, parent->ReserveTags(10, 19, "user a"));
  EXPECT_TRUE(a.held());
  for (const auto& [first, last] : {std::pair<Tag, Tag>{19, 30}, {0, 10}, {12, 13}, {5, 25}}) {
    EXPECT_THAT(parent->ReserveTags(first, last, "user b"),
                StatusIs(absl::StatusCode::kAlreadyExists,
                         HasSubstr("overlap [10, 19], which user a holds")))
        << first << ".." << last;
    EXPECT_THAT(view->ReserveTags(first, last, "user c").status(),
                StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("user c: tags")));
  }
  LOOM_ASSERT_OK_AND_ASSIGN(TagReservation below, view->ReserveTags(0, 9, "user b"));
  LOOM_ASSERT_OK_AND_ASSIGN(TagReservation above, parent->ReserveTags(20, 20, "user c"));
  {
    // Moving a reservation moves the hold; only destroying the last owner frees it.
    TagReservation moved = std::move(a);
    EXPECT_FALSE(a.held());  // NOLINT: the moved-from state is the point
    EXPECT_EQ(parent->ReserveTags(10, 19, "user d").status().code(),
              absl::StatusCode::kAlreadyExists);
  }
  LOOM_EXPECT_OK(parent->ReserveTags(10, 19, "user d").status());

  EXPECT_THAT(parent->ReserveTags(5, 4, "user e").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("first > last")));
  EXPECT_THAT(parent->ReserveTags(kCommunicatorTagsBegin - 1, kCommunicatorTagsBegin, "user e")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("where the Communicators' tags begin")));
  // A reservation may outlive its endpoint.
  LOOM_ASSERT_OK_AND_ASSIGN(TagReservation last, parent->ReserveTags(100, 101, "user f"));
  view.reset();
  parent.reset();
  EXPECT_TRUE(last.held());
}

// Ranks {0,1,2,3}; groups {3,1} and {0,2} (renumbered) each pass a value around.
TEST(GroupTransportTest, ViewsRenumberAndReachTheRightProcesses) {
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> group, InprocGroup::Create(4));
  std::vector<absl::Status> results(4);
  std::vector<int> received(4, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<Transport>> endpoint = group->Endpoint(r);
      if (!endpoint.ok()) { results[r] = endpoint.status(); return; }
      const std::vector<int> members = r % 2 == 1 ? std::vector<int>{3, 1} : std::vector<int>{0, 2};
      absl::StatusOr<std::unique_ptr<GroupTransport>> view =
          GroupTransport::Create(std::shared_ptr<Transport>(std::move(*endpoint)), members);
      if (!view.ok()) { results[r] = view.status(); return; }
      Transport& t = **view;
      std::vector<int> out = {100 + r}, in = {0};
      absl::StatusOr<Request> s = t.Send(1 - t.rank(), 9, AsBytes(out));
      absl::StatusOr<Request> v = t.Recv(1 - t.rank(), 9, AsWritableBytes(in));
      if (!s.ok() || !v.ok()) { results[r] = s.ok() ? v.status() : s.status(); return; }
      results[r] = t.Wait({*s, *v}, absl::Now() + absl::Seconds(10));
      received[r] = in[0];
    });
  }
  for (auto& thread : threads) thread.join();
  for (int r = 0; r < 4; ++r) EXPECT_THAT(results[r], IsOk()) << r;
  EXPECT_THAT(received, ::testing::ElementsAre(102, 103, 100, 101));
}

}  // namespace
}  // namespace loom
