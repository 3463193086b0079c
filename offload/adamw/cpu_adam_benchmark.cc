// Throughput of one AdamW step over N parameters: the fused kernels of AdamWStep (scalar,
// AVX2, AVX-512; f32, bf16 and 8-bit moments; with and without a bf16 copy of the params)
// against a naive unfused loop, and against the memory-bandwidth bound measured here, in
// the same binary, on arrays of the same size.
//
//   ./bazelw run //offload/adamw:cpu_adam_benchmark --
//       --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
//   (one command line)
//
// Sizes: 64Ki parameters (1 MiB of f32 p, g, m, v: resident in a 2 MiB L2), 16Mi (256 MiB)
// and 64Mi (1 GiB, twice the 480 MiB L3 this machine's CPU reports, so the bound is DRAM's
// whatever share of the L3 a VM gets). Threads: 1 and 2.
//
// Counters: items_per_second is parameters per second (for the bound rows: the bound in
// parameters per second, bytes/s / 28). bytes_per_second counts the bytes a variant must
// move per parameter ("B/param"): 28 for the fused f32 step (read p, g, m, v = 16; write p,
// m, v = 12), 20 with bf16 moments, 16 + 16/block with 8-bit moments (their absmax scales),
// +2 with a bf16 param copy, and 104 for the naive loop (its eleven passes over p, g, m, v
// and four temporaries, listed at NaiveStep). Every row uses the wall clock (UseRealTime),
// so threads count.
//
// The bound: BM_Bound runs the fused step's own access pattern with no arithmetic to speak
// of, p += g; m += g; v += g over four arrays in one pass (16 bytes read and 12 written per
// element, in place, as AdamW does), vectorized for the best ISA (GCC target_clones). The
// bound in parameters per second is its bytes per second / 28. BM_Triad is STREAM's
// a = b + s * c (counting 12 bytes per element; with write-allocate the hardware moves 16)
// for comparison.
//
// BM_Paired runs the bound, the naive loop and the fused step with f32, bf16 and 8-bit
// moments back to back in every iteration (DRAM sizes only, for at least 5 s) and reports
// each variant's fastest run and the ratios of those as counters: on a shared machine
// whose load changes by the second, rows measured a minute apart are not comparable, but
// variants interleaved within each iteration see the same load, and the fastest of many
// runs is the least disturbed. The README's ratios and "% of bound" come from these.
#include "core/internal/x86_intrinsics.h"  // first: see there

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "benchmark/benchmark.h"
#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/half.h"
#include "offload/adamw/cpu_adamw.h"
#include "core/internal/helper_team.h"

namespace loom {
namespace {


constexpr int64_t kSmall = int64_t{1} << 16;
constexpr int64_t kLarge = int64_t{1} << 24;
constexpr int64_t kHuge = int64_t{1} << 26;
// Elements per task when a pass is spread over threads.
constexpr int64_t kChunk = 16384;

// Arrays: p, g, m, v and the naive loop's temporaries for one size, filled once and shared
// by every benchmark of that size (filling 1 GiB takes a while).
struct Arrays {
  AlignedBuffer<float> p, g, m, v;
  AlignedBuffer<float> mhat, vhat, denom, update;
};

// A cheap, seeded, deterministic fill: values in [lo, hi) from a hash of the index.
void Fill(absl::Span<float> x, uint32_t seed, float lo, float hi) {
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u + seed * 0x9E3779B9u;
    h ^= h >> 15;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    x[i] = lo + (hi - lo) * static_cast<float>(h >> 8) * (1.0f / 16777216.0f);
  }
}

Arrays* ArraysFor(int64_t n) {
  static std::map<int64_t, std::unique_ptr<Arrays>>* const cache =
      new std::map<int64_t, std::unique_ptr<Arrays>>();
  auto it = cache->find(n);
  if (it != cache->end()) return it->second.get();
  cache->clear();  // One size at a time keeps the footprint at 2 GiB.
  auto a = std::make_unique<Arrays>();
  const size_t size = static_cast<size_t>(n);
  for (AlignedBuffer<float>* buffer :
       {&a->p, &a->g, &a->m, &a->v, &a->mhat, &a->vhat, &a->denom, &a->update}) {
    absl::StatusOr<AlignedBuffer<float>> created = AlignedBuffer<float>::Create(size);
    if (!created.ok()) return nullptr;
    *buffer = std::move(created).value();
  }
  Fill(a->p.span(), 1, -1.0f, 1.0f);
  Fill(a->g.span(), 2, -1e-2f, 1e-2f);
  Fill(a->m.span(), 3, -1e-3f, 1e-3f);
  Fill(a->v.span(), 4, 1e-6f, 1e-4f);
  Fill(a->mhat.span(), 5, 0.0f, 1.0f);
  Fill(a->vhat.span(), 6, 0.0f, 1.0f);
  Fill(a->denom.span(), 7, 0.0f, 1.0f);
  Fill(a->update.span(), 8, 0.0f, 1.0f);
  Arrays* raw = a.get();
  (*cache)[n] = std::move(a);
  return raw;
}

AdamWHyper BenchHyper() {
  AdamWHyper h;
  h.lr = 1e-3f;
  h.weight_decay = 1e-2f;
  h.step = 10;
  h.grad_scale = 0.5f;
  return h;
}

// ParallelFor runs body(begin, end) over [0, n) in chunks on `threads` threads: the
// calling thread and its parked helpers (core's thread team, which AdamWStep uses too).
template <typename Body>
void ParallelFor(int threads, int64_t n, const Body& body) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  core_internal::HelperTeam::ForThisThread()
      .Run(threads, static_cast<int>(chunks),
           [&](int c) {
             body(c * kChunk, std::min(n, (c + 1) * kChunk));
             return absl::OkStatus();
           })
      .IgnoreError();
}

