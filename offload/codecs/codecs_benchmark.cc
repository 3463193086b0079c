// Encode and decode throughput of every offload codec, with each one's compression ratio
// and error on realistic data, against a memcpy of the same bytes.
//
//   ./bazelw run //offload/codecs:codecs_benchmark --
//       --benchmark_repetitions=3 --benchmark_report_aggregates_only=true   (one line)
//
// Rows:
//   Memcpy/<size>                      memcpy of the f32 bytes: the reference speed.
//   Encode/<codec>/<dataset>/<size>    EncodeTensor into a preallocated buffer.
//   Decode/<codec>/<dataset>/<size>    DecodeTensor (checksum included) into one.
//   Kernel/<kernel>/<isa>/<size>       the int8, shuffle and fp16 overflow-scan kernels
//                                      per ISA, CRC-32C.
// bytes_per_second always counts the f32 bytes (4 per element), whatever was written.
// Sizes: 1 MiB of f32 (in L2) and 64 MiB (DRAM).
//
// Counters on Encode/Decode rows, computed once per row outside the timed loop:
//   ratio        f32 bytes / frame bytes (header included)
//   max_abs_err  max |x - x'|
//   max_rel_err  max |x - x'| / |x| over x != 0 (1 where a small value decodes to 0)
//   rel_rms_err  sqrt(sum (x - x')^2 / sum x^2)
//
// Datasets (seeded, so every run sees the same values):
//   weights       N(0, 0.02)
//   gradients     1e-4 * Student-t(3) (heavy tails), a quarter of them shrunk 1000x
//   bf16_weights  weights rounded to bf16, stored as f32 (low half of every float zero)
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "benchmark/benchmark.h"
#include "core/aligned_buffer.h"
#include "core/half.h"
#include "offload/codecs/codec.h"
#include "core/crc32c.h"
#include "offload/codecs/internal/kernels.h"

