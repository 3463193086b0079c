// The command line's file steps without a run: CheckTrainPaths (train_paths.h),
// StepLog (step_log.h) and the report (train_report.h), on real files in a fresh
// directory.
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/status_matchers.h"
#include "core/temp_dir_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tools/training/metrics_log.h"
#include "tools/training/step_log.h"
#include "tools/training/train_paths.h"
#include "tools/training/train_report.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(TrainPathsTest, EachBadPathIsOneLineNamingTheFlag) {
  const std::string dir = FreshTestDirectory("paths");
  const std::string file = dir + "/a_file";
  std::ofstream(file) << "x";
  const std::string empty = dir + "/empty";
  ASSERT_EQ(mkdir(empty.c_str(), 0755), 0);
  struct Case {
    void (*set)(TrainCommand&, const std::string&);
    std::string value;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](TrainCommand& c, const std::string& v) { c.outputs.summary_json = v; },
       dir + "/missing/s.json", "--summary_json"},
      {[](TrainCommand& c, const std::string& v) { c.outputs.trace = v; }, empty,
       "--trace"},
      {[](TrainCommand& c, const std::string& v) { c.options.checkpoint_dir = v; },
       file, "is not a directory"},
      {[](TrainCommand& c, const std::string& v) { c.options.checkpoint_dir = v; },
       dir + "/no/such/parent", "its parent"},
      {[](TrainCommand& c, const std::string& v) {
         c.options.resume_dir = v;
         c.options.resume_required = true;
       },
       empty, "--resume_from " + empty},
      {[](TrainCommand& c, const std::string& v) {
         c.options.offload = OffloadKind::kNvme;
         c.options.nvme_dir = v;
       },
       file, "--nvme_dir: " + file + " is not a directory"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    TrainCommand command;
    c.set(command, c.value);
    EXPECT_THAT(CheckTrainPaths(command),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)));
  }
  // Nothing to resume from is fine for --resume (a restarted job's first start).
  TrainCommand resume;
  resume.options.resume_dir = empty;
  resume.options.resume_required = false;
  resume.options.checkpoint_dir = dir + "/ckpt";  // made by the first save
  resume.outputs.summary_json = dir + "/s.json";
  LOOM_EXPECT_OK(CheckTrainPaths(resume));
}

StepReport Report(int64_t step) {
  StepReport r;
  r.step = step;
  r.loss = 4.0 - 0.25 * static_cast<double>(step);
  r.lr = 1e-3;
  r.seconds = 0.01;
  r.tokens_per_second = 1000;
  r.comm_bytes = 100 * step;
  if (step == 3) r.eval_loss = 3.5;
  return r;
}

TEST(StepLogTest, PrintsStreamsAndPlotsTheSteps) {
  const std::string dir = FreshTestDirectory("steplog");
  TrainCommand command;
  command.outputs.metrics = dir + "/m.jsonl";
  command.outputs.plot = dir + "/loss.svg";
  std::ostringstream out;
  LOOM_ASSERT_OK_AND_ASSIGN(StepLog log, StepLog::Open(command, /*prints=*/true, out));
  for (int64_t step = 1; step <= 3; ++step) log.Record(Report(step));
  LOOM_EXPECT_OK(log.status());
  EXPECT_EQ(out.str().find("step    1  loss 3.7500"), 0u) << out.str();
  LOOM_ASSERT_OK_AND_ASSIGN(const std::vector<MetricsLine> lines,
                            ReadMetricsFile(command.outputs.metrics));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[2].step, 3);
  EXPECT_EQ(lines[2].loss, 3.25);
  EXPECT_EQ(lines[2].eval_loss, 3.5);
  EXPECT_EQ(lines[1].bytes_sent, 200);
  TrainSummary summary;
  summary.uniform_loss = 4.1;
  LOOM_ASSERT_OK(log.WritePlot(command, summary));
  const std::string svg = ReadAll(command.outputs.plot);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_THAT(out.str(), HasSubstr("plot: " + command.outputs.plot));
}