// -------------------------------------------------------------------------------------
// The bound and STREAM triad. target_clones compiles each for AVX-512, AVX2 and the
// baseline and picks at load time, so the bound is not held back by the ISA.

// The bound's access pattern, plainly and with a software prefetch 512 elements ahead as
// the fused kernels do; the bound is the faster of the two (which one wins varies).
__attribute__((target_clones("avx512f", "avx2", "default"))) void BoundPass(
    float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
    int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    const float gi = g[i];
    p[i] += gi;
    m[i] += gi;
    v[i] += gi;
  }
}

// The prefetching variant is written like the fused AVX-512 kernel's loop (16 lanes,
// unaligned loads and stores, one prefetch per array per vector), minus the arithmetic.
__attribute__((target("avx512f"))) void BoundPassPrefetchAvx512(float* p, const float* g, float* m,
                                                                float* v, int64_t begin,
                                                                int64_t end) {
  int64_t i = begin;
  for (; i + 16 <= end; i += 16) {
    __builtin_prefetch(p + i + 512);
    __builtin_prefetch(g + i + 512);
    __builtin_prefetch(m + i + 512);
    __builtin_prefetch(v + i + 512);
    const __m512 gi = _mm512_loadu_ps(g + i);
    _mm512_storeu_ps(p + i, _mm512_add_ps(_mm512_loadu_ps(p + i), gi));
    _mm512_storeu_ps(m + i, _mm512_add_ps(_mm512_loadu_ps(m + i), gi));
    _mm512_storeu_ps(v + i, _mm512_add_ps(_mm512_loadu_ps(v + i), gi));
  }
  BoundPass(p, g, m, v, i, end);
}

void BoundPassPrefetch(float* p, const float* g, float* m, float* v, int64_t begin, int64_t end) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) return BoundPassPrefetchAvx512(p, g, m, v, begin, end);
  BoundPass(p, g, m, v, begin, end);
}

__attribute__((target_clones("avx512f", "avx2", "default"))) void TriadPass(
    float* __restrict a, const float* __restrict b, const float* __restrict c, float s,
    int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) a[i] = b[i] + s * c[i];
}

void BM_Bound(benchmark::State& state, bool prefetch) {
  const int64_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  Arrays* a = ArraysFor(n);
  if (a == nullptr) return state.SkipWithError("could not allocate the arrays");
  // On the naive loop's temporaries, which nothing else reads: p, m and v keep sane values
  // for the AdamW rows.
  for (auto _ : state) {
    ParallelFor(threads, n, [&](int64_t begin, int64_t end) {
      (prefetch ? BoundPassPrefetch : BoundPass)(a->mhat.data(), a->update.data(), a->vhat.data(),
                                                 a->denom.data(), begin, end);
    });
    benchmark::ClobberMemory();
  }
  const double bytes = 28.0 * static_cast<double>(n) * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  // items_per_second: the bound in parameters per second at 28 bytes each.
  state.SetItemsProcessed(static_cast<int64_t>(bytes / 28.0));
  state.counters["B/param"] = 28;
}

