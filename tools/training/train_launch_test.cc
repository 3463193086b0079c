#include "tools/training/train_launch.h"

#include <cstdint>
#include <optional>
#include <utility>

#include "gtest/gtest.h"

namespace loom {
namespace {

// Against a brute-force reference over a grid of meshes: the largest smaller dp
// that keeps the global batch whole with at least pp microbatches per replica.
TEST(SmallerDataParallelTest, MatchesTheReferenceOverAGrid) {
  for (int dp = 1; dp <= 12; ++dp) {
    for (int64_t microbatches = 1; microbatches <= 9; ++microbatches) {
      for (int pp = 1; pp <= 4; ++pp) {
        std::optional<std::pair<int, int64_t>> want;
        for (int smaller = 1; smaller < dp; ++smaller) {
          const int64_t global = int64_t{dp} * microbatches;
          if (global % smaller == 0 && global / smaller >= pp) want = {smaller, global / smaller};
        }
        EXPECT_EQ(SmallerDataParallel(dp, microbatches, pp), want)
            << "dp " << dp << " microbatches " << microbatches << " pp " << pp;
      }
    }
  }
}

TEST(SmallerDataParallelTest, ExamplesKeepTheGlobalBatch) {
  EXPECT_EQ(SmallerDataParallel(4, 4, 2), std::make_pair(2, int64_t{8}));  // 16 sequences
  EXPECT_EQ(SmallerDataParallel(3, 2, 1), std::make_pair(2, int64_t{3}));
  EXPECT_EQ(SmallerDataParallel(1, 8, 1), std::nullopt);  // nothing below dp 1
}

}  // namespace
}  // namespace loom
