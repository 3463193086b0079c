#include "zero3/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "collectives/communicator.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "zero3/internal/checkpoint_write_hook.h"
#include "zero3/partition.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

constexpr const char* kFieldNames[] = {"param", "exp_avg", "exp_avg_sq"};
constexpr int kNumFields = 3;

// Big and small parameters, a scalar and an empty one, so buckets split parameters
// and some are persistent under one threshold and sharded under another.
std::vector<ParamSpec> Model() {
  return {{"wte", {37, 8}}, {"ln.g", {8}},      {"ln.b", {8}},    {"attn.w", {8, 24}},
          {"attn.b", {24}}, {"scale", {}},      {"empty", {0, 4}}, {"fc.w", {24, 8}},
          {"fc.b", {8}},    {"head", {8, 13}}};
}

Partition MakePartition(int dp, int64_t bucket_numel, int64_t threshold, int64_t align,
                        std::vector<ParamSpec> params = Model()) {
  PartitionOptions options;
  options.dp_size = dp;
  options.bucket_numel = bucket_numel;
  options.persistence_threshold = threshold;
  options.align_numel = align;
  absl::StatusOr<Partition> p = Partition::Create(std::move(params), options);
  EXPECT_TRUE(p.ok()) << p.status();
  return *std::move(p);
}

// Full state: per field, the flat unpadded vector; seeded finite floats with random
// mantissas, so a wrong index or a dropped bit shows.
using Full = std::vector<std::vector<float>>;

Full MakeFull(int64_t total, uint32_t seed) {
  std::mt19937 rng(seed);
  Full full(kNumFields, std::vector<float>(static_cast<size_t>(total)));
  for (auto& field : full) {
    for (float& x : field) {
      const uint32_t bits = (rng() & 0x807fffffu) | ((64u + rng() % 128u) << 23);
      std::memcpy(&x, &bits, sizeof(x));
    }
  }
  return full;
}

std::vector<uint32_t> Bits(absl::Span<const float> values) {
  std::vector<uint32_t> bits(values.size());
  if (!values.empty()) std::memcpy(bits.data(), values.data(), values.size() * sizeof(float));
  return bits;
}

// One rank's state in the engine's layout, computed here independently.
struct RankState {
  std::vector<std::vector<float>> sharded, persistent;
};

RankState Scatter(const Partition& p, int rank, const Full& full, float pad) {
  RankState s;
  int64_t flat = 0;
  std::vector<int64_t> flat_offsets;
  for (int q = 0; q < p.num_params(); ++q) {
    flat_offsets.push_back(flat);
    flat += p.slot(q).numel;
  }
  for (const auto& values : full) {
    std::vector<float> sharded(static_cast<size_t>(p.ShardNumel()), pad);
    std::vector<float> persistent(static_cast<size_t>(p.PersistentNumel()), pad);
    for (int q = 0; q < p.num_params(); ++q) {
      const ParamSlot& slot = p.slot(q);
      EXPECT_EQ(p.FlatOffset(q), flat_offsets[q]);
      if (slot.persistent) {
        for (int64_t i = 0; i < slot.numel; ++i) {
          persistent[slot.offset + i] = values[flat_offsets[q] + i];
        }
        continue;
      }
      const Bucket& bucket = p.bucket(slot.bucket);
      for (int64_t e = rank * bucket.shard_numel; e < (rank + 1) * bucket.shard_numel; ++e) {
        const int64_t i = e - slot.offset;
        if (i < 0 || i >= slot.numel) continue;
        sharded[p.ShardOffset(slot.bucket) + e - rank * bucket.shard_numel] =
            values[flat_offsets[q] + i];
      }
    }
    s.sharded.push_back(std::move(sharded));
    s.persistent.push_back(std::move(persistent));
  }
  return s;
}

std::vector<CheckpointField> FieldsOf(const RankState& s) {
  std::vector<CheckpointField> fields;
  for (int f = 0; f < kNumFields; ++f) fields.push_back({kFieldNames[f], s.sharded[f], s.persistent[f]});
  return fields;
}

