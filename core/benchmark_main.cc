// The main of every Loom benchmark (loom_cc_benchmark): Google Benchmark's own, plus
// a context line saying whether the binary was optimized (in the console header and
// in --benchmark_format=json's "context"), and a warning when it was not, since
// figures from an unoptimized build mean little.
#include <cstdio>

#include "benchmark/benchmark.h"
#include "core/build_info.h"

int main(int argc, char** argv) {
  benchmark::AddCustomContext("loom_build", loom::BuildMode());
  if (!loom::kOptimizedBuild) std::fprintf(stderr, "%s\n", loom::kUnoptimizedBuildWarning);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
