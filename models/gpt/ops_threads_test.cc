// LayerNorm and GELU on a rank's threads (core's ComputeThreads): rows, elements and
// the per-column sums of dgamma and dbeta split over 2 and 3 threads give the same
// bits as 1, at sizes large enough that every pass is split (and ragged).
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/parallel_for.h"
#include "core/status_matchers.h"
#include "gtest/gtest.h"
#include "models/gpt/ops.h"

namespace loom {
namespace {

constexpr size_t kRows = 517, kWidth = 256;

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

std::vector<uint32_t> BitsOf(const std::vector<float>& v) {
  std::vector<uint32_t> bits(v.size());
  if (!v.empty()) std::memcpy(bits.data(), v.data(), v.size() * sizeof(float));
  return bits;
}

// Every output of the four passes, as bits.
std::vector<std::vector<uint32_t>> RunOps() {
  const std::vector<float> x = Random(kRows * kWidth, 1), dy = Random(kRows * kWidth, 2);
  const std::vector<float> gamma = Random(kWidth, 3), beta = Random(kWidth, 4);
  std::vector<std::vector<uint32_t>> out;
  absl::StatusOr<LayerNormOutput> ln = LayerNormForward(x, gamma, beta, 1e-5f);
  EXPECT_TRUE(ln.ok()) << ln.status();
  if (!ln.ok()) return out;
  absl::StatusOr<LayerNormGrads> grads = LayerNormBackward(x, gamma, ln->mean, ln->rstd, dy);
  EXPECT_TRUE(grads.ok()) << grads.status();
  if (!grads.ok()) return out;
  // An odd count, so the last range is ragged.
  const std::vector<float> gx(x.begin(), x.end() - 3), gdy(dy.begin(), dy.end() - 3);
  absl::StatusOr<std::vector<float>> gelu_dx = GeluBackward(gx, gdy);
  EXPECT_TRUE(gelu_dx.ok()) << gelu_dx.status();
  if (!gelu_dx.ok()) return out;
  for (const std::vector<float>* v :
       {&ln->y, &ln->mean, &ln->rstd, &grads->dx, &grads->dgamma, &grads->dbeta}) {
    out.push_back(BitsOf(*v));
  }
  out.push_back(BitsOf(GeluForward(gx)));
  out.push_back(BitsOf(*gelu_dx));
  return out;
}

TEST(OpsThreadsTest, ThreadCountDoesNotChangeTheBits) {
  const int before = ComputeThreads();
  LOOM_ASSERT_OK(SetComputeThreads(1));
  const std::vector<std::vector<uint32_t>> one = RunOps();
  ASSERT_EQ(one.size(), 8u);
  for (const int threads : {2, 3}) {
    LOOM_ASSERT_OK(SetComputeThreads(threads));
    const std::vector<std::vector<uint32_t>> many = RunOps();
    ASSERT_EQ(many.size(), one.size());
    for (size_t k = 0; k < one.size(); ++k) {
      EXPECT_FALSE(one[k].empty()) << k;
      EXPECT_EQ(many[k], one[k]) << "output " << k << " at " << threads << " threads";
    }
  }
  LOOM_ASSERT_OK(SetComputeThreads(before));
}

}  // namespace
}  // namespace loom
