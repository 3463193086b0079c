#include "core/cpu_features.h"

#include <cpuid.h>

#include "gtest/gtest.h"

namespace loom {
namespace {

// An independent reading of CPUID leaf 7 / leaf 1 and XCR0, against the detection.
bool OsSavesZmm() {
  unsigned eax, ebx, ecx, edx;
  __cpuid(1, eax, ebx, ecx, edx);
  if ((ecx & (1u << 27)) == 0) return false;  // OSXSAVE
  unsigned lo, hi;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 0xE6) == 0xE6;  // XMM, YMM, opmask, ZMM_Hi256, Hi16_ZMM
}

TEST(CpuFeaturesTest, MatchesCpuid) {
  unsigned eax, ebx, ecx, edx;
  __cpuid(1, eax, ebx, ecx, edx);
  const bool f16c = (ecx & (1u << 29)) != 0;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const bool avx2 = (ebx & (1u << 5)) != 0;
  const bool avx512 = (ebx & (1u << 16)) && (ebx & (1u << 30)) && (ebx & (1u << 28));  // F, BW, CD
  EXPECT_EQ(CpuSupports(CpuIsa::kAvx2), avx2 && f16c);
  EXPECT_EQ(CpuSupports(CpuIsa::kAvx512), avx2 && f16c && avx512 && OsSavesZmm());
  EXPECT_TRUE(CpuSupports(CpuIsa::kScalar));
  __cpuid_count(7, 1, eax, ebx, ecx, edx);
  const bool bf16 = (eax & (1u << 5)) != 0;  // AVX512_BF16
  EXPECT_EQ(CpuSupportsAvx512Bf16(), bf16 && CpuSupports(CpuIsa::kAvx512));
}

TEST(CpuFeaturesTest, LevelsAreOrderedAndNamed) {
  ASSERT_EQ(AllCpuIsas().size(), 3u);
  EXPECT_EQ(CpuIsaName(CpuIsa::kScalar), "scalar");
  EXPECT_EQ(CpuIsaName(CpuIsa::kAvx2), "avx2");
  EXPECT_EQ(CpuIsaName(CpuIsa::kAvx512), "avx512");
  // A level implies the ones below it; the best is the highest supported.
  if (CpuSupports(CpuIsa::kAvx512)) {
    EXPECT_TRUE(CpuSupports(CpuIsa::kAvx2));
  }
  CpuIsa best = CpuIsa::kScalar;
  for (CpuIsa isa : AllCpuIsas()) {
    if (CpuSupports(isa)) best = isa;
  }
  EXPECT_EQ(BestCpuIsa(), best);
}

}  // namespace
}  // namespace loom