void BM_Triad(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  Arrays* a = ArraysFor(n);
  if (a == nullptr) return state.SkipWithError("could not allocate the arrays");
  for (auto _ : state) {
    ParallelFor(threads, n, [&](int64_t begin, int64_t end) {
      TriadPass(a->mhat.data(), a->vhat.data(), a->denom.data(), 0.5f, begin, end);
    });
    benchmark::ClobberMemory();
  }
  const double bytes = 12.0 * static_cast<double>(n) * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.SetItemsProcessed(static_cast<int64_t>(bytes / 28.0));
  state.counters["B/param"] = 12;
}

// -------------------------------------------------------------------------------------
// The naive step: one full pass over the arrays per Adam sub-step, with temporaries, as a
// framework's eager ops run it. Each pass is vectorized for the best ISA (target_clones)
// and spread over the same threads, so only fusion differs. Bytes per parameter (read +
// written): g *= scale 8; m *= b1 8; m += (1-b1) g 12; v *= b2 8; v += (1-b2) g g 12; mhat
// = m / bc1 8; vhat = v / bc2 8; denom = sqrt(vhat) + eps 8; update = mhat / denom 12; p -=
// lr wd p 8; p -= lr update 12. Total 104.

#define LOOM_NAIVE_PASS __attribute__((target_clones("avx512f", "avx2", "default")))

LOOM_NAIVE_PASS void Scale(float* __restrict x, float s, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) x[i] *= s;
}
LOOM_NAIVE_PASS void AddScaled(float* __restrict x, const float* __restrict y, float s, int64_t b,
                               int64_t e) {
  for (int64_t i = b; i < e; ++i) x[i] += s * y[i];
}
LOOM_NAIVE_PASS void AddScaledSquare(float* __restrict x, const float* __restrict y, float s,
                                     int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) x[i] += s * y[i] * y[i];
}
LOOM_NAIVE_PASS void Divide(float* __restrict out, const float* __restrict x, float s, int64_t b,
                            int64_t e) {
  for (int64_t i = b; i < e; ++i) out[i] = x[i] / s;
}
LOOM_NAIVE_PASS void SqrtAdd(float* __restrict out, const float* __restrict x, float eps, int64_t b,
                             int64_t e) {
  for (int64_t i = b; i < e; ++i) out[i] = std::sqrt(x[i]) + eps;
}
LOOM_NAIVE_PASS void DivideArrays(float* __restrict out, const float* __restrict x,
                                  const float* __restrict y, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) out[i] = x[i] / y[i];
}

void NaiveStep(Arrays& a, const AdamWHyper& h, int threads, int64_t n) {
  const float bc1 = 1.0f - std::pow(h.beta1, static_cast<float>(h.step));
  const float bc2 = 1.0f - std::pow(h.beta2, static_cast<float>(h.step));
  float* p = a.p.data();
  float* g = a.g.data();
  float* m = a.m.data();
  float* v = a.v.data();
  float* mhat = a.mhat.data();
  float* vhat = a.vhat.data();
  float* denom = a.denom.data();
  float* update = a.update.data();
  const auto pass = [&](auto body) { ParallelFor(threads, n, body); };
  // g *= scale alternates with its inverse in the benchmark loop so that the grads keep
  // their magnitude; a framework scales in place too.
  pass([&](int64_t b, int64_t e) { Scale(g, h.grad_scale, b, e); });
  pass([&](int64_t b, int64_t e) { Scale(m, h.beta1, b, e); });
  pass([&](int64_t b, int64_t e) { AddScaled(m, g, 1.0f - h.beta1, b, e); });
  pass([&](int64_t b, int64_t e) { Scale(v, h.beta2, b, e); });
  pass([&](int64_t b, int64_t e) { AddScaledSquare(v, g, 1.0f - h.beta2, b, e); });
  pass([&](int64_t b, int64_t e) { Divide(mhat, m, bc1, b, e); });
  pass([&](int64_t b, int64_t e) { Divide(vhat, v, bc2, b, e); });
  pass([&](int64_t b, int64_t e) { SqrtAdd(denom, vhat, h.eps, b, e); });
  pass([&](int64_t b, int64_t e) { DivideArrays(update, mhat, denom, b, e); });
  // p -= lr wd p, as PyTorch's eager AdamW runs it: p.mul_(1 - lr wd).
  pass([&](int64_t b, int64_t e) { Scale(p, 1.0f - h.lr * h.weight_decay, b, e); });
  pass([&](int64_t b, int64_t e) { AddScaled(p, update, -h.lr, b, e); });
}

