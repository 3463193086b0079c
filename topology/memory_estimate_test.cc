#include "topology/memory_estimate.h"

#include <algorithm>
#include <cstdint>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

// The ZeRO paper (Rajbhandari et al., 2020), Figure 1: Psi = 7.5B, Nd = 64, K = 12.
TEST(MemoryEstimateTest, ZeroPaperWorkedExample) {
  ModelStateOptions opts;
  opts.num_parameters = 7'500'000'000;
  opts.dp = 64;
  const char* expected[] = {"120.0 GB", "31.4 GB", "16.6 GB", "1.9 GB"};
  const int64_t exact[] = {120'000'000'000, 31'406'250'000, 16'640'625'000, 1'875'000'000};
  for (int stage = 0; stage <= 3; ++stage) {
    opts.zero_stage = stage;
    LOOM_ASSERT_OK_AND_ASSIGN(ModelStateBytes bytes, EstimateModelStateBytes(opts));
    EXPECT_EQ(bytes.total(), exact[stage]) << "ZeRO-" << stage;
    EXPECT_EQ(FormatBytes(bytes.total()), expected[stage]) << "ZeRO-" << stage;
  }
}

TEST(MemoryEstimateTest, BreakdownPerStateAndPolicy) {
  ModelStateOptions opts;
  opts.num_parameters = 1000;
  opts.dp = 4;
  opts.zero_stage = 2;
  LOOM_ASSERT_OK_AND_ASSIGN(ModelStateBytes mixed, EstimateModelStateBytes(opts));
  EXPECT_EQ(mixed.parameters, 2000);       // Replicated under ZeRO-2.
  EXPECT_EQ(mixed.gradients, 2 * 250);     // Sharded.
  EXPECT_EQ(mixed.optimizer_states, 12 * 250);
  opts.precision = PrecisionPolicy::kFp32Adam;
  opts.zero_stage = 0;
  LOOM_ASSERT_OK_AND_ASSIGN(ModelStateBytes fp32, EstimateModelStateBytes(opts));
  EXPECT_EQ(fp32.total(), 16 * 1000);      // 4 + 4 + 8 bytes per parameter.
  EXPECT_EQ(fp32.optimizer_states, 8000);
  opts.precision = PrecisionPolicy::kBf16InF32Adam;
  opts.zero_stage = 1;
  LOOM_ASSERT_OK_AND_ASSIGN(ModelStateBytes bf16, EstimateModelStateBytes(opts));
  EXPECT_EQ(bf16.parameters, 6000);        // f32 and bf16 copies, replicated under ZeRO-1.
  EXPECT_EQ(bf16.gradients, 4000);
  EXPECT_EQ(bf16.optimizer_states, 12 * 250);  // master, m, v: sharded.
}

// ZeRO's buffers and a model's own resident copies come on top of the shards.
TEST(MemoryEstimateTest, BuffersAndResidentWeights) {
  ModelStateOptions opts;
  opts.num_parameters = 8000;
  opts.precision = PrecisionPolicy::kFp32Adam;
  opts.dp = 8;
  opts.zero_stage = 3;
  opts.buffers.unit_numel = 1000;
  opts.buffers.gathered_units = 3;
  opts.buffers.gathered_bytes_per_element = 6;
  opts.buffers.gradient_units = 2;
  LOOM_ASSERT_OK_AND_ASSIGN(ModelStateBytes bytes, EstimateModelStateBytes(opts));
  EXPECT_EQ(bytes.parameters + bytes.gradients + bytes.optimizer_states, 16 * 1000);
  EXPECT_EQ(bytes.buffers, 1000 * (3 * 6 + 2 * 4));
  EXPECT_EQ(bytes.resident, 0);
  opts.resident_bytes_per_parameter = 8;
  LOOM_ASSERT_OK_AND_ASSIGN(bytes, EstimateModelStateBytes(opts));
  EXPECT_EQ(bytes.resident, 8 * 8000);
  EXPECT_EQ(bytes.total(), 16 * 1000 + 1000 * 26 + 8 * 8000);
  // NVMe optimizer state: its staging, per element of the largest unit's shard
  // (1000 / 8 = 125), on top.
  opts.buffers.disk_staging_bytes_per_element = 24;
  LOOM_ASSERT_OK_AND_ASSIGN(bytes, EstimateModelStateBytes(opts));
  EXPECT_EQ(bytes.buffers, 1000 * (3 * 6 + 2 * 4) + 125 * 24);
  opts.buffers.disk_staging_bytes_per_element = 0;
  opts.zero_stage = 0;
  EXPECT_THAT(EstimateModelStateBytes(opts),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("zero_stage=0 has none")));
  opts.zero_stage = 3;
  opts.buffers.gradient_units = -1;
  EXPECT_THAT(EstimateModelStateBytes(opts),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("buffers.gradient_units=-1 is not in [0, 2^40]")));
}

