// main of the tests bazel/loom.bzl's loom_isa_capped_tests runs again on a smaller
// instruction set than the host's, so that a kernel chosen by ISA is tested on each
// ISA the host can run, whatever the host: `--loom_isa_cap=avx2` (a Haswell: AVX2
// and FMA) or `--loom_isa_cap=avx512` (a Skylake-SP: AVX-512 F/CD/BW/DQ/VL, no
// BF16, no AMX). Four things choose kernels by ISA and each is capped its own way:
// Loom's core/cpu_features (CapCpuIsa), Highway's dispatch (hwy::DisableTargets),
// oneDNN (ONEDNN_MAX_CPU_ISA) and OpenBLAS (OPENBLAS_CORETYPE). OpenBLAS reads its
// variable when it loads, before main runs, so main sets the variables and starts
// the binary again, once. On a host without the capped level the tests are
// skipped, saying so.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "gtest/gtest.h"
#include "hwy/targets.h"

namespace {

constexpr char kFlag[] = "--loom_isa_cap=";
constexpr char kCappedVariable[] = "LOOM_ISA_CAPPED";  // set for the second start

struct Cap {
  const char* name;
  loom::CpuIsa isa;
  const char* onednn;    // ONEDNN_MAX_CPU_ISA
  const char* openblas;  // OPENBLAS_CORETYPE
  int64_t hwy_disabled;  // Highway's targets above the cap (lower bits are better)
};

constexpr Cap kCaps[] = {
    {"avx2", loom::CpuIsa::kAvx2, "AVX2", "Haswell", HWY_AVX2 - 1},
    {"avx512", loom::CpuIsa::kAvx512, "AVX512_CORE", "SkylakeX", HWY_AVX3 - 1},
};

// Skips every test of the binary (the host cannot run the capped level).
class SkipAll : public testing::Environment {
 public:
  explicit SkipAll(std::string why) : why_(std::move(why)) {}
  void SetUp() override { GTEST_SKIP() << why_; }

 private:
  std::string why_;
};

}  // namespace

int main(int argc, char** argv) {
  const Cap* cap = nullptr;
  std::vector<char*> gtest_args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], kFlag, std::strlen(kFlag)) == 0) {
      const char* name = argv[i] + std::strlen(kFlag);
      for (const Cap& c : kCaps) {
        if (std::strcmp(name, c.name) == 0) cap = &c;
      }
      if (cap == nullptr) {
        std::fprintf(stderr, "isa_capped_test_main: %s: not avx2 or avx512\n", argv[i]);
        return 2;
      }
      continue;
    }
    gtest_args.push_back(argv[i]);
  }
  if (cap == nullptr) {
    std::fprintf(stderr, "isa_capped_test_main: no %savx2|avx512 given\n", kFlag);
    return 2;
  }
  const char* capped = std::getenv(kCappedVariable);
  if (capped == nullptr || std::strcmp(capped, cap->name) != 0) {
    setenv("ONEDNN_MAX_CPU_ISA", cap->onednn, 1);
    setenv("OPENBLAS_CORETYPE", cap->openblas, 1);
    setenv(kCappedVariable, cap->name, 1);
    execv("/proc/self/exe", argv);
    std::fprintf(stderr, "isa_capped_test_main: execv(/proc/self/exe): %s\n",
                 std::strerror(errno));
    return 1;
  }
  int gtest_argc = static_cast<int>(gtest_args.size());
  gtest_args.push_back(nullptr);
  testing::InitGoogleTest(&gtest_argc, gtest_args.data());
  if (!loom::CpuSupports(cap->isa)) {
    testing::AddGlobalTestEnvironment(new SkipAll(
        std::string("this host does not run ") + cap->name + ": nothing to cap it to"));
  } else {
    loom::CapCpuIsa(cap->isa, /*allow_avx512_bf16=*/false);
    hwy::DisableTargets(cap->hwy_disabled);
    std::printf("ISA capped to %s: Loom's kernels, Highway (best target now %s), "
                "ONEDNN_MAX_CPU_ISA=%s, OPENBLAS_CORETYPE=%s\n",
                cap->name, hwy::TargetName(hwy::SupportedTargets() & -hwy::SupportedTargets()),
                cap->onednn, cap->openblas);
  }
  return RUN_ALL_TESTS();
}
