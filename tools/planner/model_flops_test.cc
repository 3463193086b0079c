#include "tools/planner/model_flops.h"

#include <cmath>

#include "absl/status/status.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace planner {
namespace {

using ::testing::HasSubstr;

// The Megatron-LM paper's 1.7B row: 24 layers, hidden 2304, 24 heads.
TransformerShape Megatron1p7B() {
  TransformerShape s;
  s.layers = 24;
  s.hidden = 2304;
  s.heads = 24;
  s.seq_len = 2048;
  s.vocab = 51200;
  return s;
}

TEST(ModelFlopsTest, MegatronCountIsThePapersEquationThree) {
  const TransformerShape s = Megatron1p7B();
  const double B = 512, l = 24, h = 2304, seq = 2048, V = 51200;
  const double equation3 = 96 * B * seq * l * h * h * (1 + seq / (6 * h) + V / (16 * l * h));
  EXPECT_NEAR(MegatronFlopsPerIteration(s, 512, Recompute::kFull) / equation3, 1.0, 1e-12);
  // Without recompute the forward is not run twice: 72 in place of 96 for the
  // layers, the logits unchanged.
  const double no_recompute = 72 * B * seq * l * h * h * (1 + seq / (6 * h)) +
                              6 * B * seq * h * V;
  EXPECT_NEAR(MegatronFlopsPerIteration(s, 512, Recompute::kNone) / no_recompute, 1.0, 1e-12);
  // Selective recompute runs the attention's 4 s h per token and layer once more.
  EXPECT_NEAR(MegatronFlopsPerIteration(s, 512, Recompute::kSelective) -
                  MegatronFlopsPerIteration(s, 512, Recompute::kNone),
              B * seq * l * 4 * seq * h, 1e3);
}

TEST(ModelFlopsTest, ParameterCountAndModelFlops) {
  TransformerShape s = Megatron1p7B();
  const double l = 24, h = 2304, V = 51200, seq = 2048;
  const double n = l * (12 * h * h + 13 * h) + (V + seq) * h + 2 * h;
  EXPECT_DOUBLE_EQ(ParameterCount(s), n);
  // The position table is looked up, not multiplied; the tied token table is the
  // head as well, a product.
  EXPECT_DOUBLE_EQ(EmbeddingTableParameters(s), seq * h);
  EXPECT_DOUBLE_EQ(ModelFlopsPerToken(s), 6 * (n - seq * h) + 12 * l * h * seq);
  // Untied, the token table is a lookup and the head a product of its own: the
  // model FLOPs gain the head (6 V h), not the table.
  TransformerShape untied = s;
  untied.tied_embeddings = false;
  EXPECT_DOUBLE_EQ(ParameterCount(untied), n + V * h);
  EXPECT_DOUBLE_EQ(EmbeddingTableParameters(untied), (V + seq) * h);
  EXPECT_DOUBLE_EQ(ModelFlopsPerToken(untied), ModelFlopsPerToken(s));
  // A narrower MLP: 2 h ffn + ffn + h in place of 8h^2 + 5h.
  s.ffn = 4096;
  EXPECT_DOUBLE_EQ(ParameterCount(s),
                   l * (4 * h * h + 4 * h + 2 * h * 4096 + 4096 + h + 4 * h) + (V + seq) * h + 2 * h);
}

TEST(ModelFlopsTest, GroupedQueryAttentionAndSwiGlu) {
  // Llama 3 405B: 126 layers, hidden 16384, 128 heads sharing 8 key-value heads,
  // a SwiGLU MLP of 53248, vocabulary 128256, untied head: about 405B parameters.
  TransformerShape s;
  s.layers = 126;
  s.hidden = 16384;
  s.heads = 128;
  s.kv_heads = 8;
  s.ffn = 53248;
  s.gated_mlp = true;
  s.tied_embeddings = false;
  s.seq_len = 8192;
  s.vocab = 128256;
  LOOM_EXPECT_OK(ValidateShape(s));
  const double h = 16384, f = 53248;
  EXPECT_DOUBLE_EQ(LayerMatrixParameters(s), 2 * h * h + 2 * h * h / 16 + 3 * h * f);
  EXPECT_NEAR(ParameterCount(s) / 1e9, 405.0, 1.5);
  // The products of a token's forward: twice the matrices.
  EXPECT_NEAR(MegatronFlopsPerIteration(s, 1, Recompute::kNone),
              8192 * (126 * (3 * 2 * LayerMatrixParameters(s) + 3 * 4 * 8192 * h) + 6 * h * 128256),
              1e6);
  s.kv_heads = 7;
  EXPECT_THAT(ValidateShape(s), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("kv_heads 7 do not divide the 128 heads")));
}

TEST(ModelFlopsTest, ValidateShapeNamesTheField) {
  TransformerShape s = Megatron1p7B();
  LOOM_EXPECT_OK(ValidateShape(s));
  s.heads = 25;
  EXPECT_THAT(ValidateShape(s), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("heads 25 do not divide hidden 2304")));
  s = Megatron1p7B();
  s.layers = 0;
  EXPECT_THAT(ValidateShape(s),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layers is 0")));
  s = Megatron1p7B();
  s.ffn = -1;
  EXPECT_THAT(ValidateShape(s), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ffn is -1")));
}

}  // namespace
}  // namespace planner
}  // namespace loom
