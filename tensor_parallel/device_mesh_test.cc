#include "tensor_parallel/device_mesh.h"

#include <memory>
#include <vector>

#include "collectives/transport/inproc/inproc_transport.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor_parallel/internal/mesh_threads_testing.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using tensor_parallel_internal::RunOnMesh;

// dp=2 x tp=3: rank r has coordinates (r / 3, r % 3) and one communicator per
// dimension whose rank is that coordinate; an all-gather over each shows its peers.
TEST(DeviceMeshTest, CommunicatorPerDimensionRankedByCoordinate) {
  LOOM_ASSERT_OK_AND_ASSIGN(Mesh mesh, Mesh::Create({{"dp", 2}, {"tp", 3}}));
  std::vector<std::vector<float>> tp_peers(6), dp_peers(6);
  std::vector<absl::Status> statuses = RunOnMesh(mesh, [&](const DeviceMesh& dm) {
    const size_t r = static_cast<size_t>(dm.rank());
    EXPECT_EQ(dm.ndim(), 2);
    EXPECT_EQ(dm.mesh(), mesh);
    EXPECT_EQ(dm.coordinate(0), static_cast<int>(r) / 3);
    EXPECT_EQ(dm.coordinate(1), static_cast<int>(r) % 3);
    EXPECT_EQ(dm.size(0), 2);
    EXPECT_EQ(dm.size(1), 3);
    EXPECT_EQ(dm.comm(0).rank(), dm.coordinate(0));
    EXPECT_EQ(dm.comm(1).rank(), dm.coordinate(1));
    const float me = static_cast<float>(r);
    tp_peers[r].resize(3);
    dp_peers[r].resize(2);
    absl::Status s = dm.comm(1).AllGather(ConstBufferView::Of(absl::MakeConstSpan(&me, 1)),
                                          BufferView::Of(absl::MakeSpan(tp_peers[r])));
    if (!s.ok()) return s;
    return dm.comm(0).AllGather(ConstBufferView::Of(absl::MakeConstSpan(&me, 1)),
                                BufferView::Of(absl::MakeSpan(dp_peers[r])));
  });
  for (const absl::Status& s : statuses) LOOM_ASSERT_OK(s);
  EXPECT_THAT(tp_peers[4], ::testing::ElementsAre(3, 4, 5));
  EXPECT_THAT(dp_peers[4], ::testing::ElementsAre(1, 4));
  EXPECT_THAT(tp_peers[0], ::testing::ElementsAre(0, 1, 2));
  EXPECT_THAT(dp_peers[2], ::testing::ElementsAre(2, 5));
}

TEST(DeviceMeshTest, WorldSizeMismatchIsInvalidArgument) {
  LOOM_ASSERT_OK_AND_ASSIGN(std::shared_ptr<InprocGroup> group, InprocGroup::Create(1));
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Transport> endpoint, group->Endpoint(0));
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> world,
                            Communicator::Create(std::move(endpoint)));
  LOOM_ASSERT_OK_AND_ASSIGN(Mesh mesh, Mesh::Create({{"dp", 2}, {"tp", 2}}));
  EXPECT_THAT(DeviceMesh::Create(mesh, *world),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("mesh dp=2,tp=2 has 4 ranks, world size is 1")));
}

}  // namespace
}  // namespace loom
