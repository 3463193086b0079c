#include "checkpoint/sharded_checkpoint.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "collectives/communicator.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "core/status_matchers.h"
#include "core/temp_dir_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;


// Runs `body(rank, world)` on `size` thread ranks of one inproc group.
std::vector<absl::Status> OnRanks(int size,
                                  const std::function<absl::Status(int, Communicator&)>& body) {
  std::shared_ptr<InprocGroup> group = *InprocGroup::Create(size);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < size; ++r) {
    std::shared_ptr<Transport> endpoint = *group->Endpoint(r);
    comms.push_back(*Communicator::Create(endpoint));
  }
  std::vector<absl::Status> results(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] { results[static_cast<size_t>(r)] = body(r, *comms[r]); });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

// A model of two tensors: "w" [4, 6] split by columns over tp (each rank's shard a
// run per row), "g" [6] replicated (saved by tp rank 0). Whole-tensor state values
// are distinct: field f, tensor k, element i.
float Value(int field, int param, int64_t i, int64_t step) {
  return static_cast<float>(step * 1000 + field * 100 + param * 50) + static_cast<float>(i) / 8;
}

std::vector<CheckpointTensor> Tensors(int tp, int tp_rank) {
  CheckpointTensor w;
  w.name = "w";
  w.full_shape = {4, 6};
  const int64_t columns = 6 / tp;
  for (int64_t row = 0; row < 4; ++row) w.runs.push_back({row * 6 + tp_rank * columns, columns});
  CheckpointTensor g;
  g.name = "g";
  g.full_shape = {6};
  g.runs = {{0, 6}};
  g.saved_here = tp_rank == 0;
  return {w, g};
}

// The slices a tp rank owns, whole shards (as zero 0), for `step`'s values.
std::vector<StateSlice> Slices(const std::vector<CheckpointTensor>& tensors, int64_t step) {
  std::vector<StateSlice> slices;
  for (int k = 0; k < 2; ++k) {
    StateSlice s;
    s.param = k;
    s.dp_replicated = true;
    for (const TensorRun& run : tensors[static_cast<size_t>(k)].runs) {
      for (int64_t i = run.full_offset; i < run.full_offset + run.length; ++i) {
        s.master.push_back(Value(0, k, i, step));
        s.exp_avg.push_back(Value(1, k, i, step));
        s.exp_avg_sq.push_back(Value(2, k, i, step));
      }
    }
    s.end = static_cast<int64_t>(s.master.size());
    slices.push_back(std::move(s));
  }
  return slices;
}

ModelFields Fields(int64_t layers) {
  return {{"hidden", "64"}, {"layers", absl::StrCat(layers)}, {"layer_norm_eps", "1e-05"}};
}

CheckpointMeta Meta(int64_t step) {
  CheckpointMeta meta;
  meta.step = step;
  meta.model = Fields(4);
  meta.saved_by = "dp=1 tp=2 pp=1";
  meta.data_seed = 7;
  return meta;
}

absl::Status SaveOnTwoTpRanks(const std::string& dir, int64_t step,
                              const CheckpointOptions& options) {
  const std::vector<absl::Status> results = OnRanks(2, [&](int rank, Communicator& world) {
    RankCheckpointPart part;
    part.tensors = Tensors(2, rank);
    part.saves_dp_replicated = true;
    part.slices = Slices(part.tensors, step);
    return SaveCheckpoint(dir, Meta(step), part, world, options);
  });
  EXPECT_EQ(results[0], results[1]) << "ranks must agree";
  return results[0];
}

// Reads every parameter back whole (tp 1) and at tp 3, checking each element.
void ExpectLoads(const std::string& dir, int64_t step) {
  LOOM_ASSERT_OK_AND_ASSIGN(const CheckpointReader reader, CheckpointReader::Open(dir));
  EXPECT_EQ(reader.meta().step, step);
  EXPECT_EQ(reader.meta().saved_by, "dp=1 tp=2 pp=1");
  for (const int tp : {1, 3}) {
    for (int rank = 0; rank < tp; ++rank) {
      const StateSource source = reader.SourceFor(Tensors(tp, rank));
      const std::vector<StateSlice> want = Slices(Tensors(tp, rank), step);
      for (const StateSlice& s : want) {
        std::vector<float> master(s.master.size()), m(s.master.size()), v(s.master.size());
        LOOM_ASSERT_OK(source(s.param, 0, s.end, absl::MakeSpan(master), absl::MakeSpan(m),
                              absl::MakeSpan(v)));
        EXPECT_EQ(master, s.master) << "tp " << tp << " rank " << rank << " param " << s.param;
        EXPECT_EQ(m, s.exp_avg);
        EXPECT_EQ(v, s.exp_avg_sq);
      }
    }
  }
}

