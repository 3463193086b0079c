// disk_tier_bench_cli: times DiskTier::Write and DiskTier::Read of one tensor and prints
// GB/s (1 GB = 1e9 bytes, as dd prints). compare_dd.sh runs it next to dd.
//
//   disk_tier_bench_cli --dirs=/mnt/nvme0/swap,/mnt/nvme1/swap --size_mb=1024
//       --engine=io_uring --direct=true --repeat=3     (one command line)
//
// Output: a "#" line with the settings and what the tier actually uses, then per
// repetition "write <bytes> <seconds> <GB/s>" and "read <bytes> <seconds> <GB/s>". Write
// time includes checksums, fdatasync, rename and the directory fsync (like dd's
// conv=fsync); read time includes verifying every checksum. The data is random and
// the buffers 4096-aligned, so I/O goes straight from and to them.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/aligned_buffer.h"
#include "offload/disk/disk_tier.h"

ABSL_FLAG(std::string, dirs, "/tmp", "comma-separated directories to stripe over");
ABSL_FLAG(int64_t, size_mb, 1024, "tensor size in MiB");
ABSL_FLAG(std::string, engine, "auto", "auto, io_uring or thread_pool");
ABSL_FLAG(bool, direct, true, "use O_DIRECT");
ABSL_FLAG(int, queue_depth, 32, "io_uring I/Os in flight per call");
ABSL_FLAG(int, threads, 8, "thread-pool workers");
ABSL_FLAG(int64_t, stripe_kib, 1024, "stripe (and I/O) size in KiB");
ABSL_FLAG(int, repeat, 1, "write+read repetitions");

namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "disk_tier_bench_cli: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  auto engine = loom::ParseIoEngine(absl::GetFlag(FLAGS_engine));
  if (!engine.ok()) return Fail(engine.status());
  loom::DiskTierOptions options;
  options.directories = absl::StrSplit(absl::GetFlag(FLAGS_dirs), ',', absl::SkipEmpty());
  options.engine = *engine;
  options.direct_io = absl::GetFlag(FLAGS_direct);
  options.queue_depth = absl::GetFlag(FLAGS_queue_depth);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.stripe_bytes = static_cast<size_t>(absl::GetFlag(FLAGS_stripe_kib)) << 10;
  auto tier = loom::DiskTier::Create(options);
  if (!tier.ok()) return Fail(tier.status());

  const size_t bytes = static_cast<size_t>(absl::GetFlag(FLAGS_size_mb)) << 20;
  auto data = loom::AlignedBuffer<std::byte>::Create(bytes, 4096);
  auto back = loom::AlignedBuffer<std::byte>::Create(bytes, 4096);
  if (!data.ok()) return Fail(data.status());
  if (!back.ok()) return Fail(back.status());
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i + 8 <= bytes; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(data->data() + i, &x, 8);
  }
  const loom::DiskTierStats stats = (*tier)->stats();
  std::printf(
      "# dirs=%s size_mb=%lld engine=%s direct_io=%d stripe_kib=%lld queue_depth=%d "
      "threads=%d %s %s\n",
      absl::GetFlag(FLAGS_dirs).c_str(), static_cast<long long>(absl::GetFlag(FLAGS_size_mb)),
      std::string(loom::IoEngineName(stats.engine)).c_str(), stats.direct_io ? 1 : 0,
      static_cast<long long>(absl::GetFlag(FLAGS_stripe_kib)), options.queue_depth, options.threads,
      stats.engine_note.c_str(), stats.direct_io_note.c_str());
  for (int r = 0; r < absl::GetFlag(FLAGS_repeat); ++r) {
    absl::Time start = absl::Now();
    absl::Status s = (*tier)->Write("disk_tier_bench_cli", data->span());
    const double write_s = absl::ToDoubleSeconds(absl::Now() - start);
    if (!s.ok()) return Fail(s);
    start = absl::Now();
    s = (*tier)->Read("disk_tier_bench_cli", back->span());
    const double read_s = absl::ToDoubleSeconds(absl::Now() - start);
    if (!s.ok()) return Fail(s);
    if (std::memcmp(data->data(), back->data(), bytes) != 0) {
      return Fail(absl::DataLossError("read back different bytes"));
    }
    std::printf("write %zu %.6f %.3f\n", bytes, write_s,
                static_cast<double>(bytes) / write_s / 1e9);
    std::printf("read %zu %.6f %.3f\n", bytes, read_s, static_cast<double>(bytes) / read_s / 1e9);
    std::fflush(stdout);
  }
  const absl::Status removed = (*tier)->Remove("disk_tier_bench_cli");
  if (!removed.ok()) return Fail(removed);
  return 0;
}