std::vector<MutableCheckpointField> MutableFieldsOf(RankState& s) {
  std::vector<MutableCheckpointField> fields;
  for (int f = 0; f < kNumFields; ++f) {
    fields.push_back({kFieldNames[f], absl::MakeSpan(s.sharded[f]), absl::MakeSpan(s.persistent[f])});
  }
  return fields;
}

// RunRanks runs body(rank, communicator) on `ranks` threads and returns each status.
std::vector<absl::Status> RunRanks(int ranks,
                                   const std::function<absl::Status(int, Communicator&)>& body) {
  std::vector<absl::Status> statuses(static_cast<size_t>(ranks));
  absl::StatusOr<std::shared_ptr<InprocGroup>> group = InprocGroup::Create(ranks);
  if (!group.ok()) return std::vector<absl::Status>(ranks, group.status());
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      statuses[r] = [&]() -> absl::Status {
        LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> endpoint, (*group)->Endpoint(r));
        CommunicatorOptions options;
        options.timeout = absl::Seconds(60);
        LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                              Communicator::Create(std::move(endpoint), options));
        return body(r, *comm);
      }();
    });
  }
  for (auto& thread : threads) thread.join();
  return statuses;
}

// `hooks` (when set) gives each rank its write hook (internal/checkpoint_write_hook.h).
std::vector<absl::Status> Save(
    const std::string& dir, int64_t step, const Partition& p, const Full& full,
    const std::function<CheckpointOptions(int)>& options = nullptr,
    const std::function<checkpoint_internal::WriteHook(int)>& hooks = nullptr) {
  return RunRanks(p.options().dp_size, [&](int rank, Communicator& comm) {
    const RankState state = Scatter(p, rank, full, -7.0f);
    const std::vector<CheckpointField> fields = FieldsOf(state);
    return checkpoint_internal::SaveCheckpointWithWriteHook(
        dir, step, p, fields, comm, options ? options(rank) : CheckpointOptions{},
        hooks ? hooks(rank) : nullptr);
  });
}

void ExpectAllOk(const std::vector<absl::Status>& statuses) {
  for (size_t r = 0; r < statuses.size(); ++r) LOOM_EXPECT_OK(statuses[r]) << "rank " << r;
}

// ExpectLoads loads `dir` at `p` and expects every rank to hold exactly `full`'s
// pieces (zeros in the padding) at `step`.
void ExpectLoads(const std::string& dir, const Partition& p, const Full& full, int64_t step) {
  const int ranks = p.options().dp_size;
  std::vector<RankState> loaded(static_cast<size_t>(ranks));
  std::vector<int64_t> steps(static_cast<size_t>(ranks), -1);
  const std::vector<absl::Status> statuses = RunRanks(ranks, [&](int rank, Communicator& comm) {
    loaded[rank] = Scatter(p, rank, full, 0.0f);
    for (auto* part : {&loaded[rank].sharded, &loaded[rank].persistent}) {
      for (auto& values : *part) std::fill(values.begin(), values.end(), 12345.0f);
    }
    const std::vector<MutableCheckpointField> fields = MutableFieldsOf(loaded[rank]);
    LOOM_ASSIGN_OR_RETURN(steps[rank], LoadCheckpoint(dir, p, fields, comm));
    return absl::OkStatus();
  });
  for (int r = 0; r < ranks; ++r) {
    LOOM_EXPECT_OK(statuses[r]) << "rank " << r;
    if (!statuses[r].ok()) continue;
    EXPECT_EQ(steps[r], step);
    const RankState expected = Scatter(p, r, full, 0.0f);
    for (int f = 0; f < kNumFields; ++f) {
      EXPECT_EQ(Bits(loaded[r].sharded[f]), Bits(expected.sharded[f]))
          << "rank " << r << " field " << kFieldNames[f];
      EXPECT_EQ(Bits(loaded[r].persistent[f]), Bits(expected.persistent[f]))
          << "rank " << r << " field " << kFieldNames[f];
    }
  }
}