namespace loom {
namespace {

namespace ci = codecs_internal;

constexpr size_t kSmall = size_t{1} << 18;  // 1 MiB of f32.
constexpr size_t kLarge = size_t{1} << 24;  // 64 MiB.

std::string SizeName(size_t count) { return absl::StrCat(4 * count >> 20, "MiB"); }

// Dataset returns the named dataset of `count` elements, generated once.
const AlignedBuffer<float>& Dataset(const std::string& name, size_t count) {
  static auto* cache = new std::map<std::pair<std::string, size_t>, AlignedBuffer<float>>();
  auto it = cache->find({name, count});
  if (it != cache->end()) return it->second;
  AlignedBuffer<float> data = *AlignedBuffer<float>::Create(count);
  std::mt19937_64 rng(42);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  if (name == "gradients") {
    std::student_t_distribution<float> student(3.0f);
    std::uniform_int_distribution<int> quarter(0, 3);
    for (size_t i = 0; i < count; ++i) {
      data[i] = 1e-4f * student(rng) * (quarter(rng) == 0 ? 1e-3f : 1.0f);
    }
  } else {
    for (size_t i = 0; i < count; ++i) data[i] = normal(rng);
    if (name == "bf16_weights") {
      for (size_t i = 0; i < count; ++i) data[i] = ToFloat(ToBFloat16(data[i]));
    }
  }
  return cache->emplace(std::make_pair(name, count), std::move(data)).first->second;
}

struct Config {
  std::string name;
  CodecOptions options;
  std::vector<std::string> datasets;
};

std::vector<Config> Configs() {
  const std::vector<std::string> lossy = {"weights", "gradients"};
  const std::vector<std::string> lossless = {"weights", "gradients", "bf16_weights"};
  auto options = [](CodecKind kind) {
    CodecOptions o;
    o.kind = kind;
    return o;
  };
  std::vector<Config> configs;
  configs.push_back({"raw", options(CodecKind::kRaw), {"weights"}});
  configs.push_back({"fp16", options(CodecKind::kFp16), lossy});
  configs.push_back({"bf16", options(CodecKind::kBf16), lossy});
  for (int64_t block : {64, 256}) {
    CodecOptions o = options(CodecKind::kInt8Blockwise);
    o.block_size = block;
    configs.push_back({absl::StrCat("int8_b", block), o, lossy});
  }
  for (bool shuffle : {false, true}) {
    CodecOptions lz4 = options(CodecKind::kLz4);
    lz4.byte_shuffle = shuffle;
    configs.push_back({shuffle ? "lz4+shuffle" : "lz4", lz4, lossless});
    CodecOptions zstd = options(CodecKind::kZstd);
    zstd.byte_shuffle = shuffle;
    configs.push_back({shuffle ? "zstd1+shuffle" : "zstd1", zstd, lossless});
  }
  CodecOptions zstd3 = options(CodecKind::kZstd);
  zstd3.zstd_level = 3;
  configs.push_back({"zstd3+shuffle", zstd3, lossless});
  return configs;
}

// Prepared holds one row's input, its frame and the decoded output, with the metrics.
struct Prepared {
  absl::Span<const float> input;
  AlignedBuffer<std::byte> frame;
  size_t frame_bytes = 0;
  AlignedBuffer<float> output;
  double ratio = 0, max_abs = 0, max_rel = 0, rel_rms = 0;
};

std::unique_ptr<Prepared> Prepare(const CodecOptions& options, const std::string& dataset,
                                  size_t count, benchmark::State& state) {
  auto p = std::make_unique<Prepared>();
  p->input = Dataset(dataset, count).span();
  p->frame = *AlignedBuffer<std::byte>::Create(*MaxEncodedBytes(options, count));
  p->output = *AlignedBuffer<float>::Create(count);
  auto bytes = EncodeTensor(options, p->input, p->frame.span());
  if (!bytes.ok()) {
    state.SkipWithError(std::string(bytes.status().message()).c_str());
    return nullptr;
  }
  p->frame_bytes = *bytes;
  if (absl::Status s =
          DecodeTensor(absl::MakeConstSpan(p->frame.data(), p->frame_bytes), p->output.span());
      !s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
    return nullptr;
  }
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < count; ++i) {
    const double x = static_cast<double>(p->input[i]);
    const double err = std::fabs(x - static_cast<double>(p->output[i]));
    p->max_abs = std::max(p->max_abs, err);
    if (x != 0) p->max_rel = std::max(p->max_rel, err / std::fabs(x));
    err2 += err * err;
    ref2 += x * x;
  }
  p->ratio = 4.0 * static_cast<double>(count) / static_cast<double>(p->frame_bytes);
  p->rel_rms = ref2 > 0 ? std::sqrt(err2 / ref2) : 0;
  return p;
}

void Report(benchmark::State& state, const Prepared& p) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(4 * p.input.size()));
  state.counters["ratio"] = p.ratio;
  state.counters["max_abs_err"] = p.max_abs;
  state.counters["max_rel_err"] = p.max_rel;
  state.counters["rel_rms_err"] = p.rel_rms;
}

void BM_Encode(benchmark::State& state, CodecOptions options, std::string dataset, size_t count) {
  std::unique_ptr<Prepared> p = Prepare(options, dataset, count, state);
  if (p == nullptr) return;
  for (auto _ : state) {
    auto bytes = EncodeTensor(options, p->input, p->frame.span());
    benchmark::DoNotOptimize(bytes);
    benchmark::ClobberMemory();
  }
  Report(state, *p);
}

void BM_Decode(benchmark::State& state, CodecOptions options, std::string dataset, size_t count) {
  std::unique_ptr<Prepared> p = Prepare(options, dataset, count, state);
  if (p == nullptr) return;
  const auto frame = absl::MakeConstSpan(p->frame.data(), p->frame_bytes);
  for (auto _ : state) {
    absl::Status status = DecodeTensor(frame, p->output.span());
    benchmark::DoNotOptimize(status);
    benchmark::ClobberMemory();
  }
  Report(state, *p);
}

void BM_Memcpy(benchmark::State& state, size_t count) {
  const AlignedBuffer<float>& src = Dataset("weights", count);
  AlignedBuffer<float> dst = *AlignedBuffer<float>::Create(count);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), 4 * count);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(4 * count));
}

// ---------------------------------------------------------------- kernels, per ISA

enum class KernelKind { kQuantize, kDequantize, kShuffle, kUnshuffle, kFindOverflow };

