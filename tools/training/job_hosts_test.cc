#include "tools/training/job_hosts.h"

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/training/job_mesh.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TrainJobOptions Sized(int dp, int pp, int cp, int tp) {
  TrainJobOptions options;
  options.dp = dp;
  options.pp = pp;
  options.cp = cp;
  options.tp = tp;
  return options;
}

TEST(JobHostsTest, TheDocumentedExample) {
  LOOM_ASSERT_OK_AND_ASSIGN(const JobHosts hosts, JobHosts::Number({0, 1, 0, 1}));
  EXPECT_EQ(hosts.size(), 4);
  EXPECT_EQ(hosts.hosts(), 2);
  EXPECT_THAT(hosts.process_of_rank(), ElementsAre(0, 2, 1, 3));
  EXPECT_THAT(hosts.host_of_rank(), ElementsAre(0, 0, 1, 1));
  EXPECT_EQ(hosts.JobRankOf(0), 0);
  EXPECT_EQ(hosts.JobRankOf(1), 2);
  EXPECT_EQ(hosts.JobRankOf(2), 1);
  EXPECT_EQ(hosts.JobRankOf(3), 3);
  EXPECT_FALSE(hosts.InBlocks());
  EXPECT_EQ(hosts.Describe("mpi"),
            "2 hosts of 2 ranks; mpi dealt them, the job numbers them by host "
            "(job ranks 0 1 | 2 3 are mpi ranks 0 2 | 1 3)");
  LOOM_ASSERT_OK_AND_ASSIGN(const Mesh mesh, JobMeshOf(Sized(2, 1, 1, 2)));
  EXPECT_THAT(GroupNodeOfRank(mesh, 0, "tp", hosts), IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(GroupNodeOfRank(mesh, 3, "tp", hosts), IsOkAndHolds(IsEmpty()));
  // The dp groups {0, 2} and {1, 3} have a member on each host: nothing to tell.
  EXPECT_THAT(GroupNodeOfRank(mesh, 1, "dp-cp", hosts), IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(GroupNodeOfRank(mesh, 2, "world", hosts), IsOkAndHolds(ElementsAre(0, 0, 1, 1)));
}

TEST(JobHostsTest, HostsAreAnyIntsNumberedByTheirLowestProcess) {
  LOOM_ASSERT_OK_AND_ASSIGN(const JobHosts blocks, JobHosts::Number({7, 7, 3}));
  EXPECT_TRUE(blocks.InBlocks());
  EXPECT_THAT(blocks.host_of_rank(), ElementsAre(0, 0, 1));
  EXPECT_EQ(blocks.Describe("mpi"), "2 hosts of 2, 1 ranks, in blocks");
  LOOM_ASSERT_OK_AND_ASSIGN(const JobHosts dealt, JobHosts::Number({5, 9, 5, 2, 9, 2}));
  EXPECT_THAT(dealt.process_of_rank(), ElementsAre(0, 2, 1, 4, 3, 5));
  // Dealt over 2 hosts in threes: not its own inverse (process 1 is job rank 3, job
  // rank 1 is process 2), so JobRankOf and process_of_rank tell apart.
  LOOM_ASSERT_OK_AND_ASSIGN(const JobHosts threes, JobHosts::Number({0, 1, 0, 1, 0, 1}));
  EXPECT_THAT(threes.process_of_rank(), ElementsAre(0, 2, 4, 1, 3, 5));
  EXPECT_EQ(threes.JobRankOf(1), 3);
  EXPECT_EQ(threes.JobRankOf(2), 1);
  EXPECT_EQ(threes.JobRankOf(4), 2);
  EXPECT_THAT(dealt.host_of_rank(), ElementsAre(0, 0, 1, 1, 2, 2));
  EXPECT_EQ(dealt.Describe("gloo"),
            "3 hosts of 2 ranks; gloo dealt them, the job numbers them by host "
            "(job ranks 0 1 | 2 3 | 4 5 are gloo ranks 0 2 | 1 4 | 3 5)");
  const JobHosts one = JobHosts::OneHost(3);
  EXPECT_TRUE(one.InBlocks());
  EXPECT_EQ(one.hosts(), 1);
  EXPECT_EQ(one.Describe("shm"), "");
  LOOM_ASSERT_OK_AND_ASSIGN(const JobHosts each, JobHosts::Number({4, 1}));
  EXPECT_EQ(each.Describe("mpi"), "2 hosts of 1 rank, in blocks");
}

TEST(JobHostsTest, TensorParallelGroupsThatSpanHostsAreCounted) {
  LOOM_ASSERT_OK_AND_ASSIGN(const Mesh tp2, JobMeshOf(Sized(2, 1, 1, 2)));
  // Numbered by host, 2 hosts of 2 keep both tp groups inside; of 1 + 3, one spans.
  LOOM_ASSERT_OK_AND_ASSIGN(const JobHosts dealt, JobHosts::Number({0, 1, 0, 1}));
  EXPECT_THAT(TensorParallelAcrossHosts(tp2, dealt), IsOkAndHolds(""));
  LOOM_ASSERT_OK_AND_ASSIGN(const JobHosts uneven, JobHosts::Number({0, 1, 1, 1}));
  EXPECT_THAT(TensorParallelAcrossHosts(tp2, uneven),
              IsOkAndHolds("; 1 of 2 tp groups span hosts: each layer's tp all-reduces cross "
                           "the link (give every host a multiple of --tp 2 ranks)"));
  LOOM_ASSERT_OK_AND_ASSIGN(const JobHosts four, JobHosts::Number({0, 1, 2, 3}));
  EXPECT_THAT(TensorParallelAcrossHosts(tp2, four), IsOkAndHolds(HasSubstr("2 of 2 tp groups")));
  EXPECT_THAT(TensorParallelAcrossHosts(tp2, JobHosts::OneHost(4)), IsOkAndHolds(""));
  LOOM_ASSERT_OK_AND_ASSIGN(const Mesh tp1, JobMeshOf(Sized(4, 1, 1, 1)));
  EXPECT_THAT(TensorParallelAcrossHosts(tp1, four), IsOkAndHolds(""));
  EXPECT_THAT(TensorParallelAcrossHosts(tp2, JobHosts::OneHost(3)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("3 ranks on hosts")));
}

TEST(JobHostsTest, LongListsEndInAnEllipsis) {
  std::vector<int> dealt(40);
  for (int p = 0; p < 40; ++p) dealt[p] = p % 2;
  LOOM_ASSERT_OK_AND_ASSIGN(const JobHosts hosts, JobHosts::Number(dealt));
  const std::string line = hosts.Describe("mpi");
  EXPECT_THAT(line, HasSubstr("are mpi ranks 0 2 4"));
  EXPECT_THAT(line, HasSubstr("30 31 ... are"));
  EXPECT_THAT(line, HasSubstr("38 | 1 3"));
  EXPECT_THAT(line, HasSubstr("21 23 ...)"));
  EXPECT_LT(line.size(), 400u);
}

TEST(JobHostsTest, BadInput) {
  EXPECT_THAT(JobHosts::Number({}), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no processes")));
  LOOM_ASSERT_OK_AND_ASSIGN(const Mesh mesh, JobMeshOf(Sized(2, 1, 1, 2)));
  LOOM_ASSERT_OK_AND_ASSIGN(const JobHosts three, JobHosts::Number({0, 0, 1}));
  EXPECT_THAT(GroupNodeOfRank(mesh, 0, "tp", three),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("3 ranks on hosts, but the mesh has 4")));
  LOOM_ASSERT_OK_AND_ASSIGN(const JobHosts four, JobHosts::Number({0, 0, 1, 1}));
  EXPECT_THAT(GroupNodeOfRank(mesh, 0, "pp", four),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"pp\" is none of")));
  EXPECT_THAT(GroupNodeOfRank(mesh, 4, "tp", four), StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("4")));
}

