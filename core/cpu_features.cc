#include "core/cpu_features.h"

#include <cpuid.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <thread>

namespace loom {
namespace {

// F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does not know
// "f16c". The AVX2 check beside it covers the OS's saving of the YMM state.
bool HasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

bool Detect(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return true;
    case CpuIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && HasF16c();
    case CpuIsa::kAvx512:
      return Detect(CpuIsa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512cd");
  }
  return false;
}

}  // namespace

int UsableCpus() {
  cpu_set_t cpus;
  if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0) return std::max(1, CPU_COUNT(&cpus));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

absl::Span<const CpuIsa> AllCpuIsas() {
  static constexpr std::array<CpuIsa, 3> kIsas = {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512};
  return kIsas;
}

bool CpuSupports(CpuIsa isa) {
  static const bool avx2 = Detect(CpuIsa::kAvx2);
  static const bool avx512 = Detect(CpuIsa::kAvx512);
  switch (isa) {
    case CpuIsa::kScalar:
      return true;
    case CpuIsa::kAvx2:
      return avx2;
    case CpuIsa::kAvx512:
      return avx512;
  }
  return false;
}

bool CpuSupportsAvx512Bf16() {
  static const bool bf16 = CpuSupports(CpuIsa::kAvx512) && __builtin_cpu_supports("avx512bf16");
  return bf16;
}

CpuIsa BestCpuIsa() {
  static const CpuIsa best = CpuSupports(CpuIsa::kAvx512) ? CpuIsa::kAvx512
                             : CpuSupports(CpuIsa::kAvx2) ? CpuIsa::kAvx2
                                                          : CpuIsa::kScalar;
  return best;
}

absl::string_view CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

}  // namespace loom
