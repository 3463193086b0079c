#include "pipeline/schedule_csv.h"

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/action.h"
#include "pipeline/generators.h"
#include "pipeline/lowering.h"
#include "pipeline/schedule.h"
#include "pipeline/stage_layout.h"
#include "pipeline/verifier.h"
#include "topology/parallel_config.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

void ExpectSameSchedule(const Schedule& got, const Schedule& want) {
  EXPECT_EQ(got.name, want.name);
  EXPECT_TRUE(got.layout == want.layout)
      << got.layout.ToString() << " != " << want.layout.ToString();
  EXPECT_EQ(got.num_microbatches, want.num_microbatches);
  EXPECT_EQ(got.ranks, want.ranks);
}

// ComputeOnly drops the messages of a lowered schedule.
std::vector<std::vector<Action>> ComputeOnly(const Schedule& schedule) {
  std::vector<std::vector<Action>> ranks(schedule.ranks.size());
  for (size_t r = 0; r < schedule.ranks.size(); ++r) {
    for (const Action& a : schedule.ranks[r]) {
      if (IsCompute(a.kind)) ranks[r].push_back(a);
    }
  }
  return ranks;
}

// The test runs in its runfiles tree, where data files sit at their source paths.
std::string ReadTestdata(const std::string& name) {
  std::ifstream in("pipeline/testdata/" + name, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open pipeline/testdata/" << name;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(ScheduleCsvTest, HeaderExample) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, Make1F1BSchedule(2, 2));
  EXPECT_EQ(ScheduleToCsv(s), "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule back,
                            LoadScheduleCsv("0F0,0F1,,0B0,,0B1\r\n,1F0,1B0,1F1,1B1\r\n"));
  EXPECT_EQ(back.name, "csv");
  EXPECT_EQ(back.layout.ToString(), "loop p=2 v=1");
  EXPECT_EQ(back.num_microbatches, 2);
  EXPECT_EQ(back.ranks, s.ranks);
  EXPECT_THAT(LoadScheduleCsv("0F0,1F0\n1B0\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "stage 1 appears on rank 0 (line 1, cell 2: 1F0) and on rank 1 (line 2, "
                       "cell 1: 1B0); a stage lives on one rank"));
  EXPECT_THAT(LoadScheduleCsv("0F0,0X1\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("line 1 (rank 0), cell 2: cannot parse action \"0X1\"")));
}

TEST(ScheduleCsvTest, LineEnding) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, MakeGPipeSchedule(2, 1));
  CsvWriteOptions crlf;
  crlf.line_ending = "\r\n";
  EXPECT_EQ(ScheduleToCsv(s, crlf), "0F0,0B0\r\n1F0,1B0\r\n");
}

struct Case {
  PipelineScheduleKind kind;
  int64_t p;
  int64_t m;
  int64_t v;
};

std::vector<Case> RoundTripCases() {
  std::vector<Case> cases;
  for (const PipelineScheduleKind kind : {PipelineScheduleKind::kGPipe, PipelineScheduleKind::k1F1B,
                                          PipelineScheduleKind::kZeroBubbleH1}) {
    for (const auto& [p, m] : std::vector<std::pair<int64_t, int64_t>>{
             {1, 1}, {1, 3}, {2, 1}, {2, 4}, {3, 5}, {4, 8}, {8, 3}}) {
      cases.push_back({kind, p, m, 1});
    }
  }
  for (const auto& [p, m, v] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 2, 3}, {2, 4, 2}, {3, 6, 3}, {4, 8, 2}, {4, 8, 4}, {2, 2, 1}}) {
    cases.push_back({PipelineScheduleKind::kInterleaved1F1B, p, m, v});
  }
  // p = 1 is left to the explicit-layout test: one rank with two stages is
  // inferred as a loop layout.
  for (const auto& [p, m] :
       std::vector<std::pair<int64_t, int64_t>>{{2, 1}, {2, 4}, {3, 2}, {4, 8}, {5, 12}}) {
    cases.push_back({PipelineScheduleKind::kZeroBubbleV, p, m, 2});
  }
  return cases;
}

