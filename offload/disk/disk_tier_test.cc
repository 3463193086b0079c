// Round trips, overwrites, concurrency and bookkeeping of DiskTier, for each engine
// (io_uring cases skip with the reason where unavailable), direct and buffered I/O, and
// 1, 2 and 3 directories.
#include "offload/disk/disk_tier.h"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/aligned_buffer.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "offload/disk/disk_test_util.h"

namespace loom {
namespace {

using disk_testing::ListDirectory;
using disk_testing::MakeTestDirectory;
using disk_testing::SeededBytes;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;

constexpr size_t kStripe = 64 << 10;  // small stripes: many of them in a few MiB
constexpr size_t kBlock = 16 << 10;

// Creates a tier or skips the test when io_uring was asked for and is unavailable.
#define LOOM_CREATE_OR_SKIP(tier, options)                                  \
  auto tier##_or = DiskTier::Create(options);                               \
  if (tier##_or.status().code() == absl::StatusCode::kFailedPrecondition && \
      (options).engine == IoEngine::kIoUring) {                             \
    GTEST_SKIP() << tier##_or.status();                                     \
  }                                                                         \
  LOOM_ASSERT_OK(tier##_or.status());                                       \
  std::unique_ptr<DiskTier> tier = std::move(tier##_or).value()

struct Config {
  IoEngine engine;
  bool direct;
  int directories;
};

class DiskTierTest : public ::testing::TestWithParam<Config> {
 protected:
  DiskTierOptions Options(const std::string& label) {
    DiskTierOptions options;
    for (int d = 0; d < GetParam().directories; ++d) {
      options.directories.push_back(MakeTestDirectory(absl::StrCat(label, "_d", d)));
    }
    options.stripe_bytes = kStripe;
    options.checksum_block_bytes = kBlock;
    options.engine = GetParam().engine;
    options.direct_io = GetParam().direct;
    options.queue_depth = 8;
    options.threads = 3;
    return options;
  }
};

TEST_P(DiskTierTest, RoundTripsBitwise) {
  const DiskTierOptions options = Options("roundtrip");
  LOOM_CREATE_OR_SKIP(tier, options);
  const DiskTierStats stats = tier->stats();
  EXPECT_EQ(stats.engine, GetParam().engine == IoEngine::kThreadPool ? IoEngine::kThreadPool
                                                                     : IoEngine::kIoUring);
  if (!GetParam().direct) {
    EXPECT_FALSE(stats.direct_io);
    EXPECT_THAT(stats.direct_io_note, HasSubstr("disabled by DiskTierOptions.direct_io"));
  }
  const std::vector<size_t> sizes = {0, 1, 4095, 4096, 4097, 3 * kStripe + 5, (3 << 20) + 123};
  uint64_t written = 0;
  for (size_t n : sizes) {
    for (bool aligned : {true, false}) {
      SCOPED_TRACE(absl::StrCat(n, " bytes, ", aligned ? "aligned" : "unaligned", " buffers"));
      const std::string name = absl::StrCat("t", n, aligned ? "a" : "u");
      const std::vector<std::byte> data = SeededBytes(n, n * 2 + aligned);
      // Aligned caller memory is used for I/O directly; unaligned goes through bounce
      // buffers. Both must give the same bytes.
      LOOM_ASSERT_OK_AND_ASSIGN(AlignedBuffer<std::byte> src,
                                AlignedBuffer<std::byte>::Create(n + 1, 4096));
      const size_t shift = aligned ? 0 : 1;
      if (n > 0) std::memcpy(src.data() + shift, data.data(), n);
      LOOM_ASSERT_OK(tier->Write(name, absl::MakeConstSpan(src.data() + shift, n)));
      written += n;
      EXPECT_TRUE(tier->Contains(name));
      EXPECT_THAT(tier->StoredBytes(name), IsOkAndHolds(n));

      LOOM_ASSERT_OK_AND_ASSIGN(AlignedBuffer<std::byte> dst,
                                AlignedBuffer<std::byte>::Create(n + 1, 4096));
      std::memset(dst.data(), 0xA5, n + 1);
      LOOM_ASSERT_OK(tier->Read(name, absl::MakeSpan(dst.data() + shift, n)));
      EXPECT_TRUE(n == 0 || std::memcmp(dst.data() + shift, data.data(), n) == 0);
      // Nothing outside the span was touched.
      EXPECT_EQ(dst[aligned ? n : 0], std::byte{0xA5});
    }
  }
  EXPECT_EQ(tier->stats().bytes_written, written);
  EXPECT_EQ(tier->stats().bytes_read, written);
  EXPECT_EQ(tier->stats().writes, 2 * sizes.size());
  // No temporary or probe file is left behind.
  for (const std::string& dir : options.directories) {
    for (const std::string& f : ListDirectory(dir)) {
      EXPECT_FALSE(absl::StrContains(f, ".tmp-")) << f;
      EXPECT_TRUE(absl::EndsWith(f, ".ldt")) << f;
    }
  }
}

TEST_P(DiskTierTest, StripesSpreadOverDirectories) {
  const DiskTierOptions options = Options("spread");
  LOOM_CREATE_OR_SKIP(tier, options);
  const std::vector<std::byte> data = SeededBytes(5 * kStripe, 9);
  LOOM_ASSERT_OK(tier->Write("layers.0/w", data));
  EXPECT_THAT(ListDirectory(options.directories[0]), ElementsAre("layers.0%2Fw.0.ldt"));
  for (int d = 1; d < GetParam().directories; ++d) {
    EXPECT_THAT(
        ListDirectory(options.directories[d]),
        ElementsAre(MatchesRegex(absl::StrCat("layers\\.0%2Fw\\.", d, "\\.[0-9a-f]{16}\\.ldt"))));
  }
  // 1 MiB stripes would put this tensor in one file only.
  const std::vector<std::byte> small = SeededBytes(kStripe, 10);
  LOOM_ASSERT_OK(tier->Write("small", small));
  EXPECT_THAT(ListDirectory(options.directories[0]),
              ElementsAre("layers.0%2Fw.0.ldt", "small.0.ldt"));
}

TEST_P(DiskTierTest, OverwriteKeepsOnlyTheNewData) {
  const DiskTierOptions options = Options("overwrite");
  LOOM_CREATE_OR_SKIP(tier, options);
  const std::vector<std::byte> big = SeededBytes(7 * kStripe + 3, 1);
  const std::vector<std::byte> small = SeededBytes(100, 2);
  const std::vector<std::byte> other = SeededBytes(7 * kStripe + 3, 3);
  LOOM_ASSERT_OK(tier->Write("w", big));
  LOOM_ASSERT_OK(tier->Write("w", small));
  std::vector<std::byte> back(small.size());
  LOOM_ASSERT_OK(tier->Read("w", absl::MakeSpan(back)));
  EXPECT_TRUE(back == small);
  // The wider tensor's files in the other directories are gone.
  for (int d = 1; d < GetParam().directories; ++d) {
    EXPECT_TRUE(ListDirectory(options.directories[d]).empty()) << options.directories[d];
  }
  LOOM_ASSERT_OK(tier->Write("w", other));
  back.resize(other.size());
  LOOM_ASSERT_OK(tier->Read("w", absl::MakeSpan(back)));
  EXPECT_TRUE(back == other);
  EXPECT_THAT(tier->Read("w", absl::MakeSpan(back).first(100)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat("the output buffer has 100 bytes, the stored "
                                              "tensor has ",
                                              other.size()))));
}

TEST_P(DiskTierTest, RemoveContainsAndNotFound) {
  const DiskTierOptions options = Options("remove");
  LOOM_CREATE_OR_SKIP(tier, options);
  std::vector<std::byte> buf(10);
  EXPECT_FALSE(tier->Contains("x"));
  EXPECT_THAT(tier->Read("x", absl::MakeSpan(buf)),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("tensor 'x' is not stored")));
  EXPECT_THAT(tier->StoredBytes("x"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("'x'")));
  EXPECT_THAT(tier->Remove("x"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("tensor 'x' is not stored")));
  LOOM_ASSERT_OK(tier->Write("x", SeededBytes(4 * kStripe, 4)));
  EXPECT_TRUE(tier->Contains("x"));
  LOOM_ASSERT_OK(tier->Remove("x"));
  EXPECT_FALSE(tier->Contains("x"));
  for (const std::string& dir : options.directories) EXPECT_TRUE(ListDirectory(dir).empty());
  EXPECT_THAT(tier->Write("", buf),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tensor name is empty")));
  EXPECT_FALSE(tier->Contains(""));
}

TEST_P(DiskTierTest, ConcurrentWritesAndReadsOfDifferentTensors) {
  const DiskTierOptions options = Options("concurrent");
  LOOM_CREATE_OR_SKIP(tier, options);
  constexpr int kThreads = 6, kRounds = 4;
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds && errors[t].empty(); ++r) {
        const std::string name = absl::StrCat("thread", t);
        const std::vector<std::byte> data = SeededBytes(3 * kStripe + 1000 * t + r, t * 100 + r);
        absl::Status s = tier->Write(name, data);
        std::vector<std::byte> back(data.size());
        if (s.ok()) s = tier->Read(name, absl::MakeSpan(back));
        // Every thread also reads and writes one shared name: serialized, never torn.
        const std::vector<std::byte> shared = SeededBytes(2 * kStripe, 777);
        if (s.ok()) s = tier->Write("shared", shared);
        std::vector<std::byte> shared_back(shared.size());
        if (s.ok()) s = tier->Read("shared", absl::MakeSpan(shared_back));
        if (!s.ok()) {
          errors[t] = s.ToString();
        } else if (back != data || shared_back != shared) {
          errors[t] = absl::StrCat("round ", r, ": data differ");
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
}

TEST_P(DiskTierTest, ReadsTensorsWrittenWithOtherStripeSizes) {
  DiskTierOptions options = Options("restripe");
  LOOM_CREATE_OR_SKIP(tier, options);
  const std::vector<std::byte> data = SeededBytes(9 * kStripe + 77, 5);
  LOOM_ASSERT_OK(tier->Write("w", data));
  tier.reset();
  options.stripe_bytes = 4 * kStripe;  // the header's layout wins
  options.checksum_block_bytes = 4096;
  LOOM_CREATE_OR_SKIP(reopened, options);
  std::vector<std::byte> back(data.size());
  LOOM_ASSERT_OK(reopened->Read("w", absl::MakeSpan(back)));
  EXPECT_TRUE(back == data);
}

TEST_P(DiskTierTest, FailedWriteLeavesThePreviousTensor) {
  const DiskTierOptions options = Options("failed_write");
  LOOM_CREATE_OR_SKIP(tier, options);
  const std::vector<std::byte> old_data = SeededBytes(5 * kStripe, 11);
  LOOM_ASSERT_OK(tier->Write("w", old_data));
  // A file-size limit makes the next Write fail part-way (fallocate: EFBIG).
  rlimit saved;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  const sighandler_t old_handler = ::signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 2 * kStripe;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const absl::Status failed = tier->Write("w", SeededBytes(12 * kStripe, 12));
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &saved), 0);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_THAT(failed,
              StatusIs(absl::StatusCode::kOutOfRange,
                       AllOf(HasSubstr("tensor 'w': fallocate("), HasSubstr("File too large"))));
  std::vector<std::byte> back(old_data.size());
  LOOM_ASSERT_OK(tier->Read("w", absl::MakeSpan(back)));
  EXPECT_TRUE(back == old_data);
  for (const std::string& dir : options.directories) {
    for (const std::string& f : ListDirectory(dir)) EXPECT_TRUE(absl::EndsWith(f, ".ldt")) << f;
  }
}

// What a crash before the commit leaves: the previous version's files, plus new files
// k >= 1 and a temporary file 0 of the unfinished Write. The previous version reads
// back intact; Remove reclaims everything.
TEST_P(DiskTierTest, UnfinishedRewriteLeavesThePreviousVersion) {
  const DiskTierOptions options = Options("unfinished");
  LOOM_CREATE_OR_SKIP(tier, options);
  const std::vector<std::byte> v1 = SeededBytes(7 * kStripe + 9, 31);
  LOOM_ASSERT_OK(tier->Write("w", v1));
  std::vector<std::vector<std::string>> v1_names;
  std::vector<std::vector<std::vector<std::byte>>> v1_bytes;
  for (const std::string& dir : options.directories) {
    v1_names.push_back(ListDirectory(dir));
    v1_bytes.emplace_back();
    for (const std::string& f : v1_names.back()) {
      v1_bytes.back().push_back(disk_testing::ReadWholeFile(dir + "/" + f));
    }
  }
  LOOM_ASSERT_OK(tier->Write("w", SeededBytes(7 * kStripe + 9, 32)));
  // Roll back to "the rename of file 0 never happened": the new file 0 becomes its
  // temporary, the old files are back.
  const std::string dir0 = options.directories[0];
  ASSERT_EQ(::rename((dir0 + "/w.0.ldt").c_str(), (dir0 + "/w.0.ldt.tmp-1-1").c_str()), 0);
  for (size_t d = 0; d < options.directories.size(); ++d) {
    for (size_t i = 0; i < v1_names[d].size(); ++i) {
      disk_testing::WriteWholeFile(options.directories[d] + "/" + v1_names[d][i], v1_bytes[d][i]);
    }
  }
  std::vector<std::byte> back(v1.size());
  LOOM_ASSERT_OK(tier->Read("w", absl::MakeSpan(back)));
  EXPECT_TRUE(back == v1);
  LOOM_ASSERT_OK(tier->Remove("w"));
  for (const std::string& dir : options.directories) {
    EXPECT_THAT(ListDirectory(dir), ::testing::IsEmpty()) << dir;
  }
}

std::string ConfigName(const ::testing::TestParamInfo<Config>& info) {
  return absl::StrCat(IoEngineName(info.param.engine), info.param.direct ? "_direct" : "_buffered",
                      "_", info.param.directories, "dirs");
}

std::vector<Config> AllConfigs() {
  std::vector<Config> configs;
  for (IoEngine engine : {IoEngine::kIoUring, IoEngine::kThreadPool}) {
    for (bool direct : {true, false}) {
      for (int dirs : {1, 2, 3}) configs.push_back({engine, direct, dirs});
    }
  }
  return configs;
}

INSTANTIATE_TEST_SUITE_P(Configs, DiskTierTest, ::testing::ValuesIn(AllConfigs()), ConfigName);

// Direct and buffered I/O write the same format: each reads what the other wrote, and
// the files have the same size and the same data bytes.
TEST(DiskTierModesTest, DirectAndBufferedAgree) {
  DiskTierOptions direct_options;
  direct_options.directories = {MakeTestDirectory("modes_a"), MakeTestDirectory("modes_b")};
  direct_options.stripe_bytes = kStripe;
  direct_options.checksum_block_bytes = kBlock;
  DiskTierOptions buffered_options = direct_options;
  buffered_options.direct_io = false;
  LOOM_ASSERT_OK_AND_ASSIGN(auto direct, DiskTier::Create(direct_options));
  LOOM_ASSERT_OK_AND_ASSIGN(auto buffered, DiskTier::Create(buffered_options));
  if (!direct->stats().direct_io) {
    GTEST_LOG_(INFO) << "O_DIRECT refused here: " << direct->stats().direct_io_note;
  }
  const std::vector<std::byte> data = SeededBytes(5 * kStripe + 999, 21);
  std::vector<std::byte> back(data.size());
  LOOM_ASSERT_OK(direct->Write("by_direct", data));
  LOOM_ASSERT_OK(buffered->Read("by_direct", absl::MakeSpan(back)));
  EXPECT_TRUE(back == data);
  LOOM_ASSERT_OK(buffered->Write("by_buffered", data));
  std::fill(back.begin(), back.end(), std::byte{0});
  LOOM_ASSERT_OK(direct->Read("by_buffered", absl::MakeSpan(back)));
  EXPECT_TRUE(back == data);
  for (size_t d = 0; d < direct_options.directories.size(); ++d) {
    const std::string& dir = direct_options.directories[d];
    const std::string suffix = absl::StrCat(".", d, ".");
    const std::vector<std::byte> a =
        disk_testing::ReadWholeFile(disk_testing::FindFile(dir, "by_direct" + suffix));
    const std::vector<std::byte> b =
        disk_testing::ReadWholeFile(disk_testing::FindFile(dir, "by_buffered" + suffix));
    ASSERT_EQ(a.size(), b.size()) << dir;
    // Headers differ in the tensor name and write id; the data after them is identical.
    EXPECT_TRUE(std::equal(a.begin() + 4096, a.end(), b.begin() + 4096)) << dir;
  }
}

// tmpfs: older kernels refuse O_DIRECT there (the fallback), 6.6+ accept it. Either way
// the tier works and says what it does.
TEST(DiskTierModesTest, WorksOnTmpfs) {
  if (::access("/dev/shm", W_OK) != 0) GTEST_SKIP() << "no writable /dev/shm";
  const std::string dir = MakeTestDirectory("loom_disk_tier_test", "/dev/shm");
  DiskTierOptions options;
  options.directories = {dir};
  LOOM_ASSERT_OK_AND_ASSIGN(auto tier, DiskTier::Create(options));
  GTEST_LOG_(INFO) << "tmpfs: direct_io=" << tier->stats().direct_io << " "
                   << tier->stats().direct_io_note;
  const std::vector<std::byte> data = SeededBytes((2 << 20) + 5, 8);
  std::vector<std::byte> back(data.size());
  LOOM_ASSERT_OK(tier->Write("w", data));
  LOOM_ASSERT_OK(tier->Read("w", absl::MakeSpan(back)));
  EXPECT_TRUE(back == data);
  LOOM_ASSERT_OK(tier->Remove("w"));
  ::rmdir(dir.c_str());
}

TEST(DiskTierModesTest, AutoEngineSaysWhatItUses) {
  DiskTierOptions options;
  options.directories = {MakeTestDirectory("auto")};
  LOOM_ASSERT_OK_AND_ASSIGN(auto tier, DiskTier::Create(options));
  const DiskTierStats stats = tier->stats();
  EXPECT_NE(stats.engine, IoEngine::kAuto);
  if (stats.engine == IoEngine::kThreadPool) {
    EXPECT_THAT(stats.engine_note, HasSubstr("io_uring unavailable"));
  } else {
    EXPECT_EQ(stats.engine_note, "");
  }
}

}  // namespace
}  // namespace loom
