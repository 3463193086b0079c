#include "models/gpt/byte_corpus.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

// Writes `bytes` to a fresh file and returns its path.
std::string WriteFile(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = TempPath(name);
  FILE* file = std::fopen(path.c_str(), "wb");
  EXPECT_NE(file, nullptr) << path;
  if (file == nullptr) return path;
  if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), file);
  std::fclose(file);
  return path;
}

// Seeded bytes whose every 8-byte window occurs once (so a sequence's place is known).
std::vector<uint8_t> Text(size_t n, uint64_t seed) {
  std::vector<uint8_t> bytes(n);
  uint64_t x = seed;
  for (size_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    bytes[i] = static_cast<uint8_t>(x >> 56);
  }
  return bytes;
}

TEST(ByteCorpusTest, TrainingSequencesAreTheFileBytesBeforeTheHeldOutPart) {
  const std::vector<uint8_t> text = Text(20000, 1);
  ByteCorpusOptions options;
  options.paths = {WriteFile("one", text)};
  options.seq_len = 16;
  options.eval_fraction = 0.1;
  LOOM_ASSERT_OK_AND_ASSIGN(ByteCorpus corpus, ByteCorpus::Open(options));
  EXPECT_EQ(corpus.train_bytes(), 18000);
  EXPECT_EQ(corpus.eval_bytes(), 2000);
  LOOM_ASSERT_OK_AND_ASSIGN(GptBatch batch, corpus.Sequences(100, 50));
  ASSERT_EQ(batch.tokens.size(), 50u * 16);
  std::set<int64_t> offsets;
  for (int64_t s = 0; s < 50; ++s) {
    const int64_t offset = corpus.TrainOffset(100 + s);
    offsets.insert(offset);
    ASSERT_GE(offset, 0);
    ASSERT_LE(offset + 16, corpus.train_bytes() - 1) << "a target read held-out bytes";
    for (int64_t i = 0; i < 16; ++i) {
      EXPECT_EQ(batch.tokens[s * 16 + i], text[offset + i]);
      EXPECT_EQ(batch.targets[s * 16 + i], text[offset + i + 1]);
    }
  }
  EXPECT_GT(offsets.size(), 45u) << "offsets should be spread, not repeated";
}

TEST(ByteCorpusTest, SameGlobalBatchOnEveryMeshAndEveryRun) {
  ByteCorpusOptions options;
  options.paths = {WriteFile("mesh", Text(5000, 2))};
  options.seq_len = 8;
  LOOM_ASSERT_OK_AND_ASSIGN(ByteCorpus a, ByteCorpus::Open(options));
  LOOM_ASSERT_OK_AND_ASSIGN(ByteCorpus b, ByteCorpus::Open(options));  // a "resumed" run
  // Step 3 at dp 2 x 2 microbatches of 2, and at dp 1 x 8 microbatches of 1.
  std::vector<int64_t> wide, narrow;
  for (int64_t dp = 0; dp < 2; ++dp) {
    for (int64_t m = 0; m < 2; ++m) {
      LOOM_ASSERT_OK_AND_ASSIGN(GptBatch part, a.Microbatch({2, 2, 2}, 3, m, dp));
      wide.insert(wide.end(), part.tokens.begin(), part.tokens.end());
    }
  }
  for (int64_t m = 0; m < 8; ++m) {
    LOOM_ASSERT_OK_AND_ASSIGN(GptBatch part, b.Microbatch({1, 8, 1}, 3, m, 0));
    narrow.insert(narrow.end(), part.tokens.begin(), part.tokens.end());
  }
  EXPECT_EQ(wide, narrow);
  LOOM_ASSERT_OK_AND_ASSIGN(GptBatch next, a.Microbatch({1, 8, 1}, 4, 0, 0));
  EXPECT_NE(std::vector<int64_t>(narrow.begin(), narrow.begin() + 8), next.tokens);
  // Another seed, other offsets.
  options.seed = 8;
  LOOM_ASSERT_OK_AND_ASSIGN(ByteCorpus c, ByteCorpus::Open(options));
  int differ = 0;
  for (int64_t k = 0; k < 20; ++k) differ += a.TrainOffset(k) != c.TrainOffset(k);
  EXPECT_GT(differ, 15);
}

