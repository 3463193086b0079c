#include "core/cpu_features.h"

#include <sched.h>

#include <algorithm>
#include <array>
#include <thread>

namespace loom {
namespace {

bool Detect(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return true;
    case CpuIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
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
