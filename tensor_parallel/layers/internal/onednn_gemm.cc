#include "tensor_parallel/layers/internal/onednn_gemm.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/half.h"
#include "core/half_convert.h"
#include "core/internal/helper_team.h"
#include "core/mutex.h"
#include "core/status_macros.h"
#include "oneapi/dnnl/dnnl.h"
#include "oneapi/dnnl/dnnl_debug.h"

namespace loom {
namespace gemm_internal {
namespace {

absl::Status DnnlCheck(dnnl_status_t status, const char* call) {
  if (status == dnnl_success) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("oneDNN ", call, " returned ", dnnl_status2str(status)));
}

// LOOM_DNNL(call): the oneDNN call's status as an absl::Status that names the call.
#define LOOM_DNNL(call) DnnlCheck((call), #call)

// The process's CPU engine (engines are thread-safe), or why there is none.
struct Runtime {
  dnnl_engine_t engine = nullptr;
  absl::Status status;
};

Runtime MakeRuntime() {
  Runtime r;
#if defined(__SANITIZE_THREAD__)
  r.status = absl::UnavailableError(
      "oneDNN is off under ThreadSanitizer (libgomp's "
      "synchronization is invisible to it)");
  return r;
#endif
  if (!CpuSupportsAvx512Bf16()) {
    r.status = absl::UnavailableError("this CPU (or OS) has no AVX512_BF16");
    return r;
  }
  const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  if ((isa & dnnl_cpu_isa_avx512_core_bf16) != dnnl_cpu_isa_avx512_core_bf16) {
    r.status = absl::UnavailableError(
        absl::StrCat("oneDNN's effective ISA ", dnnl_cpu_isa2str(isa),
                     " lacks avx512_core_bf16 (ONEDNN_MAX_CPU_ISA set lower?)"));
    return r;
  }
  if (absl::Status s = LOOM_DNNL(dnnl_engine_create(&r.engine, dnnl_cpu, 0)); !s.ok()) {
    r.status = absl::UnavailableError(s.message());
  }
  return r;
}

// Created on first use, never destroyed: primitives and streams refer to it until the process ends.
const Runtime& GetRuntime() {
  static const Runtime* const runtime = new Runtime(MakeRuntime());
  return *runtime;
}

// What a primitive is created for: one part of a product, run on one thread. alpha
// and beta by their bits (a NaN is a value).
struct Key {
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;  // as stored: A [m,k] or [k,m], B [k,n] or [n,k]
  bool ta = false, tb = false;
  uint32_t alpha_bits = 0, beta_bits = 0;
  bool bias = false;  // an f32 row of n values added to every row of C

