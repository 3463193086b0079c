#include "core/cpu_features.h"

#include <cpuid.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <thread>

namespace loom {
namespace {

// The features a level needs beyond what __builtin_cpu_supports knows everywhere, read
// from CPUID: F16C and MOVBE (leaf 1 ECX bits 29 and 22; clang 14's builtin lacks "f16c")
// and LZCNT (leaf 0x80000001 ECX bit 5). The AVX2 check beside them covers the OS's
// saving of the YMM state.
bool HasF16cMovbeLzcnt() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  if ((ecx & bit_F16C) == 0 || (ecx & bit_MOVBE) == 0) return false;
  return __get_cpuid(0x80000001u, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_LZCNT) != 0;
}

// Each level is the feature set of Highway's target of the same width (HWY_AVX2,
// HWY_AVX3), whose code the kernels written with Highway run: its target attributes let
// the compiler use every one of these instructions anywhere in that code.
bool Detect(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return true;
    case CpuIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
             HasF16cMovbeLzcnt();
    case CpuIsa::kAvx512:
      return Detect(CpuIsa::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512cd");
  }
  return false;
}

// The cap (CapCpuIsa): the widest level reported, and whether AVX-512 BF16 is.
std::atomic<int> max_isa{static_cast<int>(CpuIsa::kAvx512)};
std::atomic<bool> bf16_allowed{true};

bool Detected(CpuIsa isa) {
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

}  // namespace

void CapCpuIsa(CpuIsa max, bool allow_avx512_bf16) {
  max_isa = static_cast<int>(max);
  bf16_allowed = allow_avx512_bf16;
}

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
  return static_cast<int>(isa) <= max_isa.load(std::memory_order_relaxed) && Detected(isa);
}

bool CpuSupportsAvx512Bf16() {
  static const bool bf16 = Detected(CpuIsa::kAvx512) && __builtin_cpu_supports("avx512bf16");
  return bf16 && CpuSupports(CpuIsa::kAvx512) && bf16_allowed.load(std::memory_order_relaxed);
}

CpuIsa BestCpuIsa() {
  return CpuSupports(CpuIsa::kAvx512) ? CpuIsa::kAvx512
         : CpuSupports(CpuIsa::kAvx2) ? CpuIsa::kAvx2
                                      : CpuIsa::kScalar;
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
