#include "tools/training/metrics_log.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void WriteAll(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// Same bits: NaN equals NaN, 0.0 differs from -0.0.
bool SameDouble(double a, double b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

void ExpectSameLine(const MetricsLine& got, const MetricsLine& want) {
  EXPECT_EQ(got.step, want.step);
  EXPECT_TRUE(SameDouble(got.loss, want.loss)) << got.loss << " vs " << want.loss;
  ASSERT_EQ(got.eval_loss.has_value(), want.eval_loss.has_value()) << want.step;
  if (want.eval_loss) {
    EXPECT_TRUE(SameDouble(*got.eval_loss, *want.eval_loss)) << want.step;
  }
  EXPECT_TRUE(SameDouble(got.lr, want.lr)) << got.lr << " vs " << want.lr;
  EXPECT_TRUE(SameDouble(got.tokens_per_second, want.tokens_per_second));
  EXPECT_EQ(got.bytes_sent, want.bytes_sent);
  EXPECT_TRUE(SameDouble(got.seconds, want.seconds));
}

MetricsLine Step(int64_t step) {
  MetricsLine line;
  line.step = step;
  line.loss = 5.5 - 0.01 * static_cast<double>(step);
  if (step % 5 == 0) line.eval_loss = line.loss + 0.125;
  line.lr = static_cast<double>(3e-3f);
  line.tokens_per_second = 1000.0 + static_cast<double>(step) / 3;
  line.bytes_sent = step << 20;
  line.seconds = 0.1 * static_cast<double>(step);
  return line;
}

TEST(MetricsLogTest, FormatIsOneCompactObject) {
  MetricsLine line{3, 2.5, std::nullopt, 0.001, 5120, 1048576, 1.25};
  EXPECT_EQ(FormatMetricsLine(line), R"({"step":3,"loss":2.5,"lr":0.001,"tokens_per_second":5120,)"
                                     R"("bytes_sent":1048576,"seconds":1.25})");
  line.eval_loss = 0.1;
  line.loss = std::numeric_limits<double>::quiet_NaN();
  line.lr = 1.0 / 3;
  EXPECT_EQ(FormatMetricsLine(line),
            R"({"step":3,"loss":null,"eval_loss":0.1,"lr":0.3333333333333333,)"
            R"("tokens_per_second":5120,"bytes_sent":1048576,"seconds":1.25})");
}

TEST(MetricsLogTest, RoundTripIsExact) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<MetricsLine> lines;
  for (int64_t step = 1; step <= 12; ++step) lines.push_back(Step(step));
  lines.push_back({13, 0.1, 1.0 / 3, 5e-324, 1.7976931348623157e308,
                   std::numeric_limits<int64_t>::max(), -0.0});
  lines.push_back(
      {std::numeric_limits<int64_t>::min(), 2.0 / 3, 1e-300, 123456789.123456789, 0, 0, 1e22});
  const std::string path = TempPath("round_trip.jsonl");
  {
    LOOM_ASSERT_OK_AND_ASSIGN(MetricsLog log, MetricsLog::Open(path));
    EXPECT_EQ(log.path(), path);
    for (const MetricsLine& line : lines) LOOM_ASSERT_OK(log.Append(line));
    // Flushed by each Append: readable before the log is closed.
    LOOM_ASSERT_OK_AND_ASSIGN(std::vector<MetricsLine> early, ReadMetricsFile(path));
    EXPECT_EQ(early.size(), lines.size());
  }
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<MetricsLine> read, ReadMetricsFile(path));
  ASSERT_EQ(read.size(), lines.size());
  for (size_t i = 0; i < lines.size(); ++i) ExpectSameLine(read[i], lines[i]);

  // Non-finite numbers are written as null and read back as NaN.
  LOOM_ASSERT_OK_AND_ASSIGN(MetricsLog log, MetricsLog::Open(path));
  const double inf = std::numeric_limits<double>::infinity();
  LOOM_ASSERT_OK(log.Append({1, inf, -inf, nan, 1, 2, 3}));
  LOOM_ASSERT_OK_AND_ASSIGN(read, ReadMetricsFile(path));
  ASSERT_EQ(read.size(), 1u);
  EXPECT_TRUE(std::isnan(read[0].loss));
  ASSERT_TRUE(read[0].eval_loss.has_value());  // null is a value, not "no evaluation"
  EXPECT_TRUE(std::isnan(*read[0].eval_loss));
  EXPECT_TRUE(std::isnan(read[0].lr));
}

TEST(MetricsLogTest, OpenEmptiesAnOldFile) {
  const std::string path = TempPath("fresh.jsonl");
  WriteAll(path, "not even json\n");
  LOOM_ASSERT_OK_AND_ASSIGN(MetricsLog log, MetricsLog::Open(path));
  EXPECT_EQ(ReadAll(path), "");
}