  bool operator<(const Key& o) const {
    return std::tie(m, n, k, lda, ldb, ldc, ta, tb, alpha_bits, beta_bits, bias) <
           std::tie(o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.ta, o.tb, o.alpha_bits, o.beta_bits,
                    o.bias);
  }
};

uint32_t Bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

float FromBits(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

// One created primitive and its memory descriptors, immutable once in the cache; `status` is
// Unavailable when oneDNN offers no hardware kernel for the key.
struct Primitive {
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_desc_t src{}, weights{}, bias{}, dst{}, scratchpad{};
  size_t scratchpad_bytes = 0;
  std::string implementation;
  absl::Status status;
};

std::string Describe(const Key& key) {
  return absl::StrCat(key.ta ? "T" : "N", key.tb ? "T" : "N", " ", key.m, "x", key.n, "x", key.k,
                      " ld ", key.lda, ",", key.ldb, ",", key.ldc, key.bias ? " bias" : "");
}

template <typename T, dnnl_status_t (*Destroy)(T)>
struct DnnlDeleter {
  void operator()(T handle) const { Destroy(handle); }
};
template <typename T, dnnl_status_t (*Destroy)(T)>
using DnnlPtr = std::unique_ptr<std::remove_pointer_t<T>, DnnlDeleter<T, Destroy>>;

// CreatePrimitive makes the matmul for `key` on the calling thread, whose OpenMP thread count is
// 1: src [m,k], weights [k,n] (transposes as strides), dst [m,n] with C's ld, alpha as output
// scale, beta as a sum post-op (dst = alpha * src * weights + beta * dst), the bias (when the key
// has one) as the matmul's own [1,n] f32 bias, user scratchpad. Any failure is Unavailable: the
// product then runs elsewhere.
absl::StatusOr<Primitive> CreatePrimitive(dnnl_engine_t engine, const Key& key) {
  Primitive p;
  const int64_t src_dims[2] = {key.m, key.k};
  const int64_t src_strides[2] = {key.ta ? 1 : key.lda, key.ta ? key.lda : 1};
  const int64_t wei_dims[2] = {key.k, key.n};
  const int64_t wei_strides[2] = {key.tb ? 1 : key.ldb, key.tb ? key.ldb : 1};
  const int64_t dst_dims[2] = {key.m, key.n};
  const int64_t dst_strides[2] = {key.ldc, 1};
  const std::string what = absl::StrCat("bf16 matmul ", Describe(key), ": ");
  auto check = [&what](dnnl_status_t status, const char* call) {
    if (status == dnnl_success) return absl::OkStatus();
    return absl::UnavailableError(
        absl::StrCat("oneDNN ", what, call, " returned ", dnnl_status2str(status)));
  };
  LOOM_RETURN_IF_ERROR(
      check(dnnl_memory_desc_init_by_strides(&p.src, 2, src_dims, dnnl_bf16, src_strides),
            "dnnl_memory_desc_init_by_strides(src)"));
  LOOM_RETURN_IF_ERROR(
      check(dnnl_memory_desc_init_by_strides(&p.weights, 2, wei_dims, dnnl_bf16, wei_strides),
            "dnnl_memory_desc_init_by_strides(weights)"));
  LOOM_RETURN_IF_ERROR(
      check(dnnl_memory_desc_init_by_strides(&p.dst, 2, dst_dims, dnnl_f32, dst_strides),
            "dnnl_memory_desc_init_by_strides(dst)"));
  if (key.bias) {
    const int64_t bias_dims[2] = {1, key.n};
    const int64_t bias_strides[2] = {key.n, 1};
    LOOM_RETURN_IF_ERROR(
        check(dnnl_memory_desc_init_by_strides(&p.bias, 2, bias_dims, dnnl_f32, bias_strides),
              "dnnl_memory_desc_init_by_strides(bias)"));
  }
  dnnl_matmul_desc_t desc;
  LOOM_RETURN_IF_ERROR(check(dnnl_matmul_desc_init(&desc, &p.src, &p.weights,
                                                   key.bias ? &p.bias : nullptr, &p.dst),
                             "dnnl_matmul_desc_init"));
  dnnl_primitive_attr_t raw_attr = nullptr;
  LOOM_RETURN_IF_ERROR(check(dnnl_primitive_attr_create(&raw_attr), "dnnl_primitive_attr_create"));
  const DnnlPtr<dnnl_primitive_attr_t, dnnl_primitive_attr_destroy> attr(raw_attr);
  LOOM_RETURN_IF_ERROR(
      check(dnnl_primitive_attr_set_scratchpad_mode(attr.get(), dnnl_scratchpad_mode_user),
            "dnnl_primitive_attr_set_scratchpad_mode"));
  if (key.alpha_bits != Bits(1.0f)) {
    const float alpha = FromBits(key.alpha_bits);
    LOOM_RETURN_IF_ERROR(check(dnnl_primitive_attr_set_output_scales(attr.get(), 1, 0, &alpha),
                               "dnnl_primitive_attr_set_output_scales"));
  }
  if (key.beta_bits != Bits(0.0f)) {
    dnnl_post_ops_t raw_post_ops = nullptr;
    LOOM_RETURN_IF_ERROR(check(dnnl_post_ops_create(&raw_post_ops), "dnnl_post_ops_create"));
    const DnnlPtr<dnnl_post_ops_t, dnnl_post_ops_destroy> post_ops(raw_post_ops);
    LOOM_RETURN_IF_ERROR(check(dnnl_post_ops_append_sum(post_ops.get(), FromBits(key.beta_bits)),
                               "dnnl_post_ops_append_sum"));
    LOOM_RETURN_IF_ERROR(check(dnnl_primitive_attr_set_post_ops(attr.get(), post_ops.get()),
                               "dnnl_primitive_attr_set_post_ops"));
  }
  dnnl_primitive_desc_t raw_pd = nullptr;
  LOOM_RETURN_IF_ERROR(
      check(dnnl_primitive_desc_create(&raw_pd, &desc, attr.get(), engine, nullptr),
            "dnnl_primitive_desc_create"));
  const DnnlPtr<dnnl_primitive_desc_t, dnnl_primitive_desc_destroy> pd(raw_pd);
  const char* impl = nullptr;
  LOOM_RETURN_IF_ERROR(
      check(dnnl_primitive_desc_query(pd.get(), dnnl_query_impl_info_str, 0, &impl),
            "dnnl_primitive_desc_query(impl_info_str)"));
  p.implementation = impl != nullptr ? impl : "";
  if (absl::StartsWith(p.implementation, "ref")) {
    // oneDNN's reference loops run far below OpenBLAS.
    return absl::UnavailableError(
        absl::StrCat("oneDNN ", what, "only its ", p.implementation, " implementation"));
  }
  if (const dnnl_memory_desc_t* scratchpad =
          dnnl_primitive_desc_query_md(pd.get(), dnnl_query_scratchpad_md, 0);
      scratchpad != nullptr) {
    p.scratchpad = *scratchpad;
    p.scratchpad_bytes = dnnl_memory_desc_get_size(scratchpad);
  }
  LOOM_RETURN_IF_ERROR(
      check(dnnl_primitive_create(&p.primitive, pd.get()), "dnnl_primitive_create"));
  return p;
}

// The process's primitives, shared by every thread; entries are never removed, so a pointer to one
// stays valid.
class PrimitiveCache {
 public:
  // Get returns the primitive for `key`, creating it on first use (on the calling thread, whose
  // OpenMP thread count is 1), or nullptr when the cache is full.
  const Primitive* Get(dnnl_engine_t engine, const Key& key) ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    if (auto it = map_.find(key); it != map_.end()) return &it->second;
    if (map_.size() >= static_cast<size_t>(kMaxCachedPrimitives)) return nullptr;
    absl::StatusOr<Primitive> created = CreatePrimitive(engine, key);
    Primitive p = created.ok() ? *std::move(created) : Primitive{};
    p.status = created.status();
    return &map_.emplace(key, std::move(p)).first->second;
  }

 private:
  Mutex mu_;
  std::map<Key, Primitive> map_ ABSL_GUARDED_BY(mu_);
};

PrimitiveCache& Cache() {
  static PrimitiveCache* const cache = new PrimitiveCache();
  return *cache;
}

// A calling thread's own execution state: its stream, its scratchpad (grown to the largest any
// primitive asked for) and, per primitive it ran, memory objects whose data handles are set for
// each product. Destroyed when the thread exits.
class ThreadState {
 public:
  ThreadState() = default;
  ThreadState(const ThreadState&) = delete;
  ThreadState& operator=(const ThreadState&) = delete;
  ~ThreadState() {
    for (auto& [primitive, memories] : bound_) Destroy(memories);
    if (stream_ != nullptr) dnnl_stream_destroy(stream_);
  }

