#include "offload/offload_plan.h"

#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "core/temp_dir_testing.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;


TEST(OffloadPlanTest, EveryCompressionHasItsOwnCodec) {
  const std::vector<std::pair<OffloadCompression, CodecKind>> expected = {
      {OffloadCompression::kNone, CodecKind::kRaw},   {OffloadCompression::kFp16, CodecKind::kFp16},
      {OffloadCompression::kBf16, CodecKind::kBf16},  {OffloadCompression::kInt8, CodecKind::kInt8Blockwise},
      {OffloadCompression::kLz4, CodecKind::kLz4},    {OffloadCompression::kZstd, CodecKind::kZstd}};
  for (const auto& [compression, kind] : expected) {
    EXPECT_EQ(CodecKindFor(compression), kind) << OffloadCompressionName(compression);
  }
  EXPECT_EQ(expected.size(), AllCodecKinds().size());
}

TEST(OffloadPlanTest, EveryStateFormatMaps) {
  EXPECT_EQ(StateFormatFor(OptimizerStateFormat::kF32), StateFormat::kF32);
  EXPECT_EQ(StateFormatFor(OptimizerStateFormat::kBf16), StateFormat::kBF16);
  EXPECT_EQ(StateFormatFor(OptimizerStateFormat::kBlockwise8), StateFormat::kBlockwise8);
}

TEST(OffloadPlanTest, MapsEveryKey) {
  const std::string a = FreshTestDirectory("plan_a"), b = FreshTestDirectory("plan_b");
  LOOM_ASSERT_OK_AND_ASSIGN(
      OffloadConfig config,
      ParseOffloadConfig(absl::StrCat("optimizer=cpu,params=nvme,host_budget=64M,nvme_budget=1M,",
                                      "nvme_dirs=", a, ":", b, ",prefetch=3,pinned=pageable,",
                                      "compression=int8,state=blockwise8,state_block=512,threads=3")));
  LOOM_ASSERT_OK_AND_ASSIGN(OffloadPlan plan, PlanOffload(config));
  EXPECT_EQ(plan.host_pool.budget_bytes, size_t{64} << 20);
  EXPECT_EQ(plan.host_pool.kind, HostMemoryKind::kPageable);
  EXPECT_EQ(plan.stream.depth, 3);
  EXPECT_EQ(plan.codec.kind, CodecKind::kInt8Blockwise);
  EXPECT_EQ(plan.state_format, StateFormat::kBlockwise8);
  EXPECT_EQ(plan.state_block_size, 512);
  EXPECT_EQ(plan.adamw.threads, 3);
  ASSERT_TRUE(plan.disk.has_value());
  EXPECT_EQ(plan.disk->directories, (std::vector<std::string>{a, b}));
  EXPECT_EQ(plan.disk_budget_bytes, size_t{1} << 20);
}

TEST(OffloadPlanTest, NoDiskWithoutNvmeAndThreadsZeroIsOnePerCore) {
  LOOM_ASSERT_OK_AND_ASSIGN(OffloadConfig config,
                            ParseOffloadConfig("optimizer=cpu,host_budget=16M,threads=0"));
  LOOM_ASSERT_OK_AND_ASSIGN(OffloadPlan plan, PlanOffload(config));
  EXPECT_FALSE(plan.disk.has_value());
  EXPECT_EQ(plan.adamw.threads, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
  EXPECT_EQ(plan.codec.kind, CodecKind::kRaw);
}

TEST(OffloadPlanTest, InvalidConfigIsRefusedWithItsValues) {
  OffloadConfig config;
  config.optimizer_state = OffloadDevice::kCpu;
  config.host_budget_bytes = 0;
  config.prefetch_depth = 0;
  config.cpu_threads = 300;
  EXPECT_THAT(PlanOffload(config),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("host_budget is 0"), HasSubstr("prefetch depth 0"),
                             HasSubstr("threads 300"))));
}

