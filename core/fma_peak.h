// FmaPeak: the f32 multiply-add throughput one core of this CPU reaches, measured rather
// than read from a data sheet (clock, vector width and FMA ports vary between the
// machines Loom runs on, and a VM may run below the nominal clock). It is the
// denominator of the training job's MFU (model FLOP utilization): achieved FLOP/s over
// per-core peak times the cores used.
//
// The measurement runs independent chains of vector FMAs, enough of them to hide the
// FMA latency on every current x86 core, on the calling thread at the widest vector
// level the CPU runs (Highway's dispatch, as core/vector_math), and keeps the best of
// several rounds. An FMA counts as 2 FLOP.
//
// Where the CPU has AVX512_BF16 (core/cpu_features.h), the bf16 peak is measured the
// same way with vdpbf16ps, the instruction oneDNN's bf16 products run on: each of its
// 16 f32 lanes adds two bf16 products, 4 FLOP. It is the denominator of the MFU of a
// job whose products are bf16 (Megatron and PaLM quote MFU against the bf16 peak).
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(FmaPeak peak, MeasureFmaPeak(absl::Milliseconds(30)));
//   // peak.cpu_model == "AMD EPYC" (a KVM guest), peak.vector_target == "AVX3",
//   // peak.flops_per_core ~ 1.17e11 (Zen 4 at 3.7 GHz: 2 x 256-bit FMA pipes),
//   // peak.bf16_flops_per_core ~ 2.3e11 (twice: two bf16 products per f32 lane)
//   MeasureFmaPeak(absl::ZeroDuration());
//   // InvalidArgument: "MeasureFmaPeak: duration 0 must be positive"
#ifndef LOOM_CORE_FMA_PEAK_H_
#define LOOM_CORE_FMA_PEAK_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace loom {

struct FmaPeak {
  std::string cpu_model;      // /proc/cpuinfo's "model name" ("unknown" where absent)
  std::string vector_target;  // the Highway target the loop ran on ("AVX3", "AVX2", ...)
  double flops_per_core = 0;  // f32 FLOP/s of one core
  // bf16 dot-product FLOP/s of one core (vdpbf16ps); 0 without AVX512_BF16.
  double bf16_flops_per_core = 0;
};

// MeasureFmaPeak measures for about `duration` per peak (best of twenty rounds) on the
// calling thread: the f32 one, and the bf16 one where the CPU has AVX512_BF16. InvalidArgument naming it when duration is not positive or above
// 10 s.
absl::StatusOr<FmaPeak> MeasureFmaPeak(absl::Duration duration);

// CpuModelName returns /proc/cpuinfo's first "model name" ("unknown" where absent).
std::string CpuModelName();

}  // namespace loom

#endif  // LOOM_CORE_FMA_PEAK_H_
