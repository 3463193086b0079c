// BM_FmaPeakPerCore: one core's measured f32 FMA peak (core/fma_peak.h) as a row of
// any benchmark binary that links this library, so a kernel's GFLOP/s stands beside
// the peak measured in the same run (labelled with the CPU model and vector target).
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "core/fma_peak.h"

namespace loom {
namespace {

void BM_FmaPeakPerCore(benchmark::State& state) {
  absl::StatusOr<FmaPeak> peak;
  for (auto _ : state) peak = MeasureFmaPeak(absl::Milliseconds(100));
  if (!peak.ok()) {
    state.SkipWithError(peak.status().ToString().c_str());
    return;
  }
  state.counters["GFLOP/s"] = peak->flops_per_core / 1e9;
  state.SetLabel(absl::StrCat(peak->cpu_model, ", ", peak->vector_target));
}
BENCHMARK(BM_FmaPeakPerCore)->Iterations(1)->UseRealTime();

}  // namespace
}  // namespace loom