TEST(ShardedCheckpointTest, SavedAtTp2LoadsWholeAndAtTp3) {
  const std::string dir = FreshTestDirectory("ckpt");
  LOOM_ASSERT_OK(SaveOnTwoTpRanks(dir, 5, {}));
  ExpectLoads(dir, 5);
  LOOM_ASSERT_OK_AND_ASSIGN(const CheckpointReader reader, CheckpointReader::Open(dir));
  EXPECT_EQ(reader.meta().model, Fields(4));
  EXPECT_THAT(reader.CheckModel(Fields(4)), IsOk());
  EXPECT_THAT(reader.CheckModel(Fields(6)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("the checkpoint's model has layers 4, this job's 6")));
  EXPECT_THAT(reader.CheckModel({{"vocab", "64"}}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("the checkpoint's model has no vocab, this job's is 64")));
  // A tensor the checkpoint lacks, or holds in another shape.
  std::vector<CheckpointTensor> renamed = Tensors(1, 0);
  renamed[0].name = "w2";
  std::vector<float> out(24), m(24), v(24);
  EXPECT_THAT(reader.SourceFor(renamed)(0, 0, 24, absl::MakeSpan(out), absl::MakeSpan(m),
                                        absl::MakeSpan(v)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("has no parameter w2")));
  std::vector<CheckpointTensor> reshaped = Tensors(1, 0);
  reshaped[1].full_shape = {7};
  reshaped[1].runs = {{0, 7}};
  std::vector<float> out7(7), m7(7), v7(7);
  EXPECT_THAT(reader.SourceFor(reshaped)(1, 0, 7, absl::MakeSpan(out7), absl::MakeSpan(m7),
                                         absl::MakeSpan(v7)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("has [6] for g")));
}

// A crash (here: a failed write) at any file of a save leaves the previous
// checkpoint committed and whole; every rank reports the same error.
TEST(ShardedCheckpointTest, AFailureDuringASaveKeepsThePreviousCheckpoint) {
  for (const char* victim : {"rank-00001.bin", "MANIFEST", "LATEST"}) {
    SCOPED_TRACE(victim);
    const std::string dir = FreshTestDirectory("ckpt");
    LOOM_ASSERT_OK(SaveOnTwoTpRanks(dir, 2, {}));
    CheckpointOptions failing;
    failing.testing_after_write = [victim](absl::string_view temp) {
      return absl::StrContains(temp, victim) ? absl::UnavailableError("disk unplugged")
                                             : absl::OkStatus();
    };
    EXPECT_THAT(SaveOnTwoTpRanks(dir, 4, failing),
                StatusIs(absl::StatusCode::kUnavailable, HasSubstr("disk unplugged")));
    EXPECT_THAT(LatestCheckpointStep(dir), IsOkAndHolds(2));
    ExpectLoads(dir, 2);
    // The next save of that step replaces the stale, uncommitted directory.
    LOOM_ASSERT_OK(SaveOnTwoTpRanks(dir, 4, {}));
    ExpectLoads(dir, 4);
  }
}

