#include "collectives/cost_model.h"

#include <cstdio>
#include <string>

#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(CostModelTest, SmallMessagesGoToLatencyAlgorithmsLargeToBandwidthOnes) {
  const CostModel model = CostModel::Default();
  const Explanation tiny = model.Explain(CollectiveKind::kAllReduce, 8, 8, 0);
  EXPECT_THAT(tiny.chosen, ::testing::AnyOf(Algorithm::kDirect, Algorithm::kHalvingDoubling,
                                            Algorithm::kBinomialTree, Algorithm::kDoubleBinaryTree));
  const Explanation large = model.Explain(CollectiveKind::kAllReduce, 64 << 20, 8, 0);
  EXPECT_THAT(large.chosen, ::testing::AnyOf(Algorithm::kRing, Algorithm::kHalvingDoubling));
  // Every candidate is priced, fastest first, and the choice is the first.
  ASSERT_EQ(large.predictions.size(), 5u);  // hierarchical needs several nodes
  EXPECT_EQ(large.predictions.front().first, large.chosen);
  for (size_t i = 1; i < large.predictions.size(); ++i) {
    EXPECT_LE(large.predictions[i - 1].second, large.predictions[i].second);
  }
  EXPECT_THAT(large.ToString(), HasSubstr("all_reduce 64 MiB on 8 ranks: "));
  EXPECT_THAT(large.ToString(), HasSubstr("(predicted "));
}

TEST(CostModelTest, HierarchicalWinsAcrossSlowNodes) {
  CostModel::Constants constants;
  constants.inter_node_beta = 1.0 / 1e9;  // five times slower than inside a node
  LOOM_ASSERT_OK_AND_ASSIGN(CostModel model, CostModel::FromConstants(constants));
  const Explanation why = model.Explain(CollectiveKind::kAllReduce, 64 << 20, 16, 4);
  EXPECT_EQ(why.chosen, Algorithm::kHierarchical) << why.ToString();
  EXPECT_THAT(why.ToString(), HasSubstr("on 16 ranks (4 per node): hierarchical"));
}

TEST(CostModelTest, RingFormulaMatchesTheTextbook) {
  CostModel::Constants constants;
  constants.alpha = 1e-6;
  constants.beta = 1e-9;
  constants.gamma = 5e-10;
  LOOM_ASSERT_OK_AND_ASSIGN(CostModel model, CostModel::FromConstants(constants));
  // 2(n-1) alpha + 2 (n-1)/n S beta + (n-1)/n S gamma, n = 4, S = 1 MB.
  const double want = 6e-6 + 2 * 0.75 * 1e6 * 1e-9 + 0.75 * 1e6 * 5e-10;
  EXPECT_THAT(model.Predict(CollectiveKind::kAllReduce, Algorithm::kRing, 1000000, 4, 0),
              IsOkAndHolds(::testing::DoubleNear(want, 1e-12)));
  EXPECT_THAT(model.Predict(CollectiveKind::kAllToAll, Algorithm::kRing, 10, 4, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("all_to_all has no ring algorithm; it has pairwise")));
  EXPECT_THAT(model.Predict(CollectiveKind::kAllReduce, Algorithm::kRing, 10, 1, 0), IsOkAndHolds(0.0));
}

TEST(CostModelTest, SavesAndLoads) {
  CostModel::Constants constants;
  constants.alpha = 3.5e-6;
  constants.gamma = 1.25e-10;
  LOOM_ASSERT_OK_AND_ASSIGN(CostModel model, CostModel::FromConstants(constants));
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/model.txt";
  LOOM_ASSERT_OK(model.Save(path));
  LOOM_ASSERT_OK_AND_ASSIGN(CostModel loaded, CostModel::Load(path));
  EXPECT_DOUBLE_EQ(loaded.constants().alpha, 3.5e-6);
  EXPECT_DOUBLE_EQ(loaded.constants().gamma, 1.25e-10);
  EXPECT_EQ(loaded.Serialize(), model.Serialize());
  EXPECT_THAT(CostModel::Load(path + ".missing"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("model.txt.missing")));
}

TEST(CostModelTest, RejectsBadText) {
  EXPECT_THAT(CostModel::Parse("alpha_s 1e-6\nbeta 2\n"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("line 2 \"beta 2\" is not \"<key> <number>\" with a known key")));
  EXPECT_THAT(CostModel::Parse("alpha_s 1e-6\n"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lacks beta_s_per_byte")));
  const std::string text =
      "alpha_s -1e-6\nbeta_s_per_byte 1e-9\ngamma_s_per_byte 1e-10\n"
      "inter_node_alpha_s 1e-5\ninter_node_beta_s_per_byte 1e-9\n";
  EXPECT_THAT(CostModel::Parse(text), StatusIs(absl::StatusCode::kInvalidArgument,
                                               HasSubstr("is not finite and positive")));
}

}  // namespace
}  // namespace loom