TEST(MetricsLogTest, ParserTakesKeysInAnyOrderAndBlanks) {
  LOOM_ASSERT_OK_AND_ASSIGN(
      MetricsLine line,
      ParseMetricsLine(" { \"seconds\" : 2E1 ,\t\"bytes_sent\":0, \"tokens_per_second\":-1.5e-3,"
                       "\"lr\":1e+2,\"eval_loss\":null,\"loss\":-0,\"step\":-7 }\r"));
  ExpectSameLine(line, {-7, -0.0, std::numeric_limits<double>::quiet_NaN(), 100, -1.5e-3, 0, 20});
}

TEST(MetricsLogTest, MalformedLinesNameTheColumn) {
  const std::string good = R"("lr":1,"tokens_per_second":1,"bytes_sent":1,"seconds":1})";
  struct Case {
    std::string text;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"", "column 1: expected '{' at the start of the line, found the end of the line"},
      {"[1]", "column 1: expected '{' at the start of the line, found '['"},
      {R"({"step":1,"loss":2,)" + good + ",", "column 76: found ',' after the object"},
      {R"({"step":1,"loss":2 "lr":1})", "column 20: expected ',' or '}' after a value, found '\"'"},
      {R"({"step":1,"loss":})", "column 18: expected a number or null, found '}'"},
      {R"({"step":1,"loss":"2",)" + good, "column 18: expected a number or null, found '\"'"},
      {R"({"step":1,"loss":NaN,)" + good, "column 18: expected a number or null, found 'N'"},
      {R"({"step":1,"loss":+2,)" + good, "column 18: expected a number or null, found '+'"},
      {R"({"step":1,"loss":.5,)" + good, "column 18: expected a number or null, found '.'"},
      {R"({"step":1,"loss":01,)" + good, "column 19: expected ',' or '}' after a value, found '1'"},
      {R"({"step":1,"loss":1.,)" + good, "column 20: expected a digit after '.', found ','"},
      {R"({"step":1,"loss":1e,)" + good, "column 20: expected an exponent, found ','"},
      {R"({"step":1,"loss":2,"loss":3,)" + good, "column 20: repeated key \"loss\""},
      {R"({"step":1,"los":2,)" + good, "column 11: unknown key \"los\""},
      {R"({"step":1,"lo\ss":2,)" + good, "column 14: an escape in a key"},
      {R"({"step":1,"loss)", "column 11: a key without its closing '\"'"},
      {R"({"step":1,loss:2})", "column 11: expected '\"' to open a key, found 'l'"},
      {R"({"step":1 "loss":2})", "column 11: expected ',' or '}' after a value, found '\"'"},
      {R"({"step" 1})", "column 9: expected ':' after \"step\", found '1'"},
      {R"({"step":1,"loss":2,"lr":1,"tokens_per_second":1,"seconds":1})",
       "missing key \"bytes_sent\""},
      {R"({"loss":2,)" + good, "missing key \"step\""},
      {"{}", "missing key \"step\""},
      {R"({"step":1.5,"loss":2,)" + good, "column 9: step must be an integer, found 1.5"},
      {R"({"step":1e3,"loss":2,)" + good, "column 9: step must be an integer, found 1e3"},
      {R"({"step":null,"loss":2,)" + good, "column 9: step cannot be null"},
      {R"({"step":99999999999999999999,"loss":2,)" + good,
       "column 9: step 99999999999999999999 is out of int64 range"},
      {"{\"step\":1,\"loss\":2\x01", "column 19: expected ',' or '}' after a value, found '\\x01'"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseMetricsLine(c.text),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)))
        << c.text;
  }
}

TEST(MetricsLogTest, ReadNamesFileAndLine) {
  const std::string path = TempPath("bad.jsonl");
  WriteAll(path, FormatMetricsLine(Step(1)) + "\n\n" + FormatMetricsLine(Step(2)) + "\n" +
                     R"({"step":3,"loss":})" + "\n" + FormatMetricsLine(Step(4)) + "\n");
  EXPECT_THAT(ReadMetricsFile(path),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("ReadMetricsFile: " + path +
                                 " line 4: column 18: expected a number or null, found '}'"
                                 " in: {\"step\":3,\"loss\":}")));
  // A torn last line (no newline) is an error here; only a resume drops it.
  WriteAll(path, FormatMetricsLine(Step(1)) + "\n{\"step\":2,\"lo");
  EXPECT_THAT(ReadMetricsFile(path),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(path + " line 2: column 11:")));
  // A long line is shown cut short.
  WriteAll(path, "{" + std::string(1000, ' ') + "x}\n");
  EXPECT_THAT(ReadMetricsFile(path),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("line 1: column 1002: expected '\"' to open a key")));
  EXPECT_THAT(ReadMetricsFile(path),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("in: {" + std::string(159, ' ') + "..."),
                             ::testing::Not(HasSubstr(std::string(160, ' '))))));
  // Blank lines and a well-formed last line without its newline are fine.
  WriteAll(path, "\n  \n" + FormatMetricsLine(Step(1)) + "\n" + FormatMetricsLine(Step(2)));
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<MetricsLine> lines, ReadMetricsFile(path));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1].step, 2);
}