TEST(ByteCorpusTest, EvaluationSequencesAreFixedAndHeldOut) {
  const std::vector<uint8_t> text = Text(1000, 3);
  ByteCorpusOptions options;
  options.paths = {WriteFile("eval", text)};
  options.seq_len = 9;
  options.eval_fraction = 0.2;  // 200 bytes: 20 sequences of 10
  LOOM_ASSERT_OK_AND_ASSIGN(ByteCorpus corpus, ByteCorpus::Open(options));
  EXPECT_EQ(corpus.EvalCount(), 20);
  LOOM_ASSERT_OK_AND_ASSIGN(GptBatch all, corpus.EvalSequences(0, 20));
  for (int64_t j = 0; j < 20; ++j) {
    for (int64_t i = 0; i < 9; ++i) {
      EXPECT_EQ(all.tokens[j * 9 + i], text[800 + j * 10 + i]);
      EXPECT_EQ(all.targets[j * 9 + i], text[800 + j * 10 + i + 1]);
    }
  }
  LOOM_ASSERT_OK_AND_ASSIGN(GptBatch tail, corpus.EvalSequences(18, 2));
  EXPECT_EQ(tail.tokens, std::vector<int64_t>(all.tokens.begin() + 18 * 9, all.tokens.end()));
  EXPECT_THAT(corpus.EvalSequences(15, 6),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("evaluation sequences [15, +6) are outside the 20")));
  options.eval_fraction = 0.0;
  LOOM_ASSERT_OK_AND_ASSIGN(ByteCorpus none, ByteCorpus::Open(options));
  EXPECT_EQ(none.EvalCount(), 0);
}

TEST(ByteCorpusTest, FilesReadAsOneTextAcrossTheirBoundary) {
  const std::vector<uint8_t> first = Text(37, 4), second = Text(50, 5);
  std::vector<uint8_t> joined = first;
  joined.insert(joined.end(), second.begin(), second.end());
  ByteCorpusOptions options;
  options.paths = {WriteFile("first", first), WriteFile("second", second)};
  options.seq_len = 20;
  options.eval_fraction = 0.0;
  LOOM_ASSERT_OK_AND_ASSIGN(ByteCorpus corpus, ByteCorpus::Open(options));
  EXPECT_EQ(corpus.train_bytes(), 87);
  bool crossed = false;
  for (int64_t k = 0; k < 200; ++k) {
    const int64_t offset = corpus.TrainOffset(k);
    LOOM_ASSERT_OK_AND_ASSIGN(GptBatch one, corpus.Sequences(k, 1));
    for (int64_t i = 0; i < 20; ++i) ASSERT_EQ(one.tokens[i], joined[offset + i]);
    crossed |= offset < 37 && offset + 20 >= 37;
  }
  EXPECT_TRUE(crossed) << "no sequence ran across the two files";
}

TEST(ByteCorpusTest, BadFilesAndOptionsAreOneLineErrors) {
  ByteCorpusOptions options;
  options.seq_len = 16;
  options.paths = {TempPath("missing")};
  EXPECT_THAT(ByteCorpus::Open(options),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("cannot open " + TempPath("missing") + ": No such file")));
  options.paths = {WriteFile("empty", {})};
  EXPECT_THAT(ByteCorpus::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty is empty")));
  options.paths = {WriteFile("short", Text(16, 6))};
  EXPECT_THAT(ByteCorpus::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("needs at least one sequence of seq_len + 1 = 17 bytes")));
  options.paths = {WriteFile("held", Text(100, 7))};
  options.eval_fraction = 0.1;  // 10 bytes held out: shorter than a sequence
  EXPECT_THAT(ByteCorpus::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("10 held out")));
  options.eval_fraction = 0.7;
  EXPECT_THAT(ByteCorpus::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("eval_fraction 0.7 is outside [0, 0.5]")));
  options.eval_fraction = 0.05;
  const std::string fifo = TempPath("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  options.paths = {fifo};
  EXPECT_THAT(ByteCorpus::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not a regular file")));
  options.paths = {TempPath("")};  // the directory itself
  EXPECT_THAT(ByteCorpus::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("is not a regular file")));
  options.paths.clear();
  EXPECT_THAT(ByteCorpus::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no files")));
  options.paths = {WriteFile("ok", Text(100, 8))};
  options.seq_len = 0;
  EXPECT_THAT(ByteCorpus::Open(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("seq_len 0 is below 1")));
}

TEST(ByteCorpusTest, MicrobatchRejectsBadLayoutsAsMarkovDataDoes) {
  ByteCorpusOptions options;
  options.paths = {WriteFile("layout", Text(1000, 9))};
  LOOM_ASSERT_OK_AND_ASSIGN(ByteCorpus corpus, ByteCorpus::Open(options));
  EXPECT_THAT(corpus.Microbatch({4, 2, 2}, 0, 2, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("ByteCorpus: microbatch 2 is outside [0, 2)")));
  EXPECT_THAT(corpus.Microbatch({4, 2, 2}, INT64_MAX / 4, 0, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("past the int64 range")));
}

}  // namespace
}  // namespace loom