void ExpectReadsFull(const std::string& dir, const Full& full, int64_t step, int saved_dp) {
  absl::StatusOr<FullCheckpoint> read = ReadFullCheckpoint(dir);
  LOOM_ASSERT_OK_AND_ASSIGN(FullCheckpoint got, std::move(read));
  EXPECT_EQ(got.step, step);
  EXPECT_EQ(got.saved_dp_size, saved_dp);
  ASSERT_EQ(got.params.size(), Model().size());
  for (size_t q = 0; q < got.params.size(); ++q) {
    EXPECT_EQ(got.params[q].name, Model()[q].name);
    EXPECT_EQ(got.params[q].shape, Model()[q].shape);
  }
  EXPECT_EQ(got.field_names, std::vector<std::string>(std::begin(kFieldNames), std::end(kFieldNames)));
  for (int f = 0; f < kNumFields; ++f) {
    EXPECT_EQ(Bits(got.fields[kFieldNames[f]]), Bits(full[f])) << kFieldNames[f];
  }
}

std::string FreshDir(absl::string_view name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  std::filesystem::remove_all(dir);
  return dir;
}

std::vector<std::string> List(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  return names;
}

int64_t TotalNumel() {
  int64_t total = 0;
  for (const ParamSpec& spec : Model()) {
    int64_t numel = 1;
    for (const int64_t e : spec.shape) numel *= e;
    total += numel;
  }
  return total;
}

CheckpointOptions SmallBlocks(int /*rank*/) {
  CheckpointOptions options;
  options.block_bytes = 256;
  return options;
}

// ---------------------------------------------------------------------------

class WorldSizeTest : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(WorldSizeTest, SaveAtNLoadsAtMBitwise) {
  const auto [saved, loaded] = GetParam();
  const std::string dir = FreshDir(absl::StrCat("ws_", saved, "_", loaded));
  const Full full = MakeFull(TotalNumel(), 1000u + static_cast<uint32_t>(saved * 10 + loaded));
  const Partition at_save = MakePartition(saved, 100, 8, 4);
  ExpectAllOk(Save(dir, 42, at_save, full, SmallBlocks));
  ExpectReadsFull(dir, full, 42, saved);
  // Other bucket size, alignment and threshold: "ln.g" and "attn.b" move between
  // the persistent block and the buckets.
  ExpectLoads(dir, MakePartition(loaded, 333, loaded % 2 == 0 ? 0 : 24, 16), full, 42);
  ExpectLoads(dir, MakePartition(loaded, 1, 8, 1), full, 42);
}

INSTANTIATE_TEST_SUITE_P(All, WorldSizeTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(1, 2, 3, 5)),
                         [](const ::testing::TestParamInfo<std::tuple<int, int>>& test) {
                           return absl::StrCat("save", std::get<0>(test.param), "_load",
                                               std::get<1>(test.param));
                         });

TEST(CheckpointTest, DefaultBlockSizeAndRanksOwningNothing) {
  // 7 ranks over small buckets: some ranks own no piece of some buckets' params.
  const std::string dir = FreshDir("default_blocks");
  const Full full = MakeFull(TotalNumel(), 7);
  ExpectAllOk(Save(dir, 0, MakePartition(7, 64, 0, 16), full));
  ExpectReadsFull(dir, full, 0, 7);
  ExpectLoads(dir, MakePartition(2, 1 << 20, 0, 16), full, 0);
}

TEST(CheckpointTest, SecondSaveReplacesFirstAndCleansUp) {
  const std::string dir = FreshDir("replace");
  const Full a = MakeFull(TotalNumel(), 1), b = MakeFull(TotalNumel(), 2),
             c = MakeFull(TotalNumel(), 3), d = MakeFull(TotalNumel(), 4);
  ExpectAllOk(Save(dir, 1, MakePartition(2, 100, 8, 4), a));
  EXPECT_THAT(List(dir), UnorderedElementsAre("LATEST", "step-00000001"));
  ExpectAllOk(Save(dir, 2, MakePartition(3, 50, 8, 4), b));
  EXPECT_THAT(List(dir), UnorderedElementsAre("LATEST", "step-00000002"));
  EXPECT_THAT(List(dir + "/step-00000002"),
              UnorderedElementsAre("MANIFEST", "rank-00000-of-00003.bin", "rank-00001-of-00003.bin",
                                   "rank-00002-of-00003.bin"));
  ExpectReadsFull(dir, b, 2, 3);
  // The same step again goes to a sibling, so the committed one stays until then.
  ExpectAllOk(Save(dir, 2, MakePartition(1, 50, 8, 4), c));
  EXPECT_THAT(List(dir), UnorderedElementsAre("LATEST", "step-00000002.1"));
  ExpectReadsFull(dir, c, 2, 1);
  ExpectAllOk(Save(dir, 3, MakePartition(2, 50, 8, 4), d));
  EXPECT_THAT(List(dir), UnorderedElementsAre("LATEST", "step-00000003"));
  ExpectLoads(dir, MakePartition(3, 70, 0, 8), d, 3);
}

