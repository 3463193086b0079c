#include "models/gpt/markov_data.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

MarkovData Data() { return *MarkovData::Create(MarkovOptions()); }

TEST(MarkovDataTest, SequencesFollowTheChainAndAreDeterministic) {
  const MarkovData data = Data();
  LOOM_ASSERT_OK_AND_ASSIGN(GptBatch a, data.Sequences(10, 3));
  LOOM_ASSERT_OK_AND_ASSIGN(GptBatch b, data.Sequences(10, 3));
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.batch, 3);
  EXPECT_EQ(a.seq_len, 32);
  ASSERT_EQ(a.tokens.size(), 96u);
  for (int64_t k = 0; k < 3; ++k) {
    for (int64_t i = 0; i < 32; ++i) {
      const int64_t t = a.tokens[k * 32 + i], next = a.targets[k * 32 + i];
      if (i + 1 < 32) {
        EXPECT_EQ(next, a.tokens[k * 32 + i + 1]);
      }
      const std::vector<int64_t>& successors = data.Successors(t);
      EXPECT_NE(std::find(successors.begin(), successors.end(), next), successors.end());
    }
  }
  // Sequence 11 alone is the second of the three.
  LOOM_ASSERT_OK_AND_ASSIGN(GptBatch one, data.Sequences(11, 1));
  EXPECT_EQ(one.tokens, std::vector<int64_t>(a.tokens.begin() + 32, a.tokens.begin() + 64));
  EXPECT_NEAR(data.EntropyRate(), 0.9557, 1e-4);  // 4/7, 2/7, 1/7
  EXPECT_LT(data.EntropyRate(), 0.25 * std::log(64.0));
}

// dp ranks see different sequences, and together exactly the single-rank batch.
TEST(MarkovDataTest, DataParallelRanksPartitionTheSingleRankBatch) {
  const MarkovData data = Data();
  BatchLayout dp;
  dp.micro_batch = 2;
  dp.num_microbatches = 3;
  dp.dp_size = 2;
  BatchLayout single = dp;
  single.dp_size = 1;
  single.num_microbatches = 6;
  const int64_t step = 5;
  std::vector<int64_t> union_tokens, single_tokens;
  for (int64_t r = 0; r < 2; ++r) {
    for (int64_t mb = 0; mb < 3; ++mb) {
      LOOM_ASSERT_OK_AND_ASSIGN(GptBatch b, data.Microbatch(dp, step, mb, r));
      union_tokens.insert(union_tokens.end(), b.tokens.begin(), b.tokens.end());
    }
  }
  for (int64_t mb = 0; mb < 6; ++mb) {
    LOOM_ASSERT_OK_AND_ASSIGN(GptBatch b, data.Microbatch(single, step, mb, 0));
    single_tokens.insert(single_tokens.end(), b.tokens.begin(), b.tokens.end());
  }
  EXPECT_EQ(union_tokens, single_tokens);
  LOOM_ASSERT_OK_AND_ASSIGN(GptBatch r0, data.Microbatch(dp, step, 0, 0));
  LOOM_ASSERT_OK_AND_ASSIGN(GptBatch r1, data.Microbatch(dp, step, 0, 1));
  EXPECT_NE(r0.tokens, r1.tokens);
  LOOM_ASSERT_OK_AND_ASSIGN(GptBatch next_step, data.Microbatch(dp, step + 1, 0, 0));
  EXPECT_NE(r0.tokens, next_step.tokens);
}

TEST(MarkovDataTest, RejectsBadArguments) {
  MarkovOptions options;
  options.branching = 65;
  EXPECT_THAT(MarkovData::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("branching 65")));
  const MarkovData data = Data();
  BatchLayout layout;
  layout.num_microbatches = 2;
  EXPECT_THAT(data.Microbatch(layout, 0, 2, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("microbatch 2 is outside [0, 2)")));
  EXPECT_THAT(data.Microbatch(layout, 0, 0, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("dp rank 1 is outside [0, 1)")));
  EXPECT_THAT(data.Microbatch(layout, -1, 0, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("step -1")));
  layout.micro_batch = 0;
  EXPECT_THAT(data.Microbatch(layout, 0, 0, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("micro_batch 0")));
}

}  // namespace
}  // namespace loom