  absl::Status Run(dnnl_engine_t engine, const Primitive& p, const void* a, const void* b,
                   const float* bias, float* c) {
    if (stream_ == nullptr) {
      LOOM_RETURN_IF_ERROR(
          LOOM_DNNL(dnnl_stream_create(&stream_, engine, dnnl_stream_default_flags)));
    }
    if (scratchpad_.size() < p.scratchpad_bytes) {
      absl::StatusOr<AlignedBuffer<uint8_t>> grown =
          AlignedBuffer<uint8_t>::CreateUninitialized(p.scratchpad_bytes);
      if (!grown.ok()) return grown.status();
      scratchpad_ = *std::move(grown);
    }
    auto bound = bound_.find(&p);
    if (bound == bound_.end()) {
      Memories created;
      const dnnl_memory_desc_t* mds[kMemories] = {&p.src, &p.weights, &p.dst, &p.scratchpad,
                                                  &p.bias};
      for (int i = 0; i < Used(p); ++i) {
        if (absl::Status s =
                LOOM_DNNL(dnnl_memory_create(&created.all[i], mds[i], engine, DNNL_MEMORY_NONE));
            !s.ok()) {
          Destroy(created);
          return s;
        }
      }
      bound = bound_.emplace(&p, created).first;
    }
    const Memories& m = bound->second;
    void* handles[kMemories] = {const_cast<void*>(a), const_cast<void*>(b), c,
                                scratchpad_.data(), const_cast<float*>(bias)};
    const int used = Used(p);
    for (int i = 0; i < used; ++i) {
      LOOM_RETURN_IF_ERROR(LOOM_DNNL(dnnl_memory_set_data_handle(m.all[i], handles[i])));
    }
    const dnnl_exec_arg_t args[kMemories] = {{DNNL_ARG_SRC, m.all[0]},
                                             {DNNL_ARG_WEIGHTS, m.all[1]},
                                             {DNNL_ARG_DST, m.all[2]},
                                             {DNNL_ARG_SCRATCHPAD, m.all[3]},
                                             {DNNL_ARG_BIAS, m.all[4]}};
    LOOM_RETURN_IF_ERROR(LOOM_DNNL(dnnl_primitive_execute(p.primitive, stream_, used, args)));
    LOOM_RETURN_IF_ERROR(LOOM_DNNL(dnnl_stream_wait(stream_)));
    return absl::OkStatus();
  }