TEST(CheckpointTest, SaveRejectsBadSpanOnOneRankOnEveryRank) {
  const std::string dir = FreshDir("bad_span");
  const Full full = MakeFull(TotalNumel(), 5);
  const Partition p = MakePartition(3, 100, 8, 4);
  ExpectAllOk(Save(dir, 1, p, full));
  const std::vector<absl::Status> statuses = RunRanks(3, [&](int rank, Communicator& comm) {
    RankState state = Scatter(p, rank, full, 0.0f);
    if (rank == 1) state.sharded[1].resize(7);
    return SaveCheckpoint(dir, 2, p, FieldsOf(state), comm);
  });
  EXPECT_THAT(statuses[1],
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat("field \"exp_avg\" has 7 sharded and ",
                                              p.PersistentNumel(),
                                              " persistent elements; the partition needs "
                                              "ShardNumel() = ",
                                              p.ShardNumel()))));
  for (const int r : {0, 2}) {
    EXPECT_THAT(statuses[r], StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("rank 1 of 3 failed while checking its input")));
  }
  ExpectReadsFull(dir, full, 1, 3);
  EXPECT_THAT(List(dir), UnorderedElementsAre("LATEST", "step-00000001"));
}

TEST(CheckpointTest, SaveRejectsBadArguments) {
  const std::string dir = FreshDir("bad_args");
  const Full full = MakeFull(TotalNumel(), 6);
  const Partition p = MakePartition(2, 100, 8, 4);
  auto save_with = [&](const std::function<absl::Status(int, Communicator&, RankState&)>& body) {
    return RunRanks(2, [&](int rank, Communicator& comm) {
      RankState state = Scatter(p, rank, full, 0.0f);
      return body(rank, comm, state);
    });
  };
  for (const absl::Status& s : save_with([&](int, Communicator& comm, RankState& state) {
         return SaveCheckpoint(dir, -1, p, FieldsOf(state), comm);
       })) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("step must be >= 0")));
  }
  for (const absl::Status& s : save_with([&](int, Communicator& comm, RankState& state) {
         std::vector<CheckpointField> fields = FieldsOf(state);
         fields[2].name = "param";
         return SaveCheckpoint(dir, 1, p, fields, comm);
       })) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("field \"param\" is given twice")));
  }
  for (const absl::Status& s : save_with([&](int, Communicator& comm, RankState& state) {
         CheckpointOptions options;
         options.block_bytes = 6;
         return SaveCheckpoint(dir, 1, p, FieldsOf(state), comm, options);
       })) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("block_bytes is 6")));
  }
  for (const absl::Status& s : save_with([&](int rank, Communicator& comm, RankState& state) {
         return SaveCheckpoint(dir, 10 + rank, p, FieldsOf(state), comm);
       })) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition,
                            HasSubstr("rank 0 passed step 10 (layout fingerprint")));
  }
  const Partition p3 = MakePartition(3, 100, 8, 4);
  for (const absl::Status& s : RunRanks(2, [&](int rank, Communicator& comm) {
         const RankState state = Scatter(p3, rank, full, 0.0f);
         return SaveCheckpoint(dir, 1, p3, FieldsOf(state), comm);
       })) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition,
                            HasSubstr("the communicator has 2 ranks, the partition's dp_size is 3")));
  }
  // The directory's parent must exist.
  const std::vector<absl::Status> statuses =
      save_with([&](int, Communicator& comm, RankState& state) {
        return SaveCheckpoint(dir + "/no/such", 1, p, FieldsOf(state), comm);
      });
  EXPECT_THAT(statuses[0],
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("mkdir(" + dir + "/no/such)")));
  EXPECT_THAT(statuses[1], StatusIs(absl::StatusCode::kNotFound,
                                    HasSubstr("rank 0 of 2 failed while checking its input")));
  // Nothing above left a trace.
  EXPECT_THAT(List(dir), ::testing::IsEmpty());
}

