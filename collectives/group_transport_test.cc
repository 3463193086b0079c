#include "collectives/group_transport.h"

#include <memory>
#include <thread>
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