TEST(MetricsLogTest, ResumeDropsTheStepsToBeRedone) {
  const std::string path = TempPath("resume.jsonl");
  {
    LOOM_ASSERT_OK_AND_ASSIGN(MetricsLog log, MetricsLog::Open(path));
    for (int64_t step = 1; step <= 10; ++step) LOOM_ASSERT_OK(log.Append(Step(step)));
  }
  const std::string before = ReadAll(path);
  {
    LOOM_ASSERT_OK_AND_ASSIGN(MetricsLog log, MetricsLog::OpenForResume(path, 7));
    // The kept lines are the old bytes, unchanged.
    const std::string kept = ReadAll(path);
    EXPECT_EQ(kept, before.substr(0, kept.size()));
    for (int64_t step = 7; step <= 12; ++step) LOOM_ASSERT_OK(log.Append(Step(step)));
  }
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<MetricsLine> lines, ReadMetricsFile(path));
  ASSERT_EQ(lines.size(), 12u);
  for (int64_t step = 1; step <= 12; ++step) ExpectSameLine(lines[step - 1], Step(step));

  // Resuming at the first step keeps nothing; past the end keeps everything.
  { LOOM_ASSERT_OK_AND_ASSIGN(MetricsLog log, MetricsLog::OpenForResume(path, 100)); }
  EXPECT_EQ(ReadMetricsFile(path)->size(), 12u);
  { LOOM_ASSERT_OK_AND_ASSIGN(MetricsLog log, MetricsLog::OpenForResume(path, 1)); }
  EXPECT_EQ(ReadAll(path), "");
}

TEST(MetricsLogTest, ResumeDropsATornLastLine) {
  const std::string path = TempPath("torn.jsonl");
  WriteAll(path, FormatMetricsLine(Step(1)) + "\n" + FormatMetricsLine(Step(2)) +
                     "\n{\"step\":3,\"loss\":5.4");
  LOOM_ASSERT_OK_AND_ASSIGN(MetricsLog log, MetricsLog::OpenForResume(path, 3));
  LOOM_ASSERT_OK(log.Append(Step(3)));
  LOOM_ASSERT_OK_AND_ASSIGN(std::vector<MetricsLine> lines, ReadMetricsFile(path));
  ASSERT_EQ(lines.size(), 3u);
  ExpectSameLine(lines[2], Step(3));
}

TEST(MetricsLogTest, ResumeRefusesACorruptFileAndLeavesIt) {
  const std::string path = TempPath("corrupt.jsonl");
  const std::string text =
      FormatMetricsLine(Step(1)) + "\ngarbage\n" + FormatMetricsLine(Step(3)) + "\n";
  WriteAll(path, text);
  EXPECT_THAT(MetricsLog::OpenForResume(path, 2),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("MetricsLog: " + path + " line 2: column 1: expected '{'")));
  EXPECT_EQ(ReadAll(path), text);
}

TEST(MetricsLogTest, ResumeCreatesAMissingFile) {
  const std::string path = TempPath("new_on_resume.jsonl");
  LOOM_ASSERT_OK_AND_ASSIGN(MetricsLog log, MetricsLog::OpenForResume(path, 50));
  LOOM_ASSERT_OK(log.Append(Step(50)));
  EXPECT_EQ(ReadAll(path), FormatMetricsLine(Step(50)) + "\n");
}

TEST(MetricsLogTest, UnwritableOrUnreadablePaths) {
  const std::string missing = TempPath("no/such/dir/m.jsonl");
  EXPECT_THAT(MetricsLog::Open(missing),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("MetricsLog: open(" + missing + "): No such file or directory")));
  EXPECT_THAT(MetricsLog::OpenForResume(missing, 5),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr(missing), HasSubstr("No such file or directory"))));
  EXPECT_THAT(ReadMetricsFile(missing),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("ReadMetricsFile: open(" + missing +
                                                              "): No such file or directory")));
  const std::string dir = TempPath("a_directory");
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  EXPECT_THAT(MetricsLog::Open(dir),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("MetricsLog: open(" + dir + "): Is a directory")));
  EXPECT_THAT(ReadMetricsFile(dir), StatusIs(absl::StatusCode::kFailedPrecondition,
                                             HasSubstr(dir + " is not a regular file")));
  // A FIFO is refused at once, never waited on.
  const std::string fifo = TempPath("fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_THAT(MetricsLog::Open(fifo), StatusIs(absl::StatusCode::kNotFound,
                                               HasSubstr("open(" + fifo + "): No such device")));
  EXPECT_THAT(ReadMetricsFile(fifo), StatusIs(absl::StatusCode::kFailedPrecondition,
                                              HasSubstr(fifo + " is not a regular file")));
}

TEST(MetricsLogTest, MovedFromLogRefusesAppend) {
  LOOM_ASSERT_OK_AND_ASSIGN(MetricsLog log, MetricsLog::Open(TempPath("moved.jsonl")));
  MetricsLog other = std::move(log);
  LOOM_EXPECT_OK(other.Append(Step(1)));
  EXPECT_THAT(log.Append(Step(2)),  // NOLINT(bugprone-use-after-move): what is tested
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("is not open")));
}

}  // namespace
}  // namespace loom