void BM_Kernel(benchmark::State& state, KernelKind kind, ci::Isa isa, size_t count) {
  if (!ci::IsaSupported(isa)) {
    state.SkipWithError("ISA not supported");
    return;
  }
  const ci::Kernels& k = ci::KernelsFor(isa);
  const AlignedBuffer<float>& x = Dataset("weights", count);
  AlignedBuffer<std::byte> buf = *AlignedBuffer<std::byte>::Create(4 * count + 4 * count / 256);
  AlignedBuffer<float> y = *AlignedBuffer<float>::Create(count);
  k.quantize_int8(x.span(), 256, buf.data());
  const std::byte* in = reinterpret_cast<const std::byte*>(x.data());
  for (auto _ : state) {
    switch (kind) {
      case KernelKind::kQuantize:
        benchmark::DoNotOptimize(k.quantize_int8(x.span(), 256, buf.data()));
        break;
      case KernelKind::kDequantize:
        k.dequantize_int8(buf.data(), 256, y.span());
        break;
      case KernelKind::kShuffle:
        k.shuffle4(in, count, buf.data());
        break;
      case KernelKind::kUnshuffle:
        k.unshuffle4(in, count, reinterpret_cast<std::byte*>(y.data()));
        break;
      case KernelKind::kFindOverflow:  // fp16's threshold; no weight reaches it.
        benchmark::DoNotOptimize(k.find_overflow(x.span(), 0x477FF000u));
        break;
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(4 * count));
}

void BM_Crc32c(benchmark::State& state, bool hardware, size_t count) {
  if (hardware && !crc32c_internal::HasHardware()) {
    state.SkipWithError("no SSE4.2");
    return;
  }
  const AlignedBuffer<float>& x = Dataset("weights", count);
  const auto bytes = absl::MakeConstSpan(reinterpret_cast<const std::byte*>(x.data()), 4 * count);
  for (auto _ : state) {
    benchmark::DoNotOptimize(hardware ? crc32c_internal::ExtendHardware(0, bytes)
                                      : crc32c_internal::ExtendSoftware(0, bytes));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(4 * count));
}

[[maybe_unused]] const bool kRegistered = [] {
  for (size_t count : {kSmall, kLarge}) {
    benchmark::RegisterBenchmark(absl::StrCat("Memcpy/", SizeName(count)).c_str(), BM_Memcpy,
                                 count);
  }
  for (const Config& config : Configs()) {
    for (const std::string& dataset : config.datasets) {
      for (size_t count : {kSmall, kLarge}) {
        const std::string suffix = absl::StrCat(config.name, "/", dataset, "/", SizeName(count));
        benchmark::RegisterBenchmark(absl::StrCat("Encode/", suffix).c_str(), BM_Encode,
                                     config.options, dataset, count);
        benchmark::RegisterBenchmark(absl::StrCat("Decode/", suffix).c_str(), BM_Decode,
                                     config.options, dataset, count);
      }
    }
  }
  const std::pair<KernelKind, const char*> kernels[] = {
      {KernelKind::kQuantize, "int8_quantize_b256"},
      {KernelKind::kDequantize, "int8_dequantize_b256"},
      {KernelKind::kShuffle, "shuffle4"},
      {KernelKind::kUnshuffle, "unshuffle4"},
      {KernelKind::kFindOverflow, "fp16_overflow_scan"}};
  for (const auto& [kind, name] : kernels) {
    for (ci::Isa isa : ci::AllIsas()) {
      for (size_t count : {kSmall, kLarge}) {
        benchmark::RegisterBenchmark(
            absl::StrCat("Kernel/", name, "/", ci::IsaName(isa), "/", SizeName(count)).c_str(),
            BM_Kernel, kind, isa, count);
      }
    }
  }
  for (bool hardware : {false, true}) {
    for (size_t count : {kSmall, kLarge}) {
      benchmark::RegisterBenchmark(
          absl::StrCat("Kernel/crc32c/", hardware ? "sse42" : "software", "/", SizeName(count))
              .c_str(),
          BM_Crc32c, hardware, count);
    }
  }
  return true;
}();

}  // namespace
}  // namespace loom
