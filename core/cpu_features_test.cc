#include "core/cpu_features.h"

#include <cpuid.h>

#include "gtest/gtest.h"
#include "hwy/targets.h"

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

bool Bit(unsigned reg, int bit) { return (reg >> bit) & 1u; }

TEST(CpuFeaturesTest, MatchesCpuid) {
  unsigned eax, ebx, ecx, edx;
  __cpuid(1, eax, ebx, ecx, edx);
  const bool leaf1 = Bit(ecx, 29) && Bit(ecx, 22) && Bit(ecx, 12);  // F16C, MOVBE, FMA
  __cpuid(0x80000001u, eax, ebx, ecx, edx);
  const bool lzcnt = Bit(ecx, 5);
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const bool avx2 = Bit(ebx, 5) && Bit(ebx, 3) && Bit(ebx, 8);  // AVX2, BMI1, BMI2
  // F, DQ, CD, BW, VL.
  const bool avx512 = Bit(ebx, 16) && Bit(ebx, 17) && Bit(ebx, 28) && Bit(ebx, 30) && Bit(ebx, 31);
  EXPECT_EQ(CpuSupports(CpuIsa::kAvx2), avx2 && leaf1 && lzcnt);
  EXPECT_EQ(CpuSupports(CpuIsa::kAvx512), avx2 && leaf1 && lzcnt && avx512 && OsSavesZmm());
  EXPECT_TRUE(CpuSupports(CpuIsa::kScalar));
  __cpuid_count(7, 1, eax, ebx, ecx, edx);
  const bool bf16 = (eax & (1u << 5)) != 0;  // AVX512_BF16
  EXPECT_EQ(CpuSupportsAvx512Bf16(), bf16 && CpuSupports(CpuIsa::kAvx512));
}

// The kernels written with Highway run the code of its AVX2 and AVX3 targets for kAvx2
// and kAvx512: a level must be supported exactly where Highway's own detection allows
// its target (kAvx512 asks AVX-512CD on top, which every AVX3 CPU has).
TEST(CpuFeaturesTest, AgreesWithHighway) {
  const int64_t targets = hwy::SupportedTargets();
  EXPECT_EQ(CpuSupports(CpuIsa::kAvx2), (targets & HWY_AVX2) != 0) << hwy::TargetName(HWY_AVX2);
  EXPECT_EQ(CpuSupports(CpuIsa::kAvx512), (targets & HWY_AVX3) != 0) << hwy::TargetName(HWY_AVX3);
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

// A cap makes the process answer as a smaller CPU would, never a bigger one; the
// widest cap gives the host's answers back.
TEST(CpuFeaturesTest, ACapAnswersAsTheSmallerCpu) {
  const CpuIsa host_best = BestCpuIsa();
  const bool host_bf16 = CpuSupportsAvx512Bf16();
  CapCpuIsa(CpuIsa::kAvx2, /*allow_avx512_bf16=*/false);
  EXPECT_FALSE(CpuSupports(CpuIsa::kAvx512));
  EXPECT_FALSE(CpuSupportsAvx512Bf16());
  EXPECT_EQ(BestCpuIsa(), host_best == CpuIsa::kScalar ? CpuIsa::kScalar : CpuIsa::kAvx2);
  CapCpuIsa(CpuIsa::kAvx512, /*allow_avx512_bf16=*/false);
  EXPECT_EQ(BestCpuIsa(), host_best);
  EXPECT_FALSE(CpuSupportsAvx512Bf16());
  CapCpuIsa(CpuIsa::kScalar, /*allow_avx512_bf16=*/true);
  EXPECT_EQ(BestCpuIsa(), CpuIsa::kScalar);
  EXPECT_FALSE(CpuSupportsAvx512Bf16());  // needs AVX-512 under it
  CapCpuIsa(CpuIsa::kAvx512, /*allow_avx512_bf16=*/true);
  EXPECT_EQ(BestCpuIsa(), host_best);
  EXPECT_EQ(CpuSupportsAvx512Bf16(), host_bf16);
}

}  // namespace
}  // namespace loom