TEST(StepLogTest, ARankThatDoesNotPrintWritesNothing) {
  const std::string dir = FreshTestDirectory("steplog");
  TrainCommand command;
  command.outputs.metrics = dir + "/m.jsonl";
  command.outputs.plot = dir + "/loss.svg";
  std::ostringstream out;
  LOOM_ASSERT_OK_AND_ASSIGN(StepLog log, StepLog::Open(command, /*prints=*/false, out));
  log.Record(Report(1));
  LOOM_ASSERT_OK(log.WritePlot(command, TrainSummary()));
  EXPECT_TRUE(out.str().empty());
  struct stat st;
  EXPECT_NE(stat(command.outputs.metrics.c_str(), &st), 0);
  EXPECT_NE(stat(command.outputs.plot.c_str(), &st), 0);
}

TEST(TrainReportTest, HeaderSummaryAndFilesSayWhatTheRunWas) {
  const std::string dir = FreshTestDirectory("report");
  TrainCommand command;  // the default job: dp 2, tp 2, pp 2, zero 3
  std::ostringstream header;
  LOOM_ASSERT_OK(PrintTrainHeader(command, 8, header));
  EXPECT_THAT(header.str(), HasSubstr("train: dp=2 tp=2 pp=2 (8 thread ranks), schedule 1f1b, "
                                      "4 microbatches x 2 sequences, zero 3 (reshard block)"));
  EXPECT_THAT(header.str(), HasSubstr("mesh: tp fastest, then cp, then pp, then dp"));
  command.launch.transport = RankTransport::kShm;
  command.options.cp = 2;
  command.cp_comm_why = "auto, because";
  std::ostringstream shm;
  LOOM_ASSERT_OK(PrintTrainHeader(command, 16, shm));
  EXPECT_THAT(shm.str(), HasSubstr("(16 processes over shm)"));
  EXPECT_THAT(shm.str(), HasSubstr("attention over cp: ring (auto, because)"));

  TrainSummary summary;
  summary.final_loss = 2.5;
  summary.uniform_loss = 4.1589;
  summary.peak_activation_bytes_per_rank = 1000;
  summary.estimated_activation_bytes_per_rank = 1000;
  summary.trace_json = "{\"traceEvents\":[]}";
  std::ostringstream closing;
  PrintTrainSummary(command, summary, MfuReport(), closing);
  EXPECT_THAT(closing.str(), HasSubstr("final loss 2.5000 (uniform guess log V = 4.1589"));
  EXPECT_THAT(closing.str(), HasSubstr("measured 1000 bytes, 1.00 times the estimate"));
  EXPECT_THAT(closing.str(), Not(HasSubstr("hosts:")));  // one host: no line
  summary.hosts = "2 hosts of 2 ranks, in blocks";
  std::ostringstream across;
  PrintTrainSummary(command, summary, MfuReport(), across);
  EXPECT_THAT(across.str(), HasSubstr("\nhosts: 2 hosts of 2 ranks, in blocks\n"));
  ReferenceComparison reference;
  reference.reference_final_loss = 2.5;
  reference.max_abs_param_diff = 2e-6;
  reference.max_abs_param = 1.0;
  std::ostringstream line;
  PrintReference(reference, line);
  EXPECT_THAT(line.str(), HasSubstr("largest parameter difference 2e-06 (2e-06 of the largest"));

  command.outputs.trace = dir + "/trace.json";
  command.outputs.summary_json = dir + "/summary.json";
  std::ostringstream written;
  LOOM_ASSERT_OK(WriteTrainFiles(command, summary, MfuReport(), reference, written));
  EXPECT_EQ(ReadAll(command.outputs.trace), summary.trace_json);
  const nlohmann::json json = nlohmann::json::parse(ReadAll(command.outputs.summary_json));
  EXPECT_EQ(json["final_loss"].get<double>(), 2.5);
  EXPECT_EQ(json["cp"], 2);
  EXPECT_EQ(json["hosts"], "2 hosts of 2 ranks, in blocks");
  EXPECT_THAT(written.str(), HasSubstr("summary: " + command.outputs.summary_json));
  // An unwritable path names the flag.
  command.outputs.summary_json = dir + "/missing/summary.json";
  EXPECT_THAT(WriteTrainFiles(command, summary, MfuReport(), reference, written).message(),
              HasSubstr("--summary_json"));
}

}  // namespace
}  // namespace loom