// Every generator, compute-only and lowered, written and read back unchanged, with
// the layout and microbatch count inferred from the cells.
TEST(ScheduleCsvTest, RoundTripsEveryGenerator) {
  int64_t checked = 0;
  for (const Case& c : RoundTripCases()) {
    LOOM_ASSERT_OK_AND_ASSIGN(Schedule compute, MakeSchedule(c.kind, c.p, c.m, c.v));
    LOOM_ASSERT_OK_AND_ASSIGN(Schedule lowered, Lower(compute));
    for (const Schedule* original : {&compute, &lowered}) {
      for (const char* line_ending : {"\n", "\r\n"}) {
        SCOPED_TRACE(absl::StrCat(original->name, " p=", c.p, " m=", c.m, " v=", c.v,
                                  original->HasCommunication() ? " lowered" : " compute-only",
                                  line_ending[0] == '\r' ? " crlf" : ""));
        CsvWriteOptions write;
        write.line_ending = line_ending;
        CsvLoadOptions load;
        load.name = original->name;
        LOOM_ASSERT_OK_AND_ASSIGN(Schedule back,
                                  LoadScheduleCsv(ScheduleToCsv(*original, write), load));
        ExpectSameSchedule(back, *original);
        LOOM_EXPECT_OK(Verify(back));
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, static_cast<int64_t>(RoundTripCases().size()) * 4);
}

TEST(ScheduleCsvTest, ExplicitLayoutAndMicrobatches) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule zbv, MakeZeroBubbleVSchedule(1, 3));
  const std::string csv = ScheduleToCsv(zbv);
  // Both placements put stages 0 and 1 on the only rank; inference picks the loop.
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule inferred, LoadScheduleCsv(csv));
  EXPECT_EQ(inferred.layout.ToString(), "loop p=1 v=2");
  EXPECT_EQ(inferred.ranks, zbv.ranks);

  CsvLoadOptions options;
  options.name = zbv.name;
  options.layout = zbv.layout;
  options.num_microbatches = 3;
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule back, LoadScheduleCsv(csv, options));
  ExpectSameSchedule(back, zbv);
  LOOM_EXPECT_OK(Verify(back));

  // A microbatch count larger than the cells show is taken as given (Verify then
  // reports the missing microbatch).
  options.num_microbatches = 4;
  LOOM_ASSERT_OK_AND_ASSIGN(back, LoadScheduleCsv(csv, options));
  EXPECT_EQ(back.num_microbatches, 4);
  EXPECT_THAT(Verify(back), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("microbatch 3")));
}

// PyTorch's compute-only dump: time steps with empty cells where a rank idles.
TEST(ScheduleCsvTest, PyTorchComputeOnly1F1B) {
  const std::string text = ReadTestdata("1f1b_p2_m4_pytorch.csv");
  ASSERT_THAT(text, HasSubstr(",,"));    // idle steps
  ASSERT_THAT(text, HasSubstr("\r\n"));  // Python's csv line ends
  CsvLoadOptions options;
  options.name = "1f1b";
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule loaded, LoadScheduleCsv(text, options));
  LOOM_EXPECT_OK(Verify(loaded));
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule generated, Make1F1BSchedule(2, 4));
  ExpectSameSchedule(loaded, generated);
}

// PyTorch's lowering receives earlier than Loom's (a receive lands on the
// receiver's list as soon as the sender sends), but the program is deadlock free
// under both semantics and computes in 1F1B's order.
TEST(ScheduleCsvTest, PyTorchLowered1F1B) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule loaded,
                            LoadScheduleCsv(ReadTestdata("1f1b_p2_m4_pytorch_lowered.csv")));
  EXPECT_TRUE(loaded.HasCommunication());
  EXPECT_EQ(loaded.layout.ToString(), "loop p=2 v=1");
  EXPECT_EQ(loaded.num_microbatches, 4);
  LOOM_EXPECT_OK(Verify(loaded));
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule generated, Make1F1BSchedule(2, 4));
  EXPECT_EQ(ComputeOnly(loaded), generated.ranks);
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule ours, Lower(generated));
  EXPECT_EQ(ours.ranks[0], loaded.ranks[0]);
  EXPECT_NE(ours.ranks[1], loaded.ranks[1]);
}

TEST(ScheduleCsvTest, LegacyNotationZeroBubble) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule loaded,
                            LoadScheduleCsv(ReadTestdata("zb_h1_p2_m4_legacy.csv")));
  LOOM_EXPECT_OK(Verify(loaded));
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule generated, MakeZeroBubbleH1Schedule(2, 4));
  EXPECT_EQ(loaded.ranks, generated.ranks);

  // "BW" is the old spelling of a full backward.
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule full, LoadScheduleCsv("0F0,0BW0\n"));
  EXPECT_EQ(full.ranks[0], *ParseActionList("0F0 0B0"));

  // Without the legacy reading a B next to a W stays a B, which Verify refuses.
  CsvLoadOptions modern;
  modern.legacy_backward_notation = false;
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule strict, LoadScheduleCsv("0F0,0B0,0W0\n", modern));
  EXPECT_EQ(strict.ranks[0], *ParseActionList("0F0 0B0 0W0"));
  EXPECT_FALSE(Verify(strict).ok());
  EXPECT_THAT(LoadScheduleCsv("0F0,0BW0\n", modern),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("line 1 (rank 0), cell 2: cannot parse action \"0BW0\"")));
}

TEST(ScheduleCsvTest, ToleratesCsvNoise) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule want, Make1F1BSchedule(2, 2));
  const std::string noisy =
      "\xEF\xBB\xBF 0F0 , \"0F1\" ,,0B0,\t0B1,\r\n"
      "1F0,1B0,1F1,1B1,,\r\n"
      "\r\n"
      "   \n";
  CsvLoadOptions options;
  options.name = "1f1b";
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule back, LoadScheduleCsv(noisy, options));
  ExpectSameSchedule(back, want);
  // No line end after the last row.
  LOOM_ASSERT_OK_AND_ASSIGN(back, LoadScheduleCsv("0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1", options));
  ExpectSameSchedule(back, want);
}

