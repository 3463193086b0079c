#include "topology/parallel_config.h"

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

ParallelConfig HeaderConfig() {
  ParallelConfig config;
  config.dp = 2;
  config.pp = 4;
  config.tp = 2;
  config.num_layers = 32;
  config.num_microbatches = 8;
  return config;
}

TEST(ParallelConfigTest, HeaderExample) {
  ParallelConfig config = HeaderConfig();
  LOOM_EXPECT_OK(config.Validate(16));
  EXPECT_THAT(config.Validate(8),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dp=2 x pp=4 x cp=1 x tp=2 = 16 ranks, world size is 8")));
  config.num_layers = 30;
  EXPECT_THAT(config.Validate(16),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("num_layers=30 is not divisible by pp=4 x virtual_stages=1")));
  config.layers_per_stage = {7, 8, 8, 7};
  LOOM_EXPECT_OK(config.Validate(16));
  EXPECT_THAT(config.LayersPerStage(), IsOkAndHolds(ElementsAre(7, 8, 8, 7)));
  LOOM_ASSERT_OK_AND_ASSIGN(Mesh mesh, config.ToMesh());
  EXPECT_EQ(mesh.ToString(), "pp=4,dp=2,cp=1,tp=2");
  EXPECT_THAT(mesh.Group(0, "tp"), IsOkAndHolds(ElementsAre(0, 1)));  // tp peers adjacent.
}

TEST(ParallelConfigTest, EvenLayout) {
  const ParallelConfig config = HeaderConfig();
  EXPECT_THAT(config.LayersPerStage(), IsOkAndHolds(ElementsAre(8, 8, 8, 8)));
}

TEST(ParallelConfigTest, RejectsNonPositiveSizes) {
  for (const char* field : {"dp", "pp", "cp", "tp", "ep"}) {
    ParallelConfig config = HeaderConfig();
    int64_t* target = std::string(field) == "dp"   ? &config.dp
                      : std::string(field) == "pp" ? &config.pp
                      : std::string(field) == "cp" ? &config.cp
                      : std::string(field) == "tp" ? &config.tp
                                                   : &config.ep;
    *target = 0;
    EXPECT_THAT(config.Validate(16), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr(std::string(field) + "=0 must be >= 1")));
    *target = -3;
    EXPECT_THAT(config.Validate(16), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr(std::string(field) + "=-3 must be >= 1")));
  }
  ParallelConfig config = HeaderConfig();
  config.num_microbatches = 0;
  EXPECT_THAT(config.Validate(16), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("num_microbatches=0 must be >= 1")));
}

TEST(ParallelConfigTest, RejectsOverflowingProducts) {
  ParallelConfig config;
  config.dp = int64_t{1} << 40;
  config.tp = int64_t{1} << 40;
  EXPECT_THAT(config.Validate(8), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("more than 2^63 ranks, world size is 8")));
}

TEST(ParallelConfigTest, ExpertParallelMustDivideDataTimesContext) {
  ParallelConfig config = HeaderConfig();
  config.ep = 2;
  LOOM_EXPECT_OK(config.Validate(16));
  config.ep = 3;
  EXPECT_THAT(config.Validate(16), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("ep=3 does not divide dp x cp = 2")));
}

TEST(ParallelConfigTest, RejectsLayoutsThatDoNotCoverTheModel) {
  ParallelConfig config = HeaderConfig();
  config.layers_per_stage = {8, 8, 8};
  EXPECT_THAT(config.Validate(16), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("3 entries (8,8,8), pp=4 x virtual_stages=1 needs 4")));
  config.layers_per_stage = {8, 8, 8, 9};
  EXPECT_THAT(config.Validate(16), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("covers 33 layers, the model has num_layers=32")));
  config.layers_per_stage = {8, 8, 17, -1};
  EXPECT_THAT(config.Validate(16), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("layers_per_stage[3]=-1 is negative")));
}

TEST(ParallelConfigTest, SchedulesThatNeedMoreMicrobatches) {
  ParallelConfig config = HeaderConfig();
  config.schedule = PipelineScheduleKind::kInterleaved1F1B;
  config.virtual_stages = 2;
  config.num_microbatches = 3;
  EXPECT_THAT(config.Validate(16),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("interleaved-1f1b needs at least pp=4 microbatches, got num_microbatches=3")));
  config.num_microbatches = 4;
  LOOM_EXPECT_OK(config.Validate(16));
  config.virtual_stages = 1;
  EXPECT_THAT(config.Validate(16), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("needs virtual_stages >= 2")));
  config.virtual_stages = 3;
  config.num_layers = 32;  // 32 layers over 12 chunks does not divide.
  EXPECT_THAT(config.Validate(16), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("pp=4 x virtual_stages=3 (12 stages)")));
  // 1F1B and GPipe run with fewer microbatches than stages.
  config = HeaderConfig();
  config.num_microbatches = 1;
  LOOM_EXPECT_OK(config.Validate(16));
  config.virtual_stages = 2;
  EXPECT_THAT(config.Validate(16), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("1f1b uses one stage per rank, got virtual_stages=2")));
  config = HeaderConfig();
  config.schedule = PipelineScheduleKind::kZeroBubbleV;
  config.virtual_stages = 2;
  config.num_microbatches = 2;
  EXPECT_THAT(config.Validate(16), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("zb-v needs at least pp=4 microbatches")));
}

TEST(ParallelConfigTest, ScheduleNames) {
  for (auto kind : {PipelineScheduleKind::kGPipe, PipelineScheduleKind::k1F1B,
                    PipelineScheduleKind::kInterleaved1F1B, PipelineScheduleKind::kZeroBubbleH1,
                    PipelineScheduleKind::kZeroBubbleV}) {
    EXPECT_THAT(ParsePipelineSchedule(PipelineScheduleName(kind)), IsOkAndHolds(kind));
  }
  EXPECT_THAT(ParsePipelineSchedule("2f2b"), StatusIs(absl::StatusCode::kInvalidArgument,
                                                      HasSubstr("unknown pipeline schedule \"2f2b\"")));
}

TEST(ParallelConfigTest, ToMeshRejectsOrdersWithoutTheFourDims) {
  EXPECT_THAT(HeaderConfig().ToMesh("tp-dp-pp"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not place dimension \"cp\"")));
  LOOM_ASSERT_OK_AND_ASSIGN(Mesh mesh, HeaderConfig().ToMesh("tp-cp-pp-dp"));
  EXPECT_EQ(mesh.ToString(), "dp=2,pp=4,cp=1,tp=2");
}

}  // namespace
}  // namespace loom
