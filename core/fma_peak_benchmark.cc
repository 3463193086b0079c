// The f32 FMA peak of one core, as the training job measures it for its MFU, and of
// all of this process's CPUs at once (one thread each), so the per-core figure times
// the core count can be checked against the whole machine; beside it the bf16
// dot-product peak (vdpbf16ps; 0 without AVX512_BF16), the denominator of a bf16 job.
#include <thread>
#include <vector>

#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "core/cpu_features.h"
#include "core/fma_peak.h"

namespace loom {
namespace {

void BM_FmaPeak(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  double total = 0.0, bf16_total = 0.0;
  for (auto _ : state) {
    std::vector<double> rates(static_cast<size_t>(threads)), bf16(static_cast<size_t>(threads));
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&rates, &bf16, t] {
        absl::StatusOr<FmaPeak> peak = MeasureFmaPeak(absl::Milliseconds(100));
        rates[static_cast<size_t>(t)] = peak.ok() ? peak->flops_per_core : 0.0;
        bf16[static_cast<size_t>(t)] = peak.ok() ? peak->bf16_flops_per_core : 0.0;
      });
    }
    for (std::thread& w : workers) w.join();
    total = 0.0;
    bf16_total = 0.0;
    for (double r : rates) total += r;
    for (double r : bf16) bf16_total += r;
  }
  state.counters["GFLOP/s"] = total / 1e9;
  state.counters["GFLOP/s_per_core"] = total / 1e9 / threads;
  state.counters["bf16_GFLOP/s"] = bf16_total / 1e9;
  state.counters["bf16_GFLOP/s_per_core"] = bf16_total / 1e9 / threads;
  state.SetLabel(CpuModelName());
}
BENCHMARK(BM_FmaPeak)->Arg(1)->Arg(UsableCpus())->Iterations(1)->UseRealTime();

}  // namespace
}  // namespace loom