 private:
  // src, weights, dst, scratchpad and the bias (its descriptor empty without one).
  static constexpr int kMemories = 5;
  static int Used(const Primitive& p) { return p.bias.ndims > 0 ? kMemories : kMemories - 1; }
  struct Memories {
    dnnl_memory_t all[kMemories] = {nullptr, nullptr, nullptr, nullptr, nullptr};
  };
  static void Destroy(const Memories& memories) {
    for (dnnl_memory_t m : memories.all) {
      if (m != nullptr) dnnl_memory_destroy(m);
    }
  }

  dnnl_stream_t stream_ = nullptr;
  AlignedBuffer<uint8_t> scratchpad_;
  std::map<const Primitive*, Memories> bound_;
};

// Sets the calling thread's OpenMP thread count (oneDNN's, for the primitives it creates and runs)
// for its lifetime, then restores it.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int threads) : threads_(threads), before_(omp_get_max_threads()) {
    if (before_ != threads_) omp_set_num_threads(threads_);
  }
  ~ScopedOmpThreads() {
    if (before_ != threads_) omp_set_num_threads(before_);
  }
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  const int threads_;
  const int before_;
};

absl::StatusOr<const Primitive*> Find(const Key& key) {
  const Primitive* p = Cache().Get(GetRuntime().engine, key);
  if (p == nullptr) {
    return absl::UnavailableError(absl::StrCat("the oneDNN primitive cache is full (",
                                               kMaxCachedPrimitives, " shapes); ", Describe(key),
                                               " is not cached"));
  }
  if (!p->status.ok()) return p->status;
  return p;
}

ThreadState& StateOfThisThread() {
  thread_local ThreadState state;
  return state;
}

// A part of a product: rows [m0, m0 + m) of C (and of op(A)), all of C's columns, and
// where its packed op(A) rows start in the part-major A buffer.
struct Part {
  int64_t m0 = 0, m = 0;
  size_t a_offset = 0;
};

