#include "tools/training/summary_json.h"

#include <string>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tools/planner/this_cpu.h"

namespace loom {
namespace {

TrainCommand Command() {
  TrainCommand c;
  c.options.dp = 1;
  c.options.tp = 1;
  c.options.pp = 1;
  c.options.zero = 2;
  c.options.microbatches = 3;
  c.options.micro_batch = 5;
  c.options.schedule = PipelineScheduleKind::kZeroBubbleH1;
  c.options.dtype = DType::kBF16;
  c.options.model.layers = 6;
  c.options.model.hidden = 320;
  c.options.model.heads = 5;
  c.options.model.seq_len = 48;
  c.options.model.vocab = 301;
  return c;
}

TrainSummary Summary() {
  TrainSummary s;
  s.final_loss = 2.718281828459045;
  s.peak_model_state_bytes_per_rank = (int64_t{1} << 40) + 3;  // above 2^32
  s.tokens_per_second = 12345.678;
  s.step_breakdown_s.compute = 0.25;
  s.step_breakdown_s.gemm = 0.125;
  s.step_breakdown_s.attention = 0.0625;
  s.step_breakdown_s.optimizer = 0.03;
  s.step_breakdown_s.dp_comm = 0.001;
  s.step_breakdown_s.pp_comm = 0.002;
  s.host_cpu_busy = -1;  // unknown: null
  return s;
}

TEST(SummaryJsonTest, EveryFigureReadsBackExactly) {
  MfuReport mfu;
  mfu.cpu_model = "Xeon \"Sapphire\\Rapids\"\x01";  // quotes, a backslash, a control byte
  mfu.threads_per_rank = 4;
  mfu.mfu = 0.42;
  ReferenceComparison reference;
  reference.reference_final_loss = 2.5;
  reference.max_abs_param_diff = 3e-7;
  const std::string text = TrainSummaryJson(Command(), Summary(), mfu, reference);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(text.find('\n'), text.size() - 1);  // one line
  EXPECT_NE(text.find("\"schedule\": \"zb-h1\", \"microbatches\": 3, "), std::string::npos)
      << text;
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["final_loss"].get<double>(), 2.718281828459045);  // every digit
  EXPECT_TRUE(j["final_eval_loss"].is_null());
  EXPECT_EQ(j["reference_final_loss"].get<double>(), 2.5);
  EXPECT_EQ(j["max_abs_param_diff"].get<double>(), 3e-7);
  EXPECT_EQ(j["peak_model_state_bytes_per_rank"].get<int64_t>(), (int64_t{1} << 40) + 3);
  EXPECT_EQ(j["schedule"], "zb-h1");
  EXPECT_EQ(j["dtype"], "bf16");
  EXPECT_EQ(j["recompute"], "none");
  EXPECT_EQ(j["global_batch"], 15);
  EXPECT_EQ(j["vocab"], 301);
  EXPECT_EQ(j["ffn"], 1280);
  EXPECT_EQ(j["recomputed_forwards"], 0);
  EXPECT_TRUE(j["host_cpu_busy"].is_null());
  EXPECT_EQ(j["cpu_model"], "Xeon \"Sapphire\\Rapids\"\x01");  // escaped, not dropped
  EXPECT_EQ(j["mfu"].get<double>(), 0.42);
  EXPECT_EQ(j["step_breakdown_s"]["gemm"].get<double>(), 0.125);
}

TEST(SummaryJsonTest, WithoutAReferenceItsKeysAreNull) {
  const nlohmann::json j =
      nlohmann::json::parse(TrainSummaryJson(Command(), Summary(), MfuReport(), std::nullopt));
  EXPECT_TRUE(j["reference_final_loss"].is_null());
  EXPECT_TRUE(j["max_abs_param_diff"].is_null());
}

TEST(SummaryJsonTest, OnCudaTheCpuMfuIsNull) {
  TrainCommand command = Command();
  command.options.device = ComputeDevice::kCuda;
  const nlohmann::json j =
      nlohmann::json::parse(TrainSummaryJson(command, Summary(), MfuReport(), std::nullopt));
  EXPECT_TRUE(j["mfu"].is_null());
  EXPECT_EQ(j["device"], "cuda");
}

// The planner's reader (--plan_calibration) reads what the job writes.
TEST(SummaryJsonTest, ThePlannerReadsItBack) {
  MfuReport mfu;
  mfu.threads_per_rank = 4;
  LOOM_ASSERT_OK_AND_ASSIGN(
      planner::JobRun run,
      planner::ParseJobSummary(TrainSummaryJson(Command(), Summary(), mfu, std::nullopt)));
  EXPECT_EQ(run.shape.layers, 6);
  EXPECT_EQ(run.shape.hidden, 320);
  EXPECT_EQ(run.shape.vocab, 301);
  EXPECT_EQ(run.shape.ffn, 1280);
  EXPECT_EQ(run.config.zero, 2);
  EXPECT_EQ(run.config.schedule, PipelineScheduleKind::kZeroBubbleH1);
  EXPECT_EQ(run.global_batch, 15);
  EXPECT_EQ(run.threads_per_rank, 4);
  EXPECT_TRUE(run.overlap_grad_reduce);
  EXPECT_EQ(run.gemm_seconds, 0.125);
  EXPECT_EQ(run.attention_seconds, 0.0625);
  EXPECT_EQ(run.compute_seconds, 0.25);
  EXPECT_DOUBLE_EQ(run.step_seconds, 15.0 * 48 / 12345.678);
}

// --nooverlap_grad_reduce reaches the planner (which then prices ZeRO 0's all-reduce
// after the backward); an older summary without the key reads as the default.
TEST(SummaryJsonTest, ThePlannerReadsTheOverlapSwitch) {
  TrainCommand command = Command();
  command.options.overlap_grad_reduce = false;
  const std::string text = TrainSummaryJson(command, Summary(), MfuReport(), std::nullopt);
  EXPECT_FALSE(nlohmann::json::parse(text)["overlap_grad_reduce"].get<bool>());
  LOOM_ASSERT_OK_AND_ASSIGN(planner::JobRun off, planner::ParseJobSummary(text));
  EXPECT_FALSE(off.overlap_grad_reduce);
  nlohmann::json older = nlohmann::json::parse(text);
  older.erase("overlap_grad_reduce");
  LOOM_ASSERT_OK_AND_ASSIGN(planner::JobRun defaulted, planner::ParseJobSummary(older.dump()));
  EXPECT_TRUE(defaulted.overlap_grad_reduce);
  older["overlap_grad_reduce"] = "no";
  EXPECT_THAT(planner::ParseJobSummary(older.dump()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("\"overlap_grad_reduce\" is not true or false")));
}

TEST(SummaryJsonTest, ThePlannerRefusesWhatIsNotASummary) {
  EXPECT_THAT(planner::ParseJobSummary("{\"dp\": 1"),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("not a JSON")));
  EXPECT_THAT(planner::ParseJobSummary("{\"step_breakdown_s\": {}}"),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("\"layers\"")));
  EXPECT_THAT(planner::ParseJobSummary("{\"layers\": \"six\", \"step_breakdown_s\": {}}"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::HasSubstr("\"layers\" is not a number")));
}

}  // namespace
}  // namespace loom