// The rank job rank `r` has in its group along `dimension`, as the job connects
// the group (train_job.cc: PlaceRank's t, dpcp_index, c and rank).
int GroupRank(const Mesh& mesh, int64_t r, const std::string& dimension) {
  const RankPlace at = *PlaceRank(mesh, static_cast<int>(r));
  if (dimension == "tp") return at.t;
  if (dimension == "cp") return at.c;
  if (dimension == "dp-cp") return at.dpcp_index;
  return at.rank;
}

// Seeded meshes and host layouts (equal and unequal hosts, dealt, in blocks and
// shuffled): each group's node_of_rank is its members' hosts in the group's rank order
// (or empty exactly when the group is on one host or one member per host), and where
// every host holds the same multiple of tp ranks, each tp group is on one host.
TEST(JobHostsTest, SweepOfMeshesAndLayouts) {
  constexpr uint32_t kSeed = 20261129;
  std::cout << "seed " << kSeed << "\n";
  std::mt19937 random(kSeed);
  int checked_groups = 0, told = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int dp = 1 + static_cast<int>(random() % 4), pp = 1 + static_cast<int>(random() % 2),
              cp = 1 + static_cast<int>(random() % 2), tp = 1 + static_cast<int>(random() % 4);
    const int world = dp * pp * cp * tp;
    LOOM_ASSERT_OK_AND_ASSIGN(const Mesh mesh, JobMeshOf(Sized(dp, pp, cp, tp)));
    const int host_count = 1 + static_cast<int>(random() % std::min(world, 4));
    std::vector<int> host_of_process(world);
    const int kind = trial % 3;
    for (int p = 0; p < world; ++p) {
      // 0: dealt round-robin; 1: random hosts; 2: blocks (as equal as they divide).
      host_of_process[p] = kind == 0   ? p % host_count
                           : kind == 1 ? static_cast<int>(random() % host_count)
                                       : p * host_count / world;
      host_of_process[p] = 100 - 7 * host_of_process[p];  // ids that are not 0, 1, ...
    }
    SCOPED_TRACE(testing::Message() << "trial " << trial << ": dp " << dp << " pp " << pp << " cp "
                                    << cp << " tp " << tp << ", " << host_count << " hosts, kind "
                                    << kind);
    LOOM_ASSERT_OK_AND_ASSIGN(const JobHosts hosts, JobHosts::Number(host_of_process));
    ASSERT_EQ(hosts.size(), world);
    // The numbering: a permutation, processes of one host consecutive and in order.
    std::vector<int> seen(world, 0);
    for (int r = 0; r < world; ++r) {
      const int p = hosts.process_of_rank()[r];
      ASSERT_EQ(hosts.JobRankOf(p), r);
      ++seen[p];
      if (r > 0) {
        ASSERT_LE(hosts.host_of_rank()[r - 1], hosts.host_of_rank()[r]);
        if (hosts.host_of_rank()[r - 1] == hosts.host_of_rank()[r]) {
          ASSERT_LT(hosts.process_of_rank()[r - 1], p);
        }
      }
      for (int q = 0; q < world; ++q) {
        const bool same_host = host_of_process[p] == host_of_process[q];
        ASSERT_EQ(same_host, hosts.host_of_rank()[r] == hosts.host_of_rank()[hosts.JobRankOf(q)]);
      }
    }
    ASSERT_EQ(std::count(seen.begin(), seen.end(), 1), world);
    ASSERT_EQ(hosts.process_of_rank()[0], 0);
    for (const std::string dimension : {"tp", "cp", "dp-cp", "world"}) {
      std::vector<std::vector<int64_t>> groups(1);
      if (dimension == "world") {
        for (int r = 0; r < world; ++r) groups[0].push_back(r);
      } else {
        LOOM_ASSERT_OK_AND_ASSIGN(groups, mesh.AllGroups(dimension));
      }
      for (const std::vector<int64_t>& members : groups) {
        std::vector<int> expected(members.size(), -1);
        std::set<int> distinct;
        for (int64_t m : members) {
          const int index = GroupRank(mesh, m, dimension);
          ASSERT_GE(index, 0);
          ASSERT_LT(index, static_cast<int>(members.size()));
          expected[index] = hosts.host_of_rank()[m];
          distinct.insert(expected[index]);
        }
        if (distinct.size() < 2 || distinct.size() == members.size()) expected.clear();
        for (int64_t m : members) {
          ASSERT_THAT(GroupNodeOfRank(mesh, static_cast<int>(m), dimension, hosts),
                      IsOkAndHolds(expected))
              << dimension << " group of rank " << m;
        }
        ++checked_groups;
        if (!expected.empty()) ++told;
      }
    }
    // Equal hosts, each a multiple of tp ranks: tp never crosses a host.
    if (world % host_count == 0 && (world / host_count) % tp == 0 && kind != 1) {
      for (int r = 0; r < world; ++r) {
        LOOM_ASSERT_OK_AND_ASSIGN(const std::vector<int64_t> tp_group, mesh.Group(r, "tp"));
        for (int64_t m : tp_group) ASSERT_EQ(hosts.host_of_rank()[m], hosts.host_of_rank()[r]);
      }
    }
  }
  std::cout << checked_groups << " groups checked, " << told << " told their hosts\n";
  EXPECT_GT(told, 50);
}

}  // namespace
}  // namespace loom
