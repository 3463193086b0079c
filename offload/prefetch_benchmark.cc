// Overlap of transfers and compute through PrefetchStream: with prefetching, the wall
// time of a pass over offloaded tensors should approach max(compute, transfer), not
// their sum.
//
// The transfer is real I/O: each tensor is read with pread from a file on disk
// (O_DIRECT, so the page cache does not turn it into a memcpy; buffered where the
// filesystem refuses O_DIRECT, which the `direct` counter reports). The compute is a
// real dependent multiply-add chain over the fetched floats, sized at start-up so one
// tensor's compute takes `ratio` percent of its read time. Ratio 0 runs the stream
// with no compute at all: its cost over plain reads is the engine's own overhead.
//
// Each iteration measures, back to back: transfer alone (plain reads, rotating over
// as many buffers as the stream uses), compute alone, each of the two while the other
// kind of work runs on a second thread (`*_contended`), serial (read then compute,
// tensor by tensor) and overlapped (PrefetchStream, one worker, depth 2). Every figure
// is the fastest of the iterations: the least disturbed. Counters:
//   vs_max        overlapped / max(transfer, compute): 1.0 is perfect overlap.
//   vs_contended  overlapped / max(transfer_contended, compute_contended): the same
//                 against what this machine allows when both run at once (on a VM
//                 the host's disk emulation can slow the guest's compute core).
//   serial_speedup  serial / overlapped.
//   stalled_ms    the time the compute loop waited in Next() for a transfer.
//
//   ./bazelw run //offload:prefetch_benchmark -- --dir=/tmp
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
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

constexpr size_t kTensorBytes = size_t{4} << 20;
constexpr int kTensors = 32;

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

// Compute: a dependent multiply-add over `elements` floats of the tensor, wrapping
// around, so its cost is linear in `elements` and independent of memory bandwidth.
float Compute(absl::Span<const std::byte> bytes, size_t elements) {
  const float* x = reinterpret_cast<const float*>(bytes.data());
  const size_t n = bytes.size() / sizeof(float);
  float acc = 0;
  for (size_t done = 0; done < elements;) {
    const size_t take = std::min(n, elements - done);
    float local = 0;
    for (size_t i = 0; i < take; ++i) local = local * 0.999f + x[i];
    acc += local;
    done += take;
  }
  return acc;
}