TEST(CheckpointTest, LoadRejectsBadInput) {
  const std::string dir = FreshDir("load_bad");
  const Full full = MakeFull(TotalNumel(), 8);
  const Partition p = MakePartition(2, 100, 8, 4);
  auto load_with = [&](const std::string& from,
                       const std::function<void(std::vector<MutableCheckpointField>&)>& edit) {
    return RunRanks(2, [&](int rank, Communicator& comm) -> absl::Status {
      RankState state = Scatter(p, rank, full, 0.0f);
      std::vector<MutableCheckpointField> fields = MutableFieldsOf(state);
      edit(fields);
      return LoadCheckpoint(from, p, fields, comm).status();
    });
  };
  auto no_edit = [](std::vector<MutableCheckpointField>&) {};
  for (const absl::Status& s : load_with(dir, no_edit)) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kNotFound,
                            HasSubstr("checkpoint directory " + dir + " does not exist")));
  }
  std::filesystem::create_directories(dir);
  for (const absl::Status& s : load_with(dir, no_edit)) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kNotFound,
                            HasSubstr("no checkpoint in " + dir + ": " + dir + "/LATEST")));
  }
  EXPECT_THAT(ReadFullCheckpoint(dir), StatusIs(absl::StatusCode::kNotFound, HasSubstr("LATEST")));
  ExpectAllOk(Save(dir, 3, p, full));
  for (const absl::Status& s : load_with(dir, [](std::vector<MutableCheckpointField>& fields) {
         fields[1].name = "momentum";
       })) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kNotFound,
                            HasSubstr("field \"momentum\" is not in the checkpoint; it has "
                                      "\"param\", \"exp_avg\", \"exp_avg_sq\"")));
  }
  for (const absl::Status& s : load_with(dir, [](std::vector<MutableCheckpointField>& fields) {
         fields[0].persistent.remove_suffix(1);
       })) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("field \"param\" has")));
  }
  // A subset of the fields loads.
  for (const absl::Status& s : load_with(dir, [](std::vector<MutableCheckpointField>& fields) {
         fields.erase(fields.begin());
       })) {
    LOOM_EXPECT_OK(s);
  }
}

TEST(CheckpointTest, LoadRejectsMismatchedModel) {
  const std::string dir = FreshDir("mismatch");
  const Full full = MakeFull(TotalNumel(), 9);
  ExpectAllOk(Save(dir, 3, MakePartition(2, 100, 8, 4), full));
  struct Case {
    std::vector<ParamSpec> params;
    std::string message;
  };
  std::vector<Case> cases;
  cases.push_back({Model(), ""});
  cases.back().params[3].shape = {24, 8};
  cases.back().message =
      "at parameter 3: checkpoint has \"attn.w\" [8,24], model has \"attn.w\" [24,8]";
  cases.push_back({Model(), ""});
  cases.back().params[1].name = "ln.gamma";
  cases.back().message = "at parameter 1: checkpoint has \"ln.g\" [8], model has \"ln.gamma\" [8]";
  cases.push_back({Model(), ""});
  cases.back().params.push_back({"extra", {2}});
  cases.back().message = "(10 parameters; the model has 11) at parameter 10: checkpoint has none, "
                         "model has \"extra\" [2]";
  cases.push_back({Model(), ""});
  cases.back().params.pop_back();
  cases.back().message = "at parameter 9: checkpoint has \"head\" [8,13], model has none";
  for (const Case& c : cases) {
    const Partition p = MakePartition(2, 100, 8, 4, c.params);
    for (const absl::Status& s : RunRanks(2, [&](int rank, Communicator& comm) -> absl::Status {
           RankState state = Scatter(p, rank, MakeFull(p.TotalNumel(), 1), 0.0f);
           return LoadCheckpoint(dir, p, MutableFieldsOf(state), comm).status();
         })) {
      EXPECT_THAT(s, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(c.message)));
    }
  }
}