void BM_Naive(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  Arrays* a = ArraysFor(n);
  if (a == nullptr) return state.SkipWithError("could not allocate the arrays");
  AdamWHyper h = BenchHyper();
  for (auto _ : state) {
    NaiveStep(*a, h, threads, n);
    h.grad_scale = 1.0f / h.grad_scale;
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(state.iterations() * n * 104);
  state.counters["B/param"] = 104;
}

// -------------------------------------------------------------------------------------
// The fused step.

enum class Copy { kNone, kBF16 };

void BM_Fused(benchmark::State& state, CpuIsa isa, StateFormat format, Copy copy) {
  if (!CpuSupports(isa)) return state.SkipWithError("this CPU lacks the ISA");
  const int64_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  Arrays* a = ArraysFor(n);
  if (a == nullptr) return state.SkipWithError("could not allocate the arrays");
  absl::StatusOr<AdamWState> adam = AdamWState::Create(n, format);
  if (!adam.ok()) return state.SkipWithError("could not allocate the state");
  // Start from the same moments as the f32 arrays hold.
  if (!adam->WriteMoments(a->m.span(), a->v.span()).ok()) return state.SkipWithError("write");
  absl::StatusOr<AlignedBuffer<BFloat16>> half =
      AlignedBuffer<BFloat16>::Create(copy == Copy::kBF16 ? static_cast<size_t>(n) : 0);
  if (!half.ok()) return state.SkipWithError("could not allocate the copy");
  const AdamWHyper h = BenchHyper();
  AdamWOptions options;
  options.isa = isa;
  options.threads = threads;
  HalfCopy half_copy;
  if (copy == Copy::kBF16) half_copy = half->span();
  for (auto _ : state) {
    const absl::Status status = AdamWStep(h, a->p.span(), a->g.span(), *adam, options, half_copy);
    if (!status.ok()) return state.SkipWithError(std::string(status.message()).c_str());
    benchmark::ClobberMemory();
  }
  double bytes_per_param = format == StateFormat::kF32    ? 28.0
                           : format == StateFormat::kBF16 ? 20.0
                                                          : 16.0 + 16.0 / 2048.0;
  if (copy == Copy::kBF16) bytes_per_param += 2.0;
  state.SetItemsProcessed(state.iterations() * n);
  state.SetBytesProcessed(
      static_cast<int64_t>(bytes_per_param * static_cast<double>(n * state.iterations())));
  state.counters["B/param"] = bytes_per_param;
}

// ---------------------------------------------------------------------------------
// Paired: the bound, the naive loop and the fused step with f32, bf16 and 8-bit moments
// (best ISA), run back to back in every iteration, in an order that rotates. On a shared
// machine whose load changes from second to second, rows measured a minute apart are not
// comparable; these ratios are, because every variant sees the same load. Counters:
// each variant's parameters per second over all iterations, and the ratios the README
// reports (time of one over time of the other, same parameter count).

void BM_Paired(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  Arrays* a = ArraysFor(n);
  if (a == nullptr) return state.SkipWithError("could not allocate the arrays");
  std::vector<AdamWState> states;
  for (const StateFormat format :
       {StateFormat::kF32, StateFormat::kBF16, StateFormat::kBlockwise8}) {
    absl::StatusOr<AdamWState> adam = AdamWState::Create(n, format);
    if (!adam.ok() || !adam->WriteMoments(a->m.span(), a->v.span()).ok()) {
      return state.SkipWithError("could not create the states");
    }
    states.push_back(std::move(adam).value());
  }
  AdamWHyper h = BenchHyper();
  AdamWOptions options;
  options.threads = threads;
  constexpr int kVariants = 6;  // bound, bound with prefetch, naive, f32, bf16, 8-bit
  // Each variant's fastest run: under a fluctuating load the minimum is the run that was
  // least disturbed, which makes the ratios far steadier than averages.
  double best[kVariants];
  for (double& b : best) b = 1e30;
  int64_t rounds = 0;
  bool failed = false;
  for (auto _ : state) {
    for (int k = 0; k < kVariants; ++k) {
      const int variant = static_cast<int>((k + rounds) % kVariants);
      const auto start = std::chrono::steady_clock::now();
      if (variant <= 1) {
        ParallelFor(threads, n, [&](int64_t begin, int64_t end) {
          (variant == 1 ? BoundPassPrefetch : BoundPass)(
              a->mhat.data(), a->update.data(), a->vhat.data(), a->denom.data(), begin, end);
        });
      } else if (variant == 2) {
        NaiveStep(*a, h, threads, n);
        h.grad_scale = 1.0f / h.grad_scale;
      } else {
        const AdamWHyper fused = BenchHyper();
        failed |= !AdamWStep(fused, a->p.span(), a->g.span(), states[variant - 3], options).ok();
      }
      benchmark::ClobberMemory();
      best[variant] =
          std::min(best[variant],
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    ++rounds;
  }
  if (failed) return state.SkipWithError("AdamWStep failed");
  const double params = static_cast<double>(n);
  const double bound = std::min(best[0], best[1]);
  state.counters["bound_Mps"] = params / bound / 1e6;
  state.counters["naive_Mps"] = params / best[2] / 1e6;
  state.counters["f32_Mps"] = params / best[3] / 1e6;
  state.counters["bf16_Mps"] = params / best[4] / 1e6;
  state.counters["8bit_Mps"] = params / best[5] / 1e6;
  state.counters["f32_x_naive"] = best[2] / best[3];
  state.counters["f32_pct_bound"] = 100 * bound / best[3];
  state.counters["bf16_x_f32"] = best[3] / best[4];
  state.counters["8bit_x_f32"] = best[3] / best[5];
  // The compressed steps' own bytes per second against the bound's.
  state.counters["bf16_pct_bound"] = 100 * 20.0 / 28.0 * bound / best[4];
  state.counters["8bit_pct_bound"] = 100 * (16.0 + 16.0 / 2048.0) / 28.0 * bound / best[5];
  state.SetItemsProcessed(static_cast<int64_t>(params) * rounds);
}

void AllSizes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"params", "threads"});
  for (const int64_t n : {kSmall, kLarge, kHuge}) {
    for (const int64_t threads : {1, 2}) b->Args({n, threads});
  }
  b->UseRealTime();
}