TEST(ScheduleCsvTest, CellErrorsNameLineRankAndCell) {
  // Empty cells count: the bad cell is the fourth of line 2.
  EXPECT_THAT(LoadScheduleCsv("0F0,0B0\n,,1F0,1Q0\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("line 2 (rank 1), cell 4: cannot parse action \"1Q0\"")));
  EXPECT_THAT(LoadScheduleCsv("0F0 0F1\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("line 1 (rank 0), cell 1: cannot parse action \"0F0 0F1\"")));
  EXPECT_THAT(LoadScheduleCsv("0F0,-1F0\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cell 2: cannot parse action \"-1F0\"")));
  EXPECT_THAT(LoadScheduleCsv("99999999999999999999F0\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cell 1: cannot parse action \"99999999999999999999F0\"")));
  EXPECT_THAT(LoadScheduleCsv("0F0,0UNSHARD\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "line 1 (rank 0), cell 2: \"0UNSHARD\" is a PyTorch action of kind UNSHARD, "
                       "which Loom's schedules do not model (they have F, B, I, W, SEND_F, RECV_F, "
                       "SEND_B and RECV_B)"));
  EXPECT_THAT(LoadScheduleCsv("0F0,(0F7;7B3)OVERLAP_F_B\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("cell 2: \"(0F7;7B3)OVERLAP_F_B\" is a PyTorch action of kind "
                                 "OVERLAP_F_B")));
}

TEST(ScheduleCsvTest, StructureErrors) {
  EXPECT_THAT(LoadScheduleCsv(""), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("the CSV has no rows")));
  EXPECT_THAT(LoadScheduleCsv("\r\n \n"), StatusIs(absl::StatusCode::kInvalidArgument,
                                                   HasSubstr("the CSV has no rows")));
  EXPECT_THAT(LoadScheduleCsv(",,\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, "the CSV has no actions"));
  EXPECT_THAT(LoadScheduleCsv("0F0,0B0\n2F0,2B0\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "stage 1 appears in no row, though stage 2 does (stages are numbered from 0 "
                       "without gaps)"));
  EXPECT_THAT(LoadScheduleCsv("0F0,0B0\n999999999999F0\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("stage 1 appears in no row, though stage 999999999999 does")));
  EXPECT_THAT(LoadScheduleCsv("0F0,0F2,0B0,0B2\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "microbatch 1 appears in no action, though microbatch 2 does "
                       "(microbatches are numbered from 0 without gaps)"));
  EXPECT_THAT(LoadScheduleCsv("0F0\n,,\n1F0\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, "line 2 (rank 1) has no actions"));
  EXPECT_THAT(LoadScheduleCsv("0F0,1F0\n2F0,3F0\n4F0,5F0\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "cannot infer the stage layout of 3 ranks and 6 stages: not a loop layout "
                       "(stage 1 is on rank 0, a loop puts it on rank 1) nor a v-shape (stage 1 "
                       "is on rank 0, a v-shape puts it on rank 1); give the layout explicitly"));
  EXPECT_THAT(LoadScheduleCsv("0F0,2F0\n1F0\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("not a loop layout (3 stages do not split evenly over 2 ranks) "
                                 "nor a v-shape (a v-shape over 2 ranks has 4 stages, not 3)")));
}

TEST(ScheduleCsvTest, ErrorsAgainstGivenLayout) {
  CsvLoadOptions options;
  options.layout = *StageLayout::Loop(2);
  EXPECT_THAT(LoadScheduleCsv("0F0\n1F0\n2F0\n", options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "the CSV has 3 rows (one per rank), the layout loop p=2 v=1 has 2 ranks"));
  EXPECT_THAT(LoadScheduleCsv("0F0,1F0\n1B0\n", options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "line 1 (rank 0), cell 2: 1F0: stage 1 is on rank 1 in the layout loop "
                       "p=2 v=1, not on rank 0"));
  EXPECT_THAT(LoadScheduleCsv("0F0\n1F0,3F0\n", options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "line 2 (rank 1), cell 2: 3F0: stage 3 is outside the layout loop p=2 v=1 "
                       "(stages 0-1)"));
  options.num_microbatches = 2;
  EXPECT_THAT(LoadScheduleCsv("0F0,0F2\n1F0\n", options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "line 1 (rank 0), cell 2: 0F2: microbatch 2 is not below "
                       "num_microbatches=2"));
  options.num_microbatches = 0;
  EXPECT_THAT(LoadScheduleCsv("0F0\n1F0\n", options),
              StatusIs(absl::StatusCode::kInvalidArgument, "num_microbatches=0 must be >= 1"));
}

}  // namespace
}  // namespace loom
