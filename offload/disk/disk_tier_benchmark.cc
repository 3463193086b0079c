// DiskTier write and read throughput, per engine, direct vs buffered, 1 vs 2
// directories, plus the CRC-32C kernels it runs on every byte.
//
//   LOOM_DISK_BENCH_DIR=/mnt/nvme/tmp ./bazelw run //offload/disk:disk_tier_benchmark
//
// The tensors live under $LOOM_DISK_BENCH_DIR (default /tmp) in a fresh directory
// removed at the end. "2 dirs" are two directories on that same filesystem: they show
// the cost of striping, not a second drive's bandwidth. Direct reads bypass the page
// cache; buffered reads of a tensor that was just written come mostly from the page
// cache (RAM), so they measure the copy path, not the disk.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "core/aligned_buffer.h"
#include "core/crc32c.h"
#include "offload/disk/disk_tier.h"

namespace loom {
namespace {

// A fresh directory under $LOOM_DISK_BENCH_DIR (default /tmp), made at startup and
// removed at exit (defined before clean_up below, so it is destroyed after it).
std::string MakeBenchRoot() {
  const char* env = std::getenv("LOOM_DISK_BENCH_DIR");
  std::string templ = absl::StrCat(env != nullptr ? env : "/tmp", "/loom_disk_bench.XXXXXX");
  if (::mkdtemp(templ.data()) == nullptr) return std::string();
  return templ;
}
const std::string bench_root = MakeBenchRoot();

const std::string& BenchRoot() { return bench_root; }

struct Setup {
  std::unique_ptr<DiskTier> tier;
  AlignedBuffer<std::byte> data;
  AlignedBuffer<std::byte> back;
};

// args: engine (0 io_uring, 1 thread pool), direct (0/1), directories, MiB.
bool MakeSetup(benchmark::State& state, Setup& setup) {
  if (BenchRoot().empty()) {
    state.SkipWithError("cannot create the benchmark directory (LOOM_DISK_BENCH_DIR)");
    return false;
  }
  DiskTierOptions options;
  options.engine = state.range(0) == 0 ? IoEngine::kIoUring : IoEngine::kThreadPool;
  options.direct_io = state.range(1) != 0;
  for (int64_t d = 0; d < state.range(2); ++d) {
    const std::string dir = absl::StrCat(BenchRoot(), "/d", d);
    ::mkdir(dir.c_str(), 0755);
    options.directories.push_back(dir);
  }
  auto tier = DiskTier::Create(options);
  if (!tier.ok()) {
    state.SkipWithError(tier.status().ToString().c_str());
    return false;
  }
  setup.tier = std::move(tier).value();
  const size_t bytes = static_cast<size_t>(state.range(3)) << 20;
  auto data = AlignedBuffer<std::byte>::Create(bytes, 4096);
  auto back = AlignedBuffer<std::byte>::Create(bytes, 4096);
  if (!data.ok() || !back.ok()) {
    state.SkipWithError("out of memory");
    return false;
  }
  setup.data = std::move(data).value();
  setup.back = std::move(back).value();
  for (size_t i = 0; i < bytes; ++i) setup.data[i] = static_cast<std::byte>(i * 131 + (i >> 12));
  const DiskTierStats stats = setup.tier->stats();
  state.SetLabel(absl::StrCat(IoEngineName(stats.engine), stats.direct_io ? " direct" : " buffered",
                              " ", state.range(2), "dir"));
  return true;
}

void BM_Write(benchmark::State& state) {
  Setup setup;
  if (!MakeSetup(state, setup)) return;
  for (auto _ : state) {
    const absl::Status s = setup.tier->Write("bench", setup.data.span());
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * setup.data.size()));
  static_cast<void>(setup.tier->Remove("bench"));
}

void BM_Read(benchmark::State& state) {
  Setup setup;
  if (!MakeSetup(state, setup)) return;
  if (absl::Status s = setup.tier->Write("bench", setup.data.span()); !s.ok()) {
    state.SkipWithError(s.ToString().c_str());
    return;
  }
  for (auto _ : state) {
    const absl::Status s = setup.tier->Read("bench", setup.back.span());
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(setup.back.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * setup.back.size()));
  static_cast<void>(setup.tier->Remove("bench"));
}

void TierArgs(benchmark::internal::Benchmark* b) {
  b->ArgNames({"pool", "direct", "dirs", "MiB"});
  for (int engine : {0, 1}) {
    for (int direct : {1, 0}) {
      for (int dirs : {1, 2}) b->Args({engine, direct, dirs, 256});
    }
  }
  b->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(1.0);
}

BENCHMARK(BM_Write)->Apply(TierArgs);
BENCHMARK(BM_Read)->Apply(TierArgs);

// CRC-32C (//core:crc32c) over 1 MiB: software tables, SSE4.2, 64 KiB blocks.
void BM_Crc32c(benchmark::State& state) {
  std::vector<std::byte> data(1 << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 7);
  std::vector<uint32_t> crcs(data.size() / (64 << 10));
  if (state.range(0) == 1 && !crc32c_internal::HasHardware()) {
    state.SkipWithError("no SSE4.2");
    return;
  }
  for (auto _ : state) {
    switch (state.range(0)) {
      case 0:
        benchmark::DoNotOptimize(crc32c_internal::ExtendSoftware(0, data));
        break;
      case 1:
        benchmark::DoNotOptimize(crc32c_internal::ExtendHardware(0, data));
        break;
      default:
        Crc32cBlocks(data, 64 << 10, absl::MakeSpan(crcs));
        benchmark::DoNotOptimize(crcs.data());
    }
  }
  state.SetLabel(state.range(0) == 0 ? "software" : state.range(0) == 1 ? "sse42" : "blocks");
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * data.size()));
}
BENCHMARK(BM_Crc32c)->Arg(0)->Arg(1)->Arg(2);

// Removes the benchmark directory when the binary exits.
struct CleanUp {
  ~CleanUp() {
    if (!BenchRoot().empty()) {
      for (int d = 0; d < 2; ++d) ::rmdir(absl::StrCat(BenchRoot(), "/d", d).c_str());
      ::rmdir(BenchRoot().c_str());
    }
  }
} clean_up;

}  // namespace
}  // namespace loom