// The slower or secondary variants skip the 1 GiB size.
void CommonSizes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"params", "threads"});
  for (const int64_t n : {kSmall, kLarge}) {
    for (const int64_t threads : {1, 2}) b->Args({n, threads});
  }
  b->UseRealTime();
}

void DramSizes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"params", "threads"});
  for (const int64_t n : {kLarge, kHuge}) {
    for (const int64_t threads : {1, 2}) b->Args({n, threads});
  }
  b->UseRealTime()->MinTime(5.0);
}

BENCHMARK(BM_Paired)->Apply(DramSizes);
BENCHMARK_CAPTURE(BM_Bound, plain, false)->Apply(AllSizes);
BENCHMARK_CAPTURE(BM_Bound, prefetch, true)->Apply(AllSizes);
BENCHMARK(BM_Triad)->Apply(AllSizes);
BENCHMARK(BM_Naive)->Apply(AllSizes);
BENCHMARK_CAPTURE(BM_Fused, scalar_f32, CpuIsa::kScalar, StateFormat::kF32, Copy::kNone)
    ->Apply(CommonSizes);
BENCHMARK_CAPTURE(BM_Fused, avx2_f32, CpuIsa::kAvx2, StateFormat::kF32, Copy::kNone)
    ->Apply(CommonSizes);
BENCHMARK_CAPTURE(BM_Fused, avx512_f32, CpuIsa::kAvx512, StateFormat::kF32, Copy::kNone)
    ->Apply(AllSizes);
BENCHMARK_CAPTURE(BM_Fused, avx512_f32_bf16copy, CpuIsa::kAvx512, StateFormat::kF32, Copy::kBF16)
    ->Apply(CommonSizes);
BENCHMARK_CAPTURE(BM_Fused, avx2_bf16state, CpuIsa::kAvx2, StateFormat::kBF16, Copy::kNone)
    ->Apply(CommonSizes);
BENCHMARK_CAPTURE(BM_Fused, avx512_bf16state, CpuIsa::kAvx512, StateFormat::kBF16, Copy::kNone)
    ->Apply(CommonSizes);
BENCHMARK_CAPTURE(BM_Fused, avx2_8bitstate, CpuIsa::kAvx2, StateFormat::kBlockwise8, Copy::kNone)
    ->Apply(CommonSizes);
BENCHMARK_CAPTURE(BM_Fused, avx512_8bitstate, CpuIsa::kAvx512, StateFormat::kBlockwise8, Copy::kNone)
    ->Apply(CommonSizes);
BENCHMARK_CAPTURE(BM_Fused, scalar_8bitstate, CpuIsa::kScalar, StateFormat::kBlockwise8, Copy::kNone)
    ->Apply(CommonSizes);

}  // namespace
}  // namespace loom