// A real crash: a child process saving step 4 dies (_exit, no cleanup) right after
// writing each file of the save in turn. Every time the previous checkpoint stays
// committed and loads whole, and the next save of step 4 replaces the debris.
TEST(ShardedCheckpointTest, AProcessKilledDuringASaveLeavesThePreviousCheckpoint) {
  for (const char* victim : {"rank-00000.bin", "MANIFEST", "LATEST"}) {
    SCOPED_TRACE(victim);
    const std::string dir = FreshTestDirectory("ckpt");
    LOOM_ASSERT_OK(SaveOnTwoTpRanks(dir, 2, {}));
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      CheckpointOptions dying;
      dying.testing_after_write = [victim](absl::string_view temp) {
        if (absl::StrContains(temp, victim)) _exit(9);
        return absl::OkStatus();
      };
      SaveOnTwoTpRanks(dir, 4, dying).IgnoreError();
      _exit(0);  // not reached when the hook fires
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 9) << "the save never reached " << victim;
    EXPECT_THAT(LatestCheckpointStep(dir), IsOkAndHolds(2));
    ExpectLoads(dir, 2);
    LOOM_ASSERT_OK(SaveOnTwoTpRanks(dir, 4, {}));
    ExpectLoads(dir, 4);
  }
}

TEST(ShardedCheckpointTest, CorruptionIsDataLossNamingTheFile) {
  const std::string dir = FreshTestDirectory("ckpt");
  LOOM_ASSERT_OK(SaveOnTwoTpRanks(dir, 3, {}));
  const std::string file = dir + "/step-00000003/rank-00000.bin";
  const int fd = open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const off_t end = lseek(fd, 0, SEEK_END);
  char byte = 0;
  ASSERT_EQ(pread(fd, &byte, 1, end - 5), 1);
  byte ^= 0x10;
  ASSERT_EQ(pwrite(fd, &byte, 1, end - 5), 1);
  close(fd);
  LOOM_ASSERT_OK_AND_ASSIGN(const CheckpointReader reader, CheckpointReader::Open(dir));
  // The flipped byte is in rank 0's last piece: "g", which tp rank 0 alone saves.
  std::vector<float> out(6), m(6), v(6);
  EXPECT_THAT(
      reader.SourceFor(Tensors(1, 0))(1, 0, 6, absl::MakeSpan(out), absl::MakeSpan(m),
                                      absl::MakeSpan(v)),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("rank-00000.bin: the piece at bytes")));
  // A truncated file no longer matches the manifest's size.
  ASSERT_EQ(truncate(file.c_str(), end - 1), 0);
  EXPECT_THAT(CheckpointReader::Open(dir),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("the manifest says")));
  // A corrupt LATEST.
  const std::string latest = dir + "/LATEST";
  const int lfd = open(latest.c_str(), O_WRONLY);
  ASSERT_EQ(pwrite(lfd, "x", 1, 0), 1);
  close(lfd);
  EXPECT_THAT(LatestCheckpointStep(dir),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("fails its CRC32C check")));
}

TEST(ShardedCheckpointTest, ASavedStepIsNotSavedTwiceAndKeepMustBePositive) {
  const std::string dir = FreshTestDirectory("ckpt");
  LOOM_ASSERT_OK(SaveOnTwoTpRanks(dir, 3, {}));
  EXPECT_THAT(SaveOnTwoTpRanks(dir, 3, {}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("already holds step 3")));
  CheckpointOptions none;
  none.keep = 0;
  EXPECT_THAT(SaveOnTwoTpRanks(dir, 4, none),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("must be >= 1")));
  // A model field that is not a word.
  const std::vector<absl::Status> bad = OnRanks(2, [&](int rank, Communicator& world) {
    CheckpointMeta meta = Meta(5);
    meta.model.push_back({"name", "two words"});
    RankCheckpointPart part;
    part.tensors = Tensors(2, rank);
    return SaveCheckpoint(dir, meta, part, world);
  });
  for (const absl::Status& s : bad) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("model field \"name=two words\"")));
  }
  EXPECT_THAT(LatestCheckpointStep(FreshTestDirectory("ckpt")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no checkpoint in")));
}

TEST(AgreeOnStatusTest, EveryRankLearnsTheFirstFailure) {
  const std::vector<absl::Status> results = OnRanks(3, [](int rank, Communicator& world) {
    return AgreeOnStatus(world, rank == 1 ? absl::DataLossError("bad piece") : absl::OkStatus());
  });
  for (const absl::Status& s : results) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("rank 1: bad piece")));
  }
  for (const absl::Status& s : OnRanks(
           2, [](int, Communicator& world) { return AgreeOnStatus(world, absl::OkStatus()); })) {
    LOOM_EXPECT_OK(s);
  }
}

}  // namespace
}  // namespace loom