// ---------------------------------------------------------------------------
// Corruption: every damaged byte or length is DataLoss naming the file and what.

void FlipByte(const std::string& path, int64_t offset) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(file) << path;
  file.seekg(offset, offset < 0 ? std::ios::end : std::ios::beg);
  char c = 0;
  file.read(&c, 1);
  ASSERT_TRUE(file) << path << " offset " << offset;
  c = static_cast<char>(c ^ 0x10);
  file.seekp(offset, offset < 0 ? std::ios::end : std::ios::beg);
  file.write(&c, 1);
}

void Truncate(const std::string& path, int64_t bytes_off) {
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - bytes_off);
}

struct Corruption {
  std::string name;
  std::function<void(const std::string& subdir, const std::string& dir)> damage;
  std::string message;  // what ReadFullCheckpoint says
};

class CorruptionTest : public ::testing::TestWithParam<Corruption> {};

TEST_P(CorruptionTest, IsDataLossOnReadAndOnEveryLoadingRank) {
  const Corruption& c = GetParam();
  const std::string dir = FreshDir("corrupt_" + c.name);
  const Full full = MakeFull(TotalNumel(), 11);
  ExpectAllOk(Save(dir, 7, MakePartition(3, 100, 8, 4), full, SmallBlocks));
  c.damage(dir + "/step-00000007", dir);
  EXPECT_THAT(ReadFullCheckpoint(dir), StatusIs(absl::StatusCode::kDataLoss, HasSubstr(c.message)));
  const Partition p = MakePartition(2, 200, 0, 4);
  const std::vector<absl::Status> statuses = RunRanks(2, [&](int rank, Communicator& comm) {
    RankState state = Scatter(p, rank, full, 0.0f);
    return LoadCheckpoint(dir, p, MutableFieldsOf(state), comm).status();
  });
  bool named = false;
  for (const absl::Status& s : statuses) {
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kDataLoss, ::testing::_));
    named = named || absl::StrContains(s.message(), c.message);
  }
  EXPECT_TRUE(named) << statuses[0] << " / " << statuses[1];
}

const std::string kRank1 = "/rank-00001-of-00003.bin";

INSTANTIATE_TEST_SUITE_P(
    All, CorruptionTest,
    ::testing::Values(
        Corruption{"payload",
                   [](const std::string& s, const std::string&) { FlipByte(s + kRank1, 64 + 300); },
                   "rank-00001-of-00003.bin: block 1 (file bytes [320, 576)) has CRC32C"},
        Corruption{"header",
                   [](const std::string& s, const std::string&) { FlipByte(s + kRank1, 26); },
                   "rank-00001-of-00003.bin: header (bytes [0, 64)) has CRC32C"},
        Corruption{"table",
                   [](const std::string& s, const std::string&) { FlipByte(s + kRank1, -6); },
                   "rank-00001-of-00003.bin: block CRC table (bytes ["},
        Corruption{"truncated_file",
                   [](const std::string& s, const std::string&) { Truncate(s + kRank1, 100); },
                   "bytes, the manifest says"},
        Corruption{"missing_file",
                   [](const std::string& s, const std::string&) {
                     std::filesystem::remove(s + kRank1);
                   },
                   "the manifest lists"},
        Corruption{"manifest_byte",
                   [](const std::string& s, const std::string&) { FlipByte(s + "/MANIFEST", 40); },
                   "MANIFEST: CRC32C of bytes [0, "},
        Corruption{"manifest_truncated",
                   [](const std::string& s, const std::string&) { Truncate(s + "/MANIFEST", 5); },
                   "MANIFEST ("},
        Corruption{"latest",
                   [](const std::string&, const std::string& d) { FlipByte(d + "/LATEST", 3); },
                   "LATEST ("}),
    [](const ::testing::TestParamInfo<Corruption>& test) { return test.param.name; });