// SplitRows cuts C's m rows into at most `threads` parts of multiples of 16 rows,
// none below kMinMacsPerPart multiply-adds unless the product is. Rows, not columns:
// a part of C's rows is dense when C is, which oneDNN's brgemm kernels need (a
// column block of C, with ld > n, gets its slower gemm:jit path).
const std::vector<Part>& SplitRows(int64_t m, int64_t n, int64_t k, int threads) {
  thread_local std::vector<Part> parts;  // reused: no allocation in the steady state
  parts.clear();
  const double macs = static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const double by_size = std::max(1.0, macs / static_cast<double>(kMinMacsPerPart));
  const int64_t wanted =
      std::max<int64_t>(1, std::min<int64_t>({threads, static_cast<int64_t>(by_size), m / 16}));
  const int64_t per_part = (m + wanted - 1) / wanted;
  const int64_t step = (per_part + 15) / 16 * 16;
  for (int64_t m0 = 0; m0 < m; m0 += step) {
    parts.push_back(Part{m0, std::min(step, m - m0), static_cast<size_t>(m0 * k)});
  }
  return parts;
}

// RoundRows rounds rows [r0, r1) of the stored f32 matrix `v` to bf16, columns [c0, c1)
// of each, into `out` densely (row r at (r - r0) * (c1 - c0)).
absl::Status RoundRows(const ConstMatrixView& v, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                       absl::Span<BFloat16> out) {
  const size_t width = static_cast<size_t>(c1 - c0);
  if (v.ld == v.cols && c0 == 0 && c1 == v.cols) {  // one contiguous run
    const size_t n = static_cast<size_t>(r1 - r0) * width;
    return ConvertF32ToBF16(v.data.subspan(static_cast<size_t>(r0 * v.ld), n), out.first(n));
  }
  for (int64_t r = r0; r < r1; ++r) {
    LOOM_RETURN_IF_ERROR(ConvertF32ToBF16(v.data.subspan(static_cast<size_t>(r * v.ld + c0), width),
                                          out.subspan(static_cast<size_t>(r - r0) * width, width)));
  }
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<absl::Span<T>> Reserve(AlignedBuffer<T>& buffer, size_t size) {
  if (buffer.size() < size) {
    LOOM_ASSIGN_OR_RETURN(buffer, AlignedBuffer<T>::CreateUninitialized(size));
  }
  return buffer.span().first(size);
}

}  // namespace

absl::Status OneDnnBf16Usable() { return GetRuntime().status; }