// The plan's options drive the real parts end to end: parameters encoded with the
// plan's codec go to the disk tier, come back through a prefetch stream over the
// plan's pool and engine, decode within bf16's bound, and take an AdamW step on
// state in the plan's format.
TEST(OffloadPlanTest, PartsBuiltFromThePlanWorkTogether) {
  const std::string a = FreshTestDirectory("plan_a"), b = FreshTestDirectory("plan_b");
  LOOM_ASSERT_OK_AND_ASSIGN(
      OffloadConfig config,
      ParseOffloadConfig(absl::StrCat("optimizer=cpu,params=nvme,host_budget=32M,nvme_budget=64M,",
                                      "nvme_dirs=", a, ":", b, ",prefetch=1,compression=bf16,",
                                      "state=bf16,threads=2")));
  LOOM_ASSERT_OK_AND_ASSIGN(OffloadPlan plan, PlanOffload(config));
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<HostMemoryPool> pool,
                            HostMemoryPool::Create(plan.host_pool));
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<PrefetchEngine> engine,
                            PrefetchEngine::Create(plan.engine));
  ASSERT_TRUE(plan.disk.has_value());
  plan.disk->stripe_bytes = 64 << 10;  // Small tensors still span both directories.
  LOOM_ASSERT_OK_AND_ASSIGN(std::unique_ptr<DiskTier> tier, DiskTier::Create(*plan.disk));

  constexpr int kLayers = 4;
  constexpr size_t kCount = 50'000;  // Not a multiple of a stripe or a block.
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<std::vector<float>> layers(kLayers, std::vector<float>(kCount));
  std::vector<StreamTensor> tensors;
  for (int l = 0; l < kLayers; ++l) {
    for (float& x : layers[l]) x = normal(rng);
    LOOM_ASSERT_OK_AND_ASSIGN(std::vector<std::byte> frame, EncodeTensor(plan.codec, layers[l]));
    const std::string name = absl::StrCat("layer", l, ".w");
    LOOM_ASSERT_OK(tier->Write(name, frame));
    tensors.push_back({name, frame.size()});
  }

  LOOM_ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<PrefetchStream> stream,
      PrefetchStream::Create(*engine, *pool, tensors, plan.stream,
                             [&](size_t i, absl::Span<std::byte> into, const CancelToken&) {
                               return tier->Read(tensors[i].name, into);
                             }));
  std::vector<float> params(kCount), grads(kCount);
  for (int l = 0; l < kLayers; ++l) {
    LOOM_ASSERT_OK_AND_ASSIGN(std::optional<StreamItem> item,
                              stream->Next(absl::Now() + absl::Seconds(30)));
    ASSERT_TRUE(item.has_value());
    ASSERT_EQ(item->index, static_cast<size_t>(l));
    LOOM_ASSERT_OK(DecodeTensor(item->data, absl::MakeSpan(params)));
    for (size_t i = 0; i < kCount; ++i) {
      // bf16 keeps 8 significant bits, rounded to nearest: relative error <= 2^-8.
      ASSERT_LE(std::fabs(params[i] - layers[l][i]), std::ldexp(std::fabs(layers[l][i]), -8))
          << "layer " << l << " element " << i;
      grads[i] = static_cast<float>(static_cast<int>(i % 7) - 3) * 1e-3f;
    }
    LOOM_ASSERT_OK_AND_ASSIGN(AdamWState state,
                              AdamWState::Create(kCount, plan.state_format, plan.state_block_size));
    EXPECT_EQ(state.format(), StateFormat::kBF16);
    const std::vector<float> before = params;
    LOOM_ASSERT_OK(AdamWStep(AdamWHyper{}, absl::MakeSpan(params), grads, state, plan.adamw));
    // First step: m_hat = g, v_hat = g^2, so each parameter moves by about lr * sign(g)
    // (plus decay) where g != 0.
    for (size_t i = 0; i < kCount; ++i) {
      const float g = grads[i];
      const float decayed = before[i] * (1.0f - 1e-3f * 0.01f);
      const float expected = g == 0 ? decayed : decayed - 1e-3f * (g > 0 ? 1.0f : -1.0f);
      ASSERT_NEAR(params[i], expected, 1e-5f) << "layer " << l << " element " << i;
    }
  }
  LOOM_ASSERT_OK_AND_ASSIGN(std::optional<StreamItem> end,
                            stream->Next(absl::Now() + absl::Seconds(30)));
  EXPECT_FALSE(end.has_value());
}

}  // namespace
}  // namespace loom