// ReadWithDeadline runs ReadFullCheckpoint(dir) on a thread and waits at most
// 20 s for it. A read still blocked then is the failure under test: `unblock`
// (opening the FIFO's writing end) releases it, so the test fails instead of
// hanging.
absl::StatusOr<FullCheckpoint> ReadWithDeadline(const std::string& dir,
                                                const std::function<void()>& unblock) {
  absl::Notification done;
  absl::StatusOr<FullCheckpoint> result;
  std::thread reader([&] {
    result = ReadFullCheckpoint(dir);
    done.Notify();
  });
  const bool in_time = done.WaitForNotificationWithTimeout(absl::Seconds(20));
  if (!in_time) unblock();
  reader.join();
  if (!in_time) return absl::DeadlineExceededError("ReadFullCheckpoint blocked for 20 s");
  return result;
}

// A file of the checkpoint replaced by a FIFO (nothing ever writes to it) is
// refused at once, naming it, instead of blocking the reader forever.
TEST(CheckpointTest, FifoInPlaceOfAFileIsRefusedNotWaitedOn) {
  for (const std::string& file : {kRank1, std::string("/MANIFEST")}) {
    SCOPED_TRACE(file);
    const std::string dir = FreshDir("fifo");
    ExpectAllOk(Save(dir, 7, MakePartition(3, 100, 8, 4), MakeFull(TotalNumel(), 11)));
    const std::string path = dir + "/step-00000007" + file;
    ASSERT_TRUE(std::filesystem::remove(path)) << path;
    ASSERT_EQ(mkfifo(path.c_str(), 0600), 0) << path << ": " << std::strerror(errno);
    const absl::StatusOr<FullCheckpoint> read = ReadWithDeadline(dir, [&] {
      const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd >= 0) ::close(fd);
    });
    EXPECT_THAT(read, StatusIs(absl::StatusCode::kDataLoss,
                               HasSubstr(path + " is a FIFO, not a regular file")));
  }
}

// ---------------------------------------------------------------------------
// Crashes: a child process saves and is SIGKILLed midway; the previous checkpoint
// must still load bitwise.

struct Crash {
  std::string name;
  int64_t step;                 // of the crashing save (1: same as the committed one)
  std::string file;             // the hook kills when writing to a path ending so
  int64_t after_bytes;          // ... once this many bytes went to it
};

class CrashTest : public ::testing::TestWithParam<Crash> {};

