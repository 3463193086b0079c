#include "models/gpt/gpt_config.h"

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(GptConfigTest, DefaultIsValidAndTiny) {
  const GptConfig config;
  LOOM_EXPECT_OK(config.Validate(1));
  LOOM_EXPECT_OK(config.Validate(2));
  LOOM_EXPECT_OK(config.Validate(4));
  EXPECT_EQ(config.ffn_size(), 256);
  EXPECT_EQ(config.head_dim(), 16);
  EXPECT_EQ(config.ToString(), "V=64 seq=32 hidden=64 heads=4 layers=4 ffn=256 seed=1");
}

TEST(GptConfigTest, NamesTheBadValue) {
  struct Case {
    void (*mutate)(GptConfig&);
    int tp;
    const char* message;
  };
  const Case cases[] = {
      {[](GptConfig& c) { c.vocab = 1; }, 1, "vocab 1 must be >= 2"},
      {[](GptConfig& c) { c.seq_len = 0; }, 1, "seq_len 0 must be >= 1"},
      {[](GptConfig& c) { c.hidden = 0; }, 1, "hidden 0 must be >= 1"},
      {[](GptConfig& c) { c.heads = 0; }, 1, "heads 0 must be >= 1"},
      {[](GptConfig& c) { c.layers = -1; }, 1, "layers -1 must be >= 0"},
      {[](GptConfig& c) { c.ffn = -4; }, 1, "ffn -4 must be >= 0"},
      {[](GptConfig& c) { c.layer_norm_eps = 0; }, 1, "layer_norm_eps 0 must be > 0"},
      {[](GptConfig& c) { c.heads = 3; }, 1, "heads 3 must divide hidden 64"},
      {[](GptConfig&) {}, 0, "tp 0 must be >= 1"},
      {[](GptConfig& c) { c.heads = 2; }, 4, "heads 2 must be a multiple of tp 4"},
      {[](GptConfig& c) { c.vocab = 3; }, 4, "vocab 3 is smaller than tp 4"},
      {[](GptConfig& c) { c.ffn = 2; }, 4, "ffn 2 is smaller than tp 4"},
  };
  for (const Case& c : cases) {
    GptConfig config;
    c.mutate(config);
    EXPECT_THAT(config.Validate(c.tp),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)))
        << c.message;
  }
}

}  // namespace
}  // namespace loom
