// Overlap of transfers and compute through PrefetchStream: with prefetching, the wall
// time of a pass over offloaded tensors should approach max(compute, transfer), not
// their sum.
//
// The transfer is real I/O: each tensor is read with pread from a file on disk
// (O_DIRECT, so the page cache does not turn it into a memcpy; buffered where the
// filesystem refuses O_DIRECT, which the `direct` counter reports). The compute is a
// real pass over the fetched floats, repeated so that one tensor's compute takes
// `ratio` percent of its read time (calibrated at start-up).
//
// For each ratio the benchmark measures, in one run: transfer alone, compute alone,
// serial (read then compute, tensor by tensor) and overlapped (PrefetchStream, one
// worker, depth 2), and reports overlapped / max(compute, transfer) (1.0 is perfect
// overlap) and serial / overlapped.
//
//   ./bazelw run --config=opt //offload:prefetch_benchmark -- --dir=/tmp
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "offload/host_pool.h"
#include "offload/prefetch_engine.h"
#include "offload/prefetch_stream.h"

ABSL_FLAG(std::string, dir, "/tmp", "directory for the benchmark's tensor file");

namespace loom {
namespace {

constexpr size_t kTensorBytes = size_t{8} << 20;
constexpr int kTensors = 16;

// The tensor file, written once per process, and its descriptor for reads.
class TensorFile {
 public:
  static TensorFile& Get() {
    static TensorFile* file = new TensorFile();
    return *file;
  }
  int fd() const { return fd_; }
  bool direct() const { return direct_; }

  absl::Status Read(size_t index, absl::Span<std::byte> into) const {
    size_t done = 0;
    while (done < into.size()) {
      const ssize_t got = pread(fd_, into.data() + done, into.size() - done,
                                static_cast<off_t>(index * kTensorBytes + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        return absl::DataLossError(absl::StrCat("pread of tensor ", index, " returned ", got, ": ",
                                                std::strerror(errno)));
      }
      done += static_cast<size_t>(got);
    }
    return absl::OkStatus();
  }

 private:
  TensorFile() {
    path_ = absl::StrCat(absl::GetFlag(FLAGS_dir), "/loom_prefetch_benchmark_", getpid());
    const int writer = open(path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
    std::vector<float> values(kTensorBytes / sizeof(float));
    for (int t = 0; t < kTensors && writer >= 0; ++t) {
      for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((t * 31 + i) % 1000) * 1e-3f;
      if (write(writer, values.data(), kTensorBytes) != static_cast<ssize_t>(kTensorBytes)) break;
    }
    if (writer >= 0) {
      fsync(writer);
      close(writer);
    }
    fd_ = open(path_.c_str(), O_RDONLY | O_DIRECT);
    direct_ = fd_ >= 0;
    if (!direct_) fd_ = open(path_.c_str(), O_RDONLY);
    unlink(path_.c_str());  // Gone when the process ends; the descriptor keeps it.
  }
  std::string path_;
  int fd_ = -1;
  bool direct_ = false;
};

// Compute: `passes` sweeps of a dependent multiply-add over the tensor's floats.
float Compute(absl::Span<const std::byte> bytes, int passes) {
  const float* x = reinterpret_cast<const float*>(bytes.data());
  const size_t n = bytes.size() / sizeof(float);
  float acc = 0;
  for (int p = 0; p < passes; ++p) {
    float local = 0;
    for (size_t i = 0; i < n; ++i) local = local * 0.999f + x[i];
    acc += local;
  }
  return acc;
}

double Seconds(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

void BM_PrefetchOverlap(benchmark::State& state) {
  const int ratio_percent = static_cast<int>(state.range(0));
  TensorFile& file = TensorFile::Get();
  if (file.fd() < 0) {
    state.SkipWithError("could not write the tensor file (see --dir)");
    return;
  }
  HostPoolOptions pool_options;
  pool_options.budget_bytes = 8 * kTensorBytes;
  pool_options.kind = HostMemoryKind::kPageable;
  std::unique_ptr<HostMemoryPool> pool = *HostMemoryPool::Create(pool_options);
  std::unique_ptr<PrefetchEngine> engine = *PrefetchEngine::Create({1, 64});
  HostBlock scratch = *pool->Allocate(kTensorBytes);

  // Calibrate: the read time of one tensor, and passes so compute ~ ratio x read.
  absl::Time start = absl::Now();
  for (int t = 0; t < kTensors; ++t) {
    if (!file.Read(t, scratch.bytes()).ok()) {
      state.SkipWithError("read failed");
      return;
    }
  }
  const double read_one = Seconds(start) / kTensors;
  double pass = 1e9;  // The fastest of a few single passes: the least disturbed.
  for (int i = 0; i < 5; ++i) {
    start = absl::Now();
    benchmark::DoNotOptimize(Compute(scratch.bytes(), 1));
    pass = std::min(pass, Seconds(start));
  }
  const int passes = std::max(1, static_cast<int>(std::lround(read_one * ratio_percent / 100.0 / pass)));

  std::vector<StreamTensor> tensors;
  for (int t = 0; t < kTensors; ++t) tensors.push_back({absl::StrCat("t", t), kTensorBytes});
  double transfer = 0, compute = 0, serial = 0, overlapped = 0;
  for (auto _ : state) {
    start = absl::Now();
    for (int t = 0; t < kTensors; ++t) file.Read(t, scratch.bytes()).IgnoreError();
    transfer = Seconds(start);

    start = absl::Now();
    for (int t = 0; t < kTensors; ++t) benchmark::DoNotOptimize(Compute(scratch.bytes(), passes));
    compute = Seconds(start);

    start = absl::Now();
    for (int t = 0; t < kTensors; ++t) {
      file.Read(t, scratch.bytes()).IgnoreError();
      benchmark::DoNotOptimize(Compute(scratch.bytes(), passes));
    }
    serial = Seconds(start);

    start = absl::Now();
    std::unique_ptr<PrefetchStream> stream =
        *PrefetchStream::Create(*engine, *pool, tensors, {2, absl::Seconds(10)},
                                [&](size_t i, absl::Span<std::byte> into, const CancelToken&) {
                                  return file.Read(i, into);
                                });
    while (true) {
      absl::StatusOr<std::optional<StreamItem>> item = stream->Next(absl::Now() + absl::Seconds(30));
      if (!item.ok()) {
        state.SkipWithError(std::string(item.status().message()).c_str());
        return;
      }
      if (!item->has_value()) break;
      benchmark::DoNotOptimize(Compute((*item)->data, passes));
    }
    stream.reset();
    overlapped = Seconds(start);
    state.SetIterationTime(overlapped);
  }
  state.SetBytesProcessed(state.iterations() * kTensors * static_cast<int64_t>(kTensorBytes));
  state.counters["transfer_ms"] = transfer * 1e3;
  state.counters["compute_ms"] = compute * 1e3;
  state.counters["serial_ms"] = serial * 1e3;
  state.counters["overlapped_ms"] = overlapped * 1e3;
  state.counters["vs_max"] = overlapped / std::max(transfer, compute);
  state.counters["serial_speedup"] = serial / overlapped;
  state.counters["direct"] = file.direct() ? 1 : 0;
}
BENCHMARK(BM_PrefetchOverlap)->Arg(50)->Arg(100)->Arg(200)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace loom

// Google Benchmark takes its --benchmark_* flags first; --dir is ours.
int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  absl::ParseCommandLine(argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