TEST_P(CrashTest, PreviousCheckpointLoadsBitwise) {
  const Crash& crash = GetParam();
  const std::string dir = FreshDir("crash_" + crash.name);
  const Full previous = MakeFull(TotalNumel(), 21), next = MakeFull(TotalNumel(), 22);
  ExpectAllOk(Save(dir, 1, MakePartition(2, 100, 8, 4), previous, SmallBlocks));

  // No threads run now (RunRanks joined them), so the child may use everything.
  const pid_t child = fork();
  ASSERT_GE(child, 0) << std::strerror(errno);
  if (child == 0) {
    const Partition p = MakePartition(1, 64, 8, 4);
    const RankState state = Scatter(p, 0, next, 0.0f);
    std::shared_ptr<InprocGroup> group = *InprocGroup::Create(1);
    std::unique_ptr<Communicator> comm = *Communicator::Create(*group->Endpoint(0));
    CheckpointOptions options;
    options.block_bytes = 256;
    const absl::Status s = checkpoint_internal::SaveCheckpointWithWriteHook(
        dir, crash.step, p, FieldsOf(state), *comm, options,
        [&](absl::string_view path, int64_t bytes) {
          if (absl::EndsWith(path, crash.file) && bytes >= crash.after_bytes) raise(SIGKILL);
          return absl::OkStatus();
        });
    _exit(s.ok() ? 10 : 11);  // reaching here is the failure the parent reports
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "child exited with " << WEXITSTATUS(wstatus);
  EXPECT_EQ(WTERMSIG(wstatus), SIGKILL);

  ExpectReadsFull(dir, previous, 1, 2);
  ExpectLoads(dir, MakePartition(3, 77, 0, 4), previous, 1);
  // The next save removes the leftovers.
  ExpectAllOk(Save(dir, 5, MakePartition(2, 100, 8, 4), next));
  EXPECT_THAT(List(dir), UnorderedElementsAre("LATEST", "step-00000005"));
  ExpectReadsFull(dir, next, 5, 2);
}

INSTANTIATE_TEST_SUITE_P(
    All, CrashTest,
    ::testing::Values(Crash{"mid_rank_file", 2, ".bin.tmp", 64 + 512},
                      Crash{"rank_file_header", 2, ".bin.tmp", 1},
                      Crash{"manifest_written_not_renamed", 2, "MANIFEST.tmp", 1},
                      Crash{"latest_written_not_renamed", 2, "LATEST.tmp", 1},
                      Crash{"same_step_mid_rank_file", 1, ".bin.tmp", 64 + 512},
                      Crash{"same_step_latest_not_renamed", 1, "LATEST.tmp", 1}),
    [](const ::testing::TestParamInfo<Crash>& test) { return test.param.name; });

// ---------------------------------------------------------------------------
// An error on one rank (here injected by the hook, as a full disk would be) is an
// error on every rank, promptly, and nothing is committed.

TEST(CheckpointTest, WriteErrorOnOneRankFailsEveryRank) {
  const std::string dir = FreshDir("write_error");
  const Full previous = MakeFull(TotalNumel(), 31), next = MakeFull(TotalNumel(), 32);
  ExpectAllOk(Save(dir, 1, MakePartition(3, 100, 8, 4), previous));
  const std::vector<absl::Status> statuses =
      Save(dir, 2, MakePartition(3, 100, 8, 4), next, SmallBlocks,
           [](int rank) -> checkpoint_internal::WriteHook {
             if (rank != 1) return nullptr;
             return [](absl::string_view path, int64_t bytes) {
               return bytes > 300 ? absl::ResourceExhaustedError(
                                        absl::StrCat("injected: no space writing ", path))
                                  : absl::OkStatus();
             };
           });
  EXPECT_THAT(statuses[1], StatusIs(absl::StatusCode::kResourceExhausted,
                                    HasSubstr("injected: no space writing")));
  for (const int r : {0, 2}) {
    EXPECT_THAT(statuses[r], StatusIs(absl::StatusCode::kResourceExhausted,
                                      HasSubstr("rank 1 of 3 failed while writing its file")));
  }
  EXPECT_THAT(List(dir), UnorderedElementsAre("LATEST", "step-00000001"));
  ExpectReadsFull(dir, previous, 1, 3);
  ExpectLoads(dir, MakePartition(2, 100, 8, 4), previous, 1);
}

TEST(CheckpointTest, CommitErrorOnRankZeroFailsEveryRank) {
  const std::string dir = FreshDir("commit_error");
  const Full previous = MakeFull(TotalNumel(), 41), next = MakeFull(TotalNumel(), 42);
  ExpectAllOk(Save(dir, 1, MakePartition(2, 100, 8, 4), previous));
  const std::vector<absl::Status> statuses =
      Save(dir, 2, MakePartition(2, 100, 8, 4), next, nullptr,
           [](int) -> checkpoint_internal::WriteHook {
             return [](absl::string_view path, int64_t) {
               return absl::EndsWith(path, "MANIFEST.tmp") ? absl::UnavailableError("injected")
                                                           : absl::OkStatus();
             };
           });
  EXPECT_THAT(statuses[0], StatusIs(absl::StatusCode::kUnavailable, HasSubstr("injected")));
  EXPECT_THAT(statuses[1], StatusIs(absl::StatusCode::kUnavailable,
                                    HasSubstr("rank 0 of 2 failed while committing")));
  EXPECT_THAT(List(dir), UnorderedElementsAre("LATEST", "step-00000001"));
  ExpectReadsFull(dir, previous, 1, 2);
}

}  // namespace
}  // namespace loom