TEST(MemoryEstimateTest, TensorAndPipelineParallelSplitParameters) {
  ModelStateOptions opts;
  opts.num_parameters = 1'000'000;
  opts.tp = 2;
  opts.pp = 5;
  opts.dp = 3;
  opts.zero_stage = 3;
  LOOM_ASSERT_OK_AND_ASSIGN(ModelStateBytes bytes, EstimateModelStateBytes(opts));
  // 100'000 local parameters, ZeRO-3 over 3 ranks rounds up to 33'334 each.
  EXPECT_EQ(bytes.total(), 16 * 33'334);
}

TEST(MemoryEstimateTest, RejectsBadModelStateOptions) {
  ModelStateOptions opts;
  opts.num_parameters = 10;
  opts.zero_stage = 4;
  EXPECT_THAT(EstimateModelStateBytes(opts), StatusIs(absl::StatusCode::kInvalidArgument,
                                                      HasSubstr("zero_stage=4 is not one of")));
  opts.zero_stage = 1;
  opts.dp = 0;
  EXPECT_THAT(EstimateModelStateBytes(opts),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dp=0 must be >= 1")));
  opts.dp = 1;
  opts.num_parameters = -5;
  EXPECT_THAT(EstimateModelStateBytes(opts), StatusIs(absl::StatusCode::kInvalidArgument,
                                                      HasSubstr("num_parameters=-5 is negative")));
}

// Korthikanti et al. 2022: a GPT-3-like layer, s=2048, b=1, h=12288, a=96, t=8.
ActivationOptions Gpt3Layer() {
  ActivationOptions o;
  o.seq_len = 2048;
  o.micro_batch_size = 1;
  o.hidden_size = 12288;
  o.num_heads = 96;
  o.tp = 8;
  o.layers = 1;
  return o;
}

TEST(MemoryEstimateTest, ActivationFormulaVariants) {
  ActivationOptions o = Gpt3Layer();
  const int64_t sbh = 2048LL * 1 * 12288;
  const int64_t as2b = 5LL * 96 * 2048 * 2048;
  // Tensor parallel only: sbh(10 + 24/t + 5as/(ht)).
  EXPECT_THAT(ActivationBytesPerLayer(o), IsOkAndHolds(10 * sbh + (24 * sbh + as2b) / 8));
  o.sequence_parallel = true;  // sbh/t (34 + 5as/h).
  EXPECT_THAT(ActivationBytesPerLayer(o), IsOkAndHolds((34 * sbh + as2b) / 8));
  o.recompute = Recompute::kSelective;  // sbh * 34 / t.
  EXPECT_THAT(ActivationBytesPerLayer(o), IsOkAndHolds(34 * sbh / 8));
  o.sequence_parallel = false;  // sbh(10 + 24/t).
  EXPECT_THAT(ActivationBytesPerLayer(o), IsOkAndHolds(10 * sbh + 24 * sbh / 8));
  o.recompute = Recompute::kFull;  // 2sbh: only the layer input.
  EXPECT_THAT(ActivationBytesPerLayer(o), IsOkAndHolds(2 * sbh));
  o.tp = 1;
  o.recompute = Recompute::kNone;  // No parallelism: sbh(34 + 5as/h).
  EXPECT_THAT(ActivationBytesPerLayer(o), IsOkAndHolds(34 * sbh + as2b));
  // The paper's headline: sequence parallel + selective recompute cuts the TP-only
  // footprint by more than 4x for this model.
  ActivationOptions tp_only = Gpt3Layer();
  ActivationOptions best = Gpt3Layer();
  best.sequence_parallel = true;
  best.recompute = Recompute::kSelective;
  EXPECT_GT(*ActivationBytesPerLayer(tp_only), 4 * *ActivationBytesPerLayer(best));
}

TEST(MemoryEstimateTest, ContextParallelSplitsTheSequence) {
  ActivationOptions o = Gpt3Layer();
  o.tp = 1;
  o.cp = 2;
  const int64_t s = 1024;  // Local sequence.
  const int64_t sbh = s * 12288;
  EXPECT_THAT(ActivationBytesPerLayer(o), IsOkAndHolds(34 * sbh + 5LL * 96 * s * s));
}

TEST(MemoryEstimateTest, StageActivationsScaleWithLayersAndInFlightMicrobatches) {
  ActivationOptions o = Gpt3Layer();
  o.layers = 12;
  o.in_flight_microbatches = 4;
  EXPECT_THAT(EstimateActivationBytes(o), IsOkAndHolds(48 * *ActivationBytesPerLayer(o)));
}

TEST(MemoryEstimateTest, InFlightMicrobatchesPerSchedule) {
  // 1F1B: the first stage holds pp microbatches, the last one.
  EXPECT_THAT(InFlightMicrobatches(PipelineScheduleKind::k1F1B, 4, 0, 8), IsOkAndHolds(4));
  EXPECT_THAT(InFlightMicrobatches(PipelineScheduleKind::k1F1B, 4, 3, 8), IsOkAndHolds(1));
  EXPECT_THAT(InFlightMicrobatches(PipelineScheduleKind::k1F1B, 4, 0, 2), IsOkAndHolds(2));
  EXPECT_THAT(InFlightMicrobatches(PipelineScheduleKind::kZeroBubbleH1, 4, 1, 8), IsOkAndHolds(3));
  EXPECT_THAT(InFlightMicrobatches(PipelineScheduleKind::kGPipe, 4, 2, 8), IsOkAndHolds(8));
  // Interleaved, pp=4, v=2: rank 0 warms up (4-0-1)*2 + (2-1)*4 = 10 chunk-microbatches.
  EXPECT_THAT(InFlightMicrobatches(PipelineScheduleKind::kInterleaved1F1B, 4, 0, 8, 2),
              IsOkAndHolds(11));
  EXPECT_THAT(InFlightMicrobatches(PipelineScheduleKind::kInterleaved1F1B, 4, 3, 8, 2),
              IsOkAndHolds(5));
  EXPECT_THAT(InFlightMicrobatches(PipelineScheduleKind::kZeroBubbleV, 4, 2, 8, 2), IsOkAndHolds(8));
  EXPECT_THAT(InFlightMicrobatches(PipelineScheduleKind::k1F1B, 4, 4, 8),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("pipeline rank 4 is outside [0, pp=4)")));
}

TEST(MemoryEstimateTest, RejectsBadActivationOptions) {
  ActivationOptions o = Gpt3Layer();
  o.num_heads = 100;
  EXPECT_THAT(ActivationBytesPerLayer(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                                   HasSubstr("num_heads=100 does not split over tp=8")));
  o = Gpt3Layer();
  o.seq_len = 0;
  EXPECT_THAT(ActivationBytesPerLayer(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("seq_len=0 must be >= 1")));
  o = Gpt3Layer();
  o.cp = 3;
  EXPECT_THAT(ActivationBytesPerLayer(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                                   HasSubstr("seq_len=2048 does not split over cp=3")));
  o = Gpt3Layer();
  o.seq_len = 2044;
  o.sequence_parallel = true;
  EXPECT_THAT(ActivationBytesPerLayer(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                                   HasSubstr("local sequence 2044 over tp=8")));
  o = Gpt3Layer();
  o.layers = 0;
  EXPECT_THAT(EstimateActivationBytes(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layers=0 must be >= 1")));
}

// Loom's GPT as the job runs it (2 layers, h 64, 4 heads, V 64): the header's terms
// counted by hand, then the same through the options.
FusedAttentionActivationOptions SmallGpt() {
  FusedAttentionActivationOptions o;
  o.hidden_size = 64;
  o.num_heads = 4;
  o.vocab = 64;
  o.seq_len = 1024;
  o.micro_batch_size = 1;
  o.layers = 2;
  o.embedding = true;
  o.head = true;
  return o;
}

TEST(MemoryEstimateTest, FusedAttentionActivations) {
  FusedAttentionActivationOptions o = SmallGpt();
  const int64_t h = 64, a = 4, v = 64;
  const int64_t block = 16 * h + 16 + 52 * h + 4 * a;      // 4,384 per position
  const int64_t head = 4 * h + 8 + 4 * h + 4 * v + 8;      // 784
  EXPECT_EQ(8 + 2 * block + head, 9'560);                  // the job's measured figure
  EXPECT_THAT(EstimateFusedAttentionActivationBytes(o), IsOkAndHolds(9'560 * 1024));
  // Context parallelism: the busiest rank's ceil(s / cp) positions.
  o.cp = 4;
  EXPECT_THAT(EstimateFusedAttentionActivationBytes(o), IsOkAndHolds(9'560 * 256));
  o.seq_len = 250;
  EXPECT_THAT(EstimateFusedAttentionActivationBytes(o), IsOkAndHolds(9'560 * 63));
  // tp 2 halves the split terms and the softmax; bf16 halves the linear inputs.
  o = SmallGpt();
  o.tp = 2;
  EXPECT_THAT(EstimateFusedAttentionActivationBytes(o),
              IsOkAndHolds((8 + 2 * (16 * h + 16 + (52 * h + 4 * a) / 2) +
                            (4 * h + 8 + 4 * h + 4 * v / 2 + 8)) * 1024));
  o.tp = 1;
  o.bf16_linear_inputs = true;
  EXPECT_THAT(EstimateFusedAttentionActivationBytes(o),
              IsOkAndHolds((8 + 2 * (12 * h + 16 + 42 * h + 4 * a) +
                            (4 * h + 8 + 2 * h + 4 * v + 8)) * 1024));
  // Full recompute: each block's input, and the larger of one block and the head.
  o = SmallGpt();
  o.recompute = Recompute::kFull;
  EXPECT_THAT(EstimateFusedAttentionActivationBytes(o),
              IsOkAndHolds((8 + 2 * 4 * h + block) * 1024));
  // A middle pipeline stage: blocks only; micro_batch multiplies.
  o = SmallGpt();
  o.embedding = o.head = false;
  o.micro_batch_size = 3;
  EXPECT_THAT(EstimateFusedAttentionActivationBytes(o), IsOkAndHolds(2 * block * 1024 * 3));
  // The head alone (a last stage with no blocks).
  o.layers = 0;
  o.head = true;
  o.micro_batch_size = 1;
  EXPECT_THAT(EstimateFusedAttentionActivationBytes(o), IsOkAndHolds(head * 1024));
  // A vocabulary that does not divide tp: the busiest rank's ceil(63 / 2) = 32
  // rows of the softmax, as many as V = 64's.
  o.vocab = 63;
  o.tp = 2;
  const int64_t head_tp2 = 4 * h + 8 + 4 * h + 4 * 32 + 8;
  EXPECT_THAT(EstimateFusedAttentionActivationBytes(o), IsOkAndHolds(head_tp2 * 1024));
}

// What one microbatch holds at each point a schedule may stop it at: the forward's
// peak, the context kept until backward (without recompute the same), the split
// backward's weight work (each linear layer's input and output gradient, the layer
// norms' gradients) and the peak of that input-gradient pass.
TEST(MemoryEstimateTest, FusedAttentionStageBytes) {
  FusedAttentionActivationOptions o = SmallGpt();
  const int64_t h = 64, v = 64, s = 1024;
  const int64_t block_work = 4 * (4 * h + 12 * h) * s + 16 * h;
  const int64_t head_work = 4 * (h + v) * s + 8 * h;
  const int64_t embedding_work = (8 + 4 * h) * s;
  LOOM_ASSERT_OK_AND_ASSIGN(FusedAttentionStageBytes b, EstimateFusedAttentionStageBytes(o));
  EXPECT_EQ(b.forward_peak, 9'560 * s);
  EXPECT_EQ(b.context, b.forward_peak);
  EXPECT_EQ(b.weight_work, 2 * block_work + head_work + embedding_work);
  EXPECT_EQ(b.backward_input_peak, std::max(b.forward_peak, b.weight_work));
  // Full recompute: the context is the blocks' inputs, the ids and the head's
  // state; the input-gradient pass peaks recomputing the first block on top of the
  // second's work and the head's.
  o.recompute = Recompute::kFull;
  LOOM_ASSERT_OK_AND_ASSIGN(b, EstimateFusedAttentionStageBytes(o));
  const int64_t block = 16 * h + 16 + 52 * h + 4 * 4;
  const int64_t head = 4 * h + 8 + 4 * h + 4 * v + 8;
  EXPECT_EQ(b.context, (8 + 2 * 4 * h + head) * s);
  EXPECT_EQ(b.backward_input_peak,
            std::max({b.context, (8 + 4 * h + block) * s + block_work + head_work,
                      b.weight_work}));
}

TEST(MemoryEstimateTest, FusedAttentionActivationsBadInput) {
  FusedAttentionActivationOptions o = SmallGpt();
  o.tp = 3;
  EXPECT_THAT(EstimateFusedAttentionActivationBytes(o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("num_heads=4 does not split over tp=3")));
  o = SmallGpt();
  o.cp = 2048;
  EXPECT_THAT(EstimateFusedAttentionActivationBytes(o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("seq_len=1024 is shorter than cp=2048")));
  o = SmallGpt();
  o.layers = -1;
  EXPECT_THAT(EstimateFusedAttentionActivationBytes(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layers=-1 is negative")));
  o = SmallGpt();
  o.recompute = Recompute::kSelective;
  EXPECT_THAT(EstimateFusedAttentionActivationBytes(o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("selective")));
  o = SmallGpt();
  o.micro_batch_size = 0;
  EXPECT_THAT(EstimateFusedAttentionActivationBytes(o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("micro_batch_size=0 must be >= 1")));
}

TEST(MemoryEstimateTest, FormatBytes) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(1'500), "1.5 kB");
  EXPECT_EQ(FormatBytes(2'500'000), "2.5 MB");
  EXPECT_EQ(FormatBytes(3'200'000'000'000), "3.2 TB");
}

}  // namespace
}  // namespace loom