double Seconds(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

// Runs `work` on a second thread, over and over, while `timed` runs here; returns
// the seconds `timed` took.
template <typename Work, typename Timed>
double TimedWhile(Work work, Timed timed) {
  std::atomic<bool> stop{false};
  std::thread other([&] {
    while (!stop.load(std::memory_order_relaxed)) work();
  });
  const absl::Time start = absl::Now();
  timed();
  const double seconds = Seconds(start);
  stop = true;
  other.join();
  return seconds;
}

void BM_PrefetchOverlap(benchmark::State& state) {
  const int ratio_percent = static_cast<int>(state.range(0));
  constexpr int kDepth = 2;
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
  // The plain reads rotate over as many buffers as the stream uses, so both write
  // the same amount of memory; `other` is the second thread's.
  std::vector<HostBlock> buffers;
  for (int b = 0; b < kDepth + 1; ++b) buffers.push_back(*pool->Allocate(kTensorBytes));
  HostBlock other = *pool->Allocate(kTensorBytes);
  const auto read_all = [&](bool* ok) {
    for (int t = 0; t < kTensors; ++t) {
      if (!file.Read(t, buffers[t % buffers.size()].bytes()).ok()) *ok = false;
    }
  };

  // Calibrate: the fastest of a few reads of the file and of a few full compute
  // passes, then the element count that makes compute ~ ratio x read per tensor.
  const size_t floats = kTensorBytes / sizeof(float);
  double read_one = 1e9, pass = 1e9;
  for (int i = 0; i < 3; ++i) {
    bool ok = true;
    const absl::Time start = absl::Now();
    read_all(&ok);
    if (!ok) {
      state.SkipWithError("read failed");
      return;
    }
    read_one = std::min(read_one, Seconds(start) / kTensors);
  }
  for (int i = 0; i < 5; ++i) {
    const absl::Time start = absl::Now();
    benchmark::DoNotOptimize(Compute(buffers[0].bytes(), floats));
    pass = std::min(pass, Seconds(start));
  }
  const size_t elements =
      static_cast<size_t>(std::llround(floats * read_one * ratio_percent / 100.0 / pass));
  const auto compute_all = [&](absl::Span<const std::byte> bytes) {
    for (int t = 0; t < kTensors; ++t) benchmark::DoNotOptimize(Compute(bytes, elements));
  };

  std::vector<StreamTensor> tensors;
  for (int t = 0; t < kTensors; ++t) tensors.push_back({absl::StrCat("t", t), kTensorBytes});
  constexpr double kNone = 1e9;
  double transfer = kNone, compute = kNone, transfer_contended = kNone;
  double compute_contended = kNone, serial = kNone, overlapped = kNone, stalled = kNone;
  bool ok = true;
  for (auto _ : state) {
    absl::Time start = absl::Now();
    read_all(&ok);
    transfer = std::min(transfer, Seconds(start));

    start = absl::Now();
    compute_all(buffers[0].bytes());
    compute = std::min(compute, Seconds(start));

    transfer_contended = std::min(
        transfer_contended,
        TimedWhile([&] { benchmark::DoNotOptimize(Compute(other.bytes(), floats)); },
                   [&] { read_all(&ok); }));
    int next_read = 0;
    compute_contended = std::min(
        compute_contended,
        TimedWhile([&] { ok &= file.Read(next_read++ % kTensors, other.bytes()).ok(); },
                   [&] { compute_all(buffers[0].bytes()); }));

    start = absl::Now();
    for (int t = 0; t < kTensors; ++t) {
      ok &= file.Read(t, buffers[0].bytes()).ok();
      benchmark::DoNotOptimize(Compute(buffers[0].bytes(), elements));
    }
    serial = std::min(serial, Seconds(start));

    double waited = 0;
    start = absl::Now();
    std::unique_ptr<PrefetchStream> stream =
        *PrefetchStream::Create(*engine, *pool, tensors, {kDepth, absl::Seconds(10)},
                                [&](size_t i, absl::Span<std::byte> into, const CancelToken&) {
                                  return file.Read(i, into);
                                });
    while (true) {
      const absl::Time wait_start = absl::Now();
      absl::StatusOr<std::optional<StreamItem>> item = stream->Next(absl::Now() + absl::Seconds(30));
      waited += Seconds(wait_start);
      if (!item.ok()) {
        state.SkipWithError(std::string(item.status().message()).c_str());
        return;
      }
      if (!item->has_value()) break;
      benchmark::DoNotOptimize(Compute((*item)->data, elements));
    }
    stream.reset();
    const double this_run = Seconds(start);
    state.SetIterationTime(this_run);
    if (this_run < overlapped) {
      overlapped = this_run;
      stalled = waited;
    }
  }
  if (!ok) {
    state.SkipWithError("a plain read failed");
    return;
  }
  state.SetBytesProcessed(state.iterations() * kTensors * static_cast<int64_t>(kTensorBytes));
  state.counters["transfer_ms"] = transfer * 1e3;
  state.counters["compute_ms"] = compute * 1e3;
  state.counters["transfer_contended_ms"] = transfer_contended * 1e3;
  state.counters["compute_contended_ms"] = compute_contended * 1e3;
  state.counters["serial_ms"] = serial * 1e3;
  state.counters["overlapped_ms"] = overlapped * 1e3;
  state.counters["stalled_ms"] = stalled * 1e3;
  state.counters["vs_max"] = overlapped / std::max(transfer, compute);
  state.counters["vs_contended"] = overlapped / std::max(transfer_contended, compute_contended);
  state.counters["serial_speedup"] = serial / overlapped;
  state.counters["direct"] = file.direct() ? 1 : 0;
}
BENCHMARK(BM_PrefetchOverlap)
    ->Arg(0)
    ->Arg(50)
    ->Arg(100)
    ->Arg(200)
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

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
