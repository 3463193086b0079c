#include "tensor_parallel/layers/internal/onednn_gemm.h"

#include <omp.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
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

// What a primitive is created for. alpha and beta by their bits (a NaN is a value).
struct Key {
  int64_t m = 0, n = 0, k = 0, ldc = 0;
  bool ta = false, tb = false;
  uint32_t alpha_bits = 0, beta_bits = 0;
  int threads = 1;

  bool operator<(const Key& o) const {
    return std::tie(m, n, k, ldc, ta, tb, alpha_bits, beta_bits, threads) <
           std::tie(o.m, o.n, o.k, o.ldc, o.ta, o.tb, o.alpha_bits, o.beta_bits, o.threads);
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
  dnnl_memory_desc_t src{}, weights{}, dst{}, scratchpad{};
  size_t scratchpad_bytes = 0;
  std::string implementation;
  absl::Status status;
};

std::string Describe(const Key& key) {
  return absl::StrCat(key.ta ? "T" : "N", key.tb ? "T" : "N", " ", key.m, "x", key.n, "x", key.k,
                      " ldc ", key.ldc, " threads ", key.threads);
}

template <typename T, dnnl_status_t (*Destroy)(T)>
struct DnnlDeleter {
  void operator()(T handle) const { Destroy(handle); }
};
template <typename T, dnnl_status_t (*Destroy)(T)>
using DnnlPtr = std::unique_ptr<std::remove_pointer_t<T>, DnnlDeleter<T, Destroy>>;

// CreatePrimitive makes the matmul for `key` on the calling thread, whose OpenMP thread count is
// key.threads: src [m,k], weights [k,n] (dense as stored, transposes as strides), dst [m,n] with
// C's ld, alpha as output scale, beta as a sum post-op (dst = alpha * src * weights + beta * dst),
// user scratchpad. Any failure is Unavailable: the product then runs elsewhere.
absl::StatusOr<Primitive> CreatePrimitive(dnnl_engine_t engine, const Key& key) {
  Primitive p;
  const int64_t src_dims[2] = {key.m, key.k};
  const int64_t src_strides[2] = {key.ta ? 1 : key.k, key.ta ? key.m : 1};
  const int64_t wei_dims[2] = {key.k, key.n};
  const int64_t wei_strides[2] = {key.tb ? 1 : key.n, key.tb ? key.k : 1};
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
  dnnl_matmul_desc_t desc;
  LOOM_RETURN_IF_ERROR(check(dnnl_matmul_desc_init(&desc, &p.src, &p.weights, nullptr, &p.dst),
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
  // OpenMP thread count is key.threads), or nullptr when the cache is full.
  const Primitive* Get(dnnl_engine_t engine, const Key& key) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::ReaderMutexLock lock(&mu_);
      if (auto it = map_.find(key); it != map_.end()) return &it->second;
    }
    absl::MutexLock lock(&mu_);
    if (auto it = map_.find(key); it != map_.end()) return &it->second;
    if (map_.size() >= static_cast<size_t>(kMaxCachedPrimitives)) return nullptr;
    absl::StatusOr<Primitive> created = CreatePrimitive(engine, key);
    Primitive p = created.ok() ? *std::move(created) : Primitive{};
    p.status = created.status();
    return &map_.emplace(key, std::move(p)).first->second;
  }

 private:
  absl::Mutex mu_;
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
                   float* c) {
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
      const dnnl_memory_desc_t* mds[4] = {&p.src, &p.weights, &p.dst, &p.scratchpad};
      for (int i = 0; i < 4; ++i) {
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
    void* handles[4] = {const_cast<void*>(a), const_cast<void*>(b), c, scratchpad_.data()};
    for (int i = 0; i < 4; ++i) {
      LOOM_RETURN_IF_ERROR(LOOM_DNNL(dnnl_memory_set_data_handle(m.all[i], handles[i])));
    }
    const dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, m.all[0]},
                                     {DNNL_ARG_WEIGHTS, m.all[1]},
                                     {DNNL_ARG_DST, m.all[2]},
                                     {DNNL_ARG_SCRATCHPAD, m.all[3]}};
    LOOM_RETURN_IF_ERROR(LOOM_DNNL(dnnl_primitive_execute(p.primitive, stream_, 4, args)));
    LOOM_RETURN_IF_ERROR(LOOM_DNNL(dnnl_stream_wait(stream_)));
    return absl::OkStatus();
  }

 private:
  struct Memories {
    dnnl_memory_t all[4] = {nullptr, nullptr, nullptr, nullptr};  // src, weights, dst, scratchpad
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
  const Runtime& runtime = GetRuntime();
  if (!runtime.status.ok()) return runtime.status;
  const Primitive* p = Cache().Get(runtime.engine, key);
  if (p == nullptr) {
    return absl::UnavailableError(absl::StrCat("the oneDNN primitive cache is full (",
                                               kMaxCachedPrimitives, " shapes); ", Describe(key),
                                               " is not cached"));
  }
  if (!p->status.ok()) return p->status;
  return p;
}

}  // namespace

absl::Status OneDnnBf16Usable() { return GetRuntime().status; }

absl::Status OneDnnBf16Gemm(PackedBf16 a, Transpose trans_a, PackedBf16 b, Transpose trans_b,
                            MatrixView c, float alpha, float beta, int threads) {
  // Before anything touches OpenMP (ThreadSanitizer builds stop here).
  LOOM_RETURN_IF_ERROR(OneDnnBf16Usable());
  Key key;
  key.ta = trans_a == Transpose::kYes;
  key.tb = trans_b == Transpose::kYes;
  key.m = key.ta ? a.cols : a.rows;
  key.k = key.ta ? a.rows : a.cols;
  key.n = key.tb ? b.rows : b.cols;
  key.ldc = c.ld;
  key.alpha_bits = Bits(alpha);
  key.beta_bits = Bits(beta);
  key.threads = threads;
  const ScopedOmpThreads omp_threads(threads);
  LOOM_ASSIGN_OR_RETURN(const Primitive* p, Find(key));
  thread_local ThreadState state;
  return state.Run(GetRuntime().engine, *p, a.data.data(), b.data.data(), c.data.data());
}

absl::StatusOr<std::string> OneDnnBf16Implementation(int64_t m, int64_t n, int64_t k,
                                                     Transpose trans_a, Transpose trans_b,
                                                     int threads) {
  LOOM_RETURN_IF_ERROR(OneDnnBf16Usable());
  Key key;
  key.ta = trans_a == Transpose::kYes;
  key.tb = trans_b == Transpose::kYes;
  key.m = m;
  key.n = n;
  key.k = k;
  key.ldc = n;
  key.alpha_bits = Bits(1.0f);
  key.beta_bits = Bits(0.0f);
  key.threads = threads;
  const ScopedOmpThreads omp_threads(threads);
  LOOM_ASSIGN_OR_RETURN(const Primitive* p, Find(key));
  return p->implementation;
}

}  // namespace gemm_internal
}  // namespace loom