absl::Status OneDnnBf16Gemm(const GemmBf16Input& a, Transpose trans_a, const GemmBf16Input& b,
                            Transpose trans_b, MatrixView c, float alpha, float beta, int threads,
                            const float* bias) {
  // Before anything touches OpenMP (ThreadSanitizer builds stop here).
  LOOM_RETURN_IF_ERROR(OneDnnBf16Usable());
  const bool ta = trans_a == Transpose::kYes, tb = trans_b == Transpose::kYes;
  const int64_t m = ta ? a.cols() : a.rows(), k = ta ? a.rows() : a.cols();
  const int64_t n = tb ? b.rows() : b.cols();
  // Local references to this thread's scratch: the lambdas below run on helper threads
  // too, where the name of a thread_local would mean their own.
  const std::vector<Part>& parts = SplitRows(m, n, k, threads);
  thread_local std::vector<const Primitive*> primitive_scratch;
  std::vector<const Primitive*>& primitives = primitive_scratch;
  primitives.clear();
  {
    // Every part's primitive first, on this thread: an Unavailable leaves C untouched.
    const ScopedOmpThreads one(1);
    for (const Part& part : parts) {
      Key key;
      key.m = part.m;
      key.n = n;
      key.k = k;
      // A bf16 input is read where it lies; a rounded f32 one as packed below: each
      // part's op(A) rows densely on their own, B dense as stored.
      key.lda = a.is_bf16() ? a.ld() : (ta ? part.m : k);
      key.ldb = b.is_bf16() ? b.ld() : b.cols();
      key.ldc = c.ld;
      key.ta = ta;
      key.tb = tb;
      key.alpha_bits = Bits(alpha);
      key.beta_bits = Bits(beta);
      key.bias = bias != nullptr;
      LOOM_ASSIGN_OR_RETURN(const Primitive* p, Find(key));
      primitives.push_back(p);
    }
  }
  // The rounded f32 inputs: A part-major (part i's op(A) rows as a dense [m_i,k] or
  // [k,m_i]), B dense as stored. Sizes fit: the views hold at least rows x cols elements.
  thread_local AlignedBuffer<BFloat16> a_scratch, b_scratch;
  absl::Span<BFloat16> a16, b16;
  if (!a.is_bf16()) {
    LOOM_ASSIGN_OR_RETURN(a16, Reserve(a_scratch, static_cast<size_t>(m * k)));
  }
  if (!b.is_bf16()) {
    LOOM_ASSIGN_OR_RETURN(b16, Reserve(b_scratch, static_cast<size_t>(k * n)));
  }
  core_internal::HelperTeam& team = core_internal::HelperTeam::ForThisThread();
  const int count = static_cast<int>(parts.size());
  // Phase 1: each part rounds its own rows of A and a share of B's stored rows (all of B
  // must be ready before any part multiplies).
  if (!a.is_bf16() || !b.is_bf16()) {
    const int64_t b_rows_per_part = (b.rows() + count - 1) / count;
    const absl::Status rounded = team.Run(threads, count, [&](int i) -> absl::Status {
      const Part& part = parts[static_cast<size_t>(i)];
      if (!a.is_bf16()) {
        const absl::Span<BFloat16> a_part =
            a16.subspan(part.a_offset, static_cast<size_t>(part.m * k));
        const absl::Status a_rounded =
            ta ? RoundRows(a.f32(), 0, k, part.m0, part.m0 + part.m, a_part)
               : RoundRows(a.f32(), part.m0, part.m0 + part.m, 0, k, a_part);
        if (!a_rounded.ok()) return a_rounded;
      }
      if (b.is_bf16()) return absl::OkStatus();
      const int64_t r0 = std::min(b.rows(), i * b_rows_per_part);
      const int64_t r1 = std::min(b.rows(), r0 + b_rows_per_part);
      return RoundRows(b.f32(), r0, r1, 0, b.cols(),
                       b16.subspan(static_cast<size_t>(r0 * b.cols())));
    });
    if (!rounded.ok()) return rounded;
  }
  const auto a_of = [&](const Part& part) -> const BFloat16* {
    if (!a.is_bf16()) return a16.data() + part.a_offset;
    return a.bf16().data.data() + (ta ? part.m0 : part.m0 * a.ld());
  };
  const BFloat16* const b_data = b.is_bf16() ? b.bf16().data.data() : b16.data();
  // Phase 2: each part's product.
  const dnnl_engine_t engine = GetRuntime().engine;
  return team.Run(threads, count, [&](int i) -> absl::Status {
    const Part& part = parts[static_cast<size_t>(i)];
    const ScopedOmpThreads one(1);
    return StateOfThisThread().Run(engine, *primitives[static_cast<size_t>(i)], a_of(part),
                                   b_data, bias, c.data.data() + part.m0 * c.ld);
  });
}

absl::StatusOr<std::string> OneDnnBf16Implementation(int64_t m, int64_t n, int64_t k,
                                                     Transpose trans_a, Transpose trans_b,
                                                     int threads) {
  LOOM_RETURN_IF_ERROR(OneDnnBf16Usable());
  const Part part = SplitRows(m, n, k, threads).front();
  Key key;
  key.ta = trans_a == Transpose::kYes;
  key.tb = trans_b == Transpose::kYes;
  key.m = part.m;
  key.n = n;
  key.k = k;
  key.lda = key.ta ? part.m : k;
  key.ldb = key.tb ? k : n;
  key.ldc = n;
  key.alpha_bits = Bits(1.0f);
  key.beta_bits = Bits(0.0f);
  const ScopedOmpThreads one(1);
  LOOM_ASSIGN_OR_RETURN(const Primitive* p, Find(key));
  return p->implementation;
}

}  // namespace gemm_internal
}  // namespace loom
