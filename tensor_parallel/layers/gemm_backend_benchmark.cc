// Single-precision GEMM throughput of three BLAS libraries side by side, at the GPT
// model's shapes and at 2048^3, on 1 and 2 threads, to choose Loom's GEMM backend by
// measurement:
//   openblas/f32  Loom's own Gemm (OpenBLAS cblas_sgemm): the baseline;
//   dnnl/f32      oneDNN 2.x dnnl_sgemm;
//   blis/f32      BLIS cblas_sgemm;
//   dnnl/bf16     oneDNN's matmul primitive, bf16 x bf16 -> f32 (Debian's OpenBLAS
//                 0.3.21 has no cblas_sbgemm);
//   loom/bf16     Loom's Gemm(..., GemmPrecision::kBf16) on f32 inputs: their rounding
//                 to bf16 on every call, then oneDNN's matmul (what the bf16 layers run).
// oneDNN and BLIS are loaded at run time (dlopen, RTLD_DEEPBIND: BLIS's cblas_sgemm
// must not meet OpenBLAS's at link time, and Loom's CI installs neither); a missing
// library skips its rows with the apt-get line that installs it.
//
// Shapes, row-major C[m,n] = op(A) op(B), rows = micro-batch x sequence: 256 for the
// base model (hidden 256, MLP 1024), 512 for the larger one (hidden 512, MLP 2048):
//   forward NT (x[rows,k] W[n,k]^T): qkv, fc1, fc2;
//   input gradient NN: fc1's dx = dh[rows,4h] W1[4h,h];
//   weight gradient TN (A stored [k,m]): fc1's dW1 = dh^T x;
//   square NN 2048^3.
// Before timing, each product is checked against OpenBLAS on the same seeded inputs
// (f32: max |diff| <= 1e-4 of max |C|; bf16: against OpenBLAS on the bf16-rounded
// inputs, 1e-3), and a mismatch skips the row, so a wrong call never yields a number.
//
// Counters: GFLOP/s (2mnk per product over wall time); x_openblas (over the
// openblas/f32 row of the same shape and threads, when it ran earlier in this run);
// of_peak (over threads x BM_FmaPeakPerCore); cpus (process CPU time over wall time:
// shows the library really ran on `threads` threads); bitwise_vs_1t (threads:2 only:
// 1 if C is bitwise the same as the library's own 1-thread result).
//
//   ./bazelw run -c opt //tensor_parallel/layers:gemm_backend_benchmark
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "benchmark/benchmark.h"
#include "core/aligned_buffer.h"
#include "core/fma_peak.h"
#include "core/half.h"
#include "core/status_macros.h"
#include "tensor_parallel/layers/gemm.h"

namespace loom {
namespace {

// ---------------------------------------------------------------------------------
// The few oneDNN 2.x and BLIS declarations used, mirrored from their headers
// (oneapi/dnnl/dnnl.h, dnnl_types.h of 2.6; blis.h of 0.9) so that neither is a
// build dependency.

using DnnlStatus = int;       // dnnl_status_t; dnnl_success == 0
using DnnlHandle = void*;     // dnnl_engine_t, dnnl_stream_t, dnnl_memory_t, ...
constexpr int kDnnlCpu = 1;   // dnnl_cpu
constexpr int kDnnlBf16 = 2;  // dnnl_bf16
constexpr int kDnnlF32 = 3;   // dnnl_f32
constexpr unsigned kDnnlStreamDefaultFlags = 1;
constexpr int kDnnlArgSrc = 1, kDnnlArgDst = 17, kDnnlArgWeights = 33;
constexpr int kDnnlQueryImplInfoStr = 8;  // dnnl_query_impl_info_str
constexpr int kDnnlMaxNdims = 12;         // DNNL_MAX_NDIMS

// dnnl_memory_desc_t and dnnl_matmul_desc_t are plain structs that only the library
// fills: 696 and 2800 bytes, 8-byte aligned, in oneDNN 2.6 (sizeof/alignof with
// <dnnl.h>). Opaque, larger buffers stand in for them.
struct alignas(64) DnnlMemoryDesc {
  unsigned char bytes[1024];
};
struct alignas(64) DnnlMatmulDesc {
  unsigned char bytes[4096];
};
struct DnnlExecArg {  // dnnl_exec_arg_t
  int arg;
  DnnlHandle memory;
};
struct DnnlVersion {  // dnnl_version_t (leading fields)
  int major, minor, patch;
};

constexpr int kCblasRowMajor = 101, kCblasNoTrans = 111, kCblasTrans = 112;

std::string DnnlStatusName(DnnlStatus s) {
  static constexpr const char* kNames[] = {"success",       "out_of_memory", "invalid_arguments",
                                           "unimplemented", "iterator_ends", "runtime_error",
                                           "not_required"};
  return s >= 0 && s < 7 ? kNames[s] : absl::StrCat("status ", s);
}

absl::Status DnnlCheck(DnnlStatus s, const char* call) {
  if (s == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(call, " returned ", s, " (", DnnlStatusName(s), ")"));
}

template <typename Fn>
absl::Status Symbol(void* handle, const char* lib, const char* name, Fn* fn) {
  dlerror();
  void* p = dlsym(handle, name);
  if (p == nullptr) {
    const char* err = dlerror();
    return absl::NotFoundError(
        absl::StrCat("dlsym(", lib, ", ", name, "): ", err != nullptr ? err : "null symbol"));
  }
  *fn = reinterpret_cast<Fn>(p);
  return absl::OkStatus();
}

absl::StatusOr<void*> Open(const char* lib, const char* install) {
  void* handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (handle == nullptr) {
    const char* err = dlerror();
    return absl::NotFoundError(
        absl::StrCat(lib, " not found (", err != nullptr ? err : "", "): ", install));
  }
  return handle;
}

struct Dnnl {
  const DnnlVersion* (*version)();
  DnnlStatus (*sgemm)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t,
                      const float*, int64_t, float, float*, int64_t);
  DnnlStatus (*engine_create)(DnnlHandle*, int, size_t);
  DnnlStatus (*stream_create)(DnnlHandle*, DnnlHandle, unsigned);
  DnnlStatus (*stream_wait)(DnnlHandle);
  DnnlStatus (*memory_desc_init_by_strides)(DnnlMemoryDesc*, int, const int64_t*, int,
                                            const int64_t*);
  DnnlStatus (*matmul_desc_init)(DnnlMatmulDesc*, const DnnlMemoryDesc*, const DnnlMemoryDesc*,
                                 const DnnlMemoryDesc*, const DnnlMemoryDesc*);
  DnnlStatus (*primitive_desc_create)(DnnlHandle*, const void*, const void*, DnnlHandle,
                                      const void*);
  DnnlStatus (*primitive_desc_query)(DnnlHandle, int, int, void*);
  DnnlStatus (*primitive_desc_destroy)(DnnlHandle);
  DnnlStatus (*primitive_create)(DnnlHandle*, DnnlHandle);
  DnnlStatus (*primitive_destroy)(DnnlHandle);
  DnnlStatus (*memory_create)(DnnlHandle*, const DnnlMemoryDesc*, DnnlHandle, void*);
  DnnlStatus (*memory_destroy)(DnnlHandle);
  DnnlStatus (*primitive_execute)(DnnlHandle, DnnlHandle, int, const DnnlExecArg*);
  // From libgomp, oneDNN's OpenMP runtime (found through the handle's dependencies).
  void (*omp_set_num_threads)(int);
  int (*omp_get_max_threads)();
  DnnlHandle engine = nullptr;
  DnnlHandle stream = nullptr;
};

absl::StatusOr<Dnnl> LoadDnnl() {
  constexpr const char* kLib = "libdnnl.so.2";
  LOOM_ASSIGN_OR_RETURN(void* h, Open(kLib, "apt-get install libdnnl-dev"));
  Dnnl d;
  LOOM_RETURN_IF_ERROR(Symbol(h, kLib, "dnnl_version", &d.version));
  const DnnlVersion* v = d.version();
  if (v->major != 2) {
    return absl::FailedPreconditionError(absl::StrCat(kLib, " is oneDNN ", v->major, ".", v->minor,
                                                      ".", v->patch, "; this benchmark needs 2.x"));
  }
  LOOM_RETURN_IF_ERROR(Symbol(h, kLib, "dnnl_sgemm", &d.sgemm));
  LOOM_RETURN_IF_ERROR(Symbol(h, kLib, "dnnl_engine_create", &d.engine_create));
  LOOM_RETURN_IF_ERROR(Symbol(h, kLib, "dnnl_stream_create", &d.stream_create));
  LOOM_RETURN_IF_ERROR(Symbol(h, kLib, "dnnl_stream_wait", &d.stream_wait));
  LOOM_RETURN_IF_ERROR(
      Symbol(h, kLib, "dnnl_memory_desc_init_by_strides", &d.memory_desc_init_by_strides));
  LOOM_RETURN_IF_ERROR(Symbol(h, kLib, "dnnl_matmul_desc_init", &d.matmul_desc_init));
  LOOM_RETURN_IF_ERROR(Symbol(h, kLib, "dnnl_primitive_desc_create", &d.primitive_desc_create));
  LOOM_RETURN_IF_ERROR(Symbol(h, kLib, "dnnl_primitive_desc_query", &d.primitive_desc_query));
  LOOM_RETURN_IF_ERROR(Symbol(h, kLib, "dnnl_primitive_desc_destroy", &d.primitive_desc_destroy));
  LOOM_RETURN_IF_ERROR(Symbol(h, kLib, "dnnl_primitive_create", &d.primitive_create));
  LOOM_RETURN_IF_ERROR(Symbol(h, kLib, "dnnl_primitive_destroy", &d.primitive_destroy));
  LOOM_RETURN_IF_ERROR(Symbol(h, kLib, "dnnl_memory_create", &d.memory_create));
  LOOM_RETURN_IF_ERROR(Symbol(h, kLib, "dnnl_memory_destroy", &d.memory_destroy));
  LOOM_RETURN_IF_ERROR(Symbol(h, kLib, "dnnl_primitive_execute", &d.primitive_execute));
  LOOM_RETURN_IF_ERROR(Symbol(h, kLib, "omp_set_num_threads", &d.omp_set_num_threads));
  LOOM_RETURN_IF_ERROR(Symbol(h, kLib, "omp_get_max_threads", &d.omp_get_max_threads));
  LOOM_RETURN_IF_ERROR(DnnlCheck(d.engine_create(&d.engine, kDnnlCpu, 0), "dnnl_engine_create"));
  LOOM_RETURN_IF_ERROR(DnnlCheck(d.stream_create(&d.stream, d.engine, kDnnlStreamDefaultFlags),
                                 "dnnl_stream_create"));
  return d;
}

struct Blis {
  // cblas_sgemm with BLIS's 32-bit BLAS integers (Debian's libblis4).
  void (*sgemm)(int, int, int, int32_t, int32_t, int32_t, float, const float*, int32_t,
                const float*, int32_t, float, float*, int32_t);
  void (*set_num_threads)(int64_t);  // bli_thread_set_num_threads(dim_t)
};

absl::StatusOr<Blis> LoadBlis() {
  constexpr const char* kLib = "libblis.so.4";
  LOOM_ASSIGN_OR_RETURN(void* h, Open(kLib, "apt-get install libblis-dev"));
  Blis b;
  LOOM_RETURN_IF_ERROR(Symbol(h, kLib, "cblas_sgemm", &b.sgemm));
  LOOM_RETURN_IF_ERROR(Symbol(h, kLib, "bli_thread_set_num_threads", &b.set_num_threads));
  return b;
}

// The libraries are loaded once, never unloaded (their thread pools outlive any one
// benchmark).
const absl::StatusOr<Dnnl>& DnnlLib() {
  static const auto* lib = new absl::StatusOr<Dnnl>(LoadDnnl());
  return *lib;
}
const absl::StatusOr<Blis>& BlisLib() {
  static const auto* lib = new absl::StatusOr<Blis>(LoadBlis());
  return *lib;
}

// ---------------------------------------------------------------------------------
// Shapes and inputs.

struct GemmShape {
  const char* role;
  int64_t m, n, k;
  Transpose ta, tb;

  std::string Name() const {
    return absl::StrCat(role, "_", ta == Transpose::kYes ? "T" : "N",
                        tb == Transpose::kYes ? "T" : "N", "_", m, "x", n, "x", k);
  }
  double Flops() const {
    return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  }
  // Row-major storage of A ([m,k], or [k,m] when transposed) and B ([k,n] or [n,k]).
  int64_t lda() const { return ta == Transpose::kYes ? m : k; }
  int64_t ldb() const { return tb == Transpose::kYes ? k : n; }
};

constexpr Transpose kN = Transpose::kNo, kT = Transpose::kYes;
constexpr GemmShape kShapes[] = {
    {"qkv", 256, 768, 256, kN, kT},       {"fc1", 256, 1024, 256, kN, kT},
    {"fc2", 256, 256, 1024, kN, kT},      {"qkv", 512, 1536, 512, kN, kT},
    {"fc1", 512, 2048, 512, kN, kT},      {"fc2", 512, 512, 2048, kN, kT},
    {"fc1_dx", 256, 256, 1024, kN, kN},   {"fc1_dx", 512, 512, 2048, kN, kN},
    {"fc1_dw", 1024, 256, 256, kT, kN},   {"fc1_dw", 2048, 512, 512, kT, kN},
    {"square", 2048, 2048, 2048, kN, kN},
};

enum class Backend { kOpenBlas, kDnnl, kBlis };
enum class DType { kF32, kBf16 };

// One backend and element type: the rows it adds to the table.
struct Variant {
  Backend backend;
  DType dtype;
  const char* name;  // "openblas/f32"
};
constexpr Variant kVariants[] = {
    {Backend::kOpenBlas, DType::kF32, "openblas/f32"},
    {Backend::kDnnl, DType::kF32, "dnnl/f32"},
    {Backend::kBlis, DType::kF32, "blis/f32"},
    {Backend::kDnnl, DType::kBf16, "dnnl/bf16"},
    {Backend::kOpenBlas, DType::kBf16, "loom/bf16"},
};

absl::StatusOr<AlignedBuffer<float>> Seeded(size_t size, uint32_t seed) {
  LOOM_ASSIGN_OR_RETURN(AlignedBuffer<float> buf, AlignedBuffer<float>::Create(size));
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : buf.span()) x = dist(gen);
  return buf;
}

// The inputs of one shape: f32 for the f32 rows; for bf16, the rounded inputs both as
// bf16 (oneDNN's operands) and widened back to f32 (the reference's).
struct Operands {
  AlignedBuffer<float> a, b;
  AlignedBuffer<BFloat16> a16, b16;
};

absl::StatusOr<Operands> MakeOperands(const GemmShape& s, uint32_t seed, DType dtype) {
  Operands op;
  LOOM_ASSIGN_OR_RETURN(op.a, Seeded(static_cast<size_t>(s.m * s.k), 2 * seed + 1));
  LOOM_ASSIGN_OR_RETURN(op.b, Seeded(static_cast<size_t>(s.k * s.n), 2 * seed + 2));
  if (dtype == DType::kBf16) {
    LOOM_ASSIGN_OR_RETURN(op.a16, AlignedBuffer<BFloat16>::Create(op.a.size()));
    LOOM_ASSIGN_OR_RETURN(op.b16, AlignedBuffer<BFloat16>::Create(op.b.size()));
    for (size_t i = 0; i < op.a.size(); ++i) {
      op.a16[i] = ToBFloat16(op.a[i]);
      op.a[i] = ToFloat(op.a16[i]);
    }
    for (size_t i = 0; i < op.b.size(); ++i) {
      op.b16[i] = ToBFloat16(op.b[i]);
      op.b[i] = ToFloat(op.b16[i]);
    }
  }
  return op;
}

// ---------------------------------------------------------------------------------
// One product of one backend, set up outside the timed loop.

class GemmRunner {
 public:
  virtual ~GemmRunner() = default;
  // Run computes C = op(A) op(B).
  virtual absl::Status Run() = 0;
  // Label names the implementation where the library says (oneDNN's matmul).
  virtual std::string Label() const { return ""; }
};

// Loom's own Gemm: OpenBLAS in f32; in kBf16 the rounding and oneDNN's matmul.
class OpenBlasRunner : public GemmRunner {
 public:
  OpenBlasRunner(const GemmShape& s, const Operands& op, absl::Span<float> c,
                 GemmPrecision precision = GemmPrecision::kF32)
      : s_(s), op_(op), c_(c), precision_(precision) {}
  absl::Status Run() override {
    const int64_t a_rows = s_.ta == kT ? s_.k : s_.m;
    const int64_t b_rows = s_.tb == kT ? s_.n : s_.k;
    return Gemm(Dense(op_.a.span(), a_rows, s_.lda()), s_.ta, Dense(op_.b.span(), b_rows, s_.ldb()),
                s_.tb, Dense(c_, s_.m, s_.n), 1.0f, 0.0f, precision_);
  }
  std::string Label() const override {
    return precision_ == GemmPrecision::kBf16 ? GemmBackendName(precision_) : "";
  }

 private:
  const GemmShape& s_;
  const Operands& op_;
  absl::Span<float> c_;
  const GemmPrecision precision_;
};

class DnnlSgemmRunner : public GemmRunner {
 public:
  DnnlSgemmRunner(const Dnnl& d, const GemmShape& s, const Operands& op, absl::Span<float> c)
      : d_(d), s_(s), op_(op), c_(c) {}
  absl::Status Run() override {
    return DnnlCheck(
        d_.sgemm(s_.ta == kT ? 'T' : 'N', s_.tb == kT ? 'T' : 'N', s_.m, s_.n, s_.k, 1.0f,
                 op_.a.data(), s_.lda(), op_.b.data(), s_.ldb(), 0.0f, c_.data(), s_.n),
        "dnnl_sgemm");
  }

 private:
  const Dnnl& d_;
  const GemmShape& s_;
  const Operands& op_;
  absl::Span<float> c_;
};

class BlisRunner : public GemmRunner {
 public:
  BlisRunner(const Blis& b, const GemmShape& s, const Operands& op, absl::Span<float> c)
      : b_(b), s_(s), op_(op), c_(c) {}
  absl::Status Run() override {
    b_.sgemm(kCblasRowMajor, s_.ta == kT ? kCblasTrans : kCblasNoTrans,
             s_.tb == kT ? kCblasTrans : kCblasNoTrans, static_cast<int32_t>(s_.m),
             static_cast<int32_t>(s_.n), static_cast<int32_t>(s_.k), 1.0f, op_.a.data(),
             static_cast<int32_t>(s_.lda()), op_.b.data(), static_cast<int32_t>(s_.ldb()), 0.0f,
             c_.data(), static_cast<int32_t>(s_.n));
    return absl::OkStatus();
  }

 private:
  const Blis& b_;
  const GemmShape& s_;
  const Operands& op_;
  absl::Span<float> c_;
};

// bf16 x bf16 -> f32 through oneDNN's matmul primitive, created for the thread count
// set when Create runs (its blocking depends on it).
class DnnlMatmulRunner : public GemmRunner {
 public:
  static absl::StatusOr<std::unique_ptr<DnnlMatmulRunner>> Create(const Dnnl& d, const GemmShape& s,
                                                                  Operands& op,
                                                                  absl::Span<float> c) {
    auto r = std::make_unique<DnnlMatmulRunner>(d);
    // Logical src [m,k], weights [k,n], dst [m,n]; transposes are strides.
    int64_t src_dims[kDnnlMaxNdims] = {s.m, s.k};
    int64_t src_strides[kDnnlMaxNdims] = {s.lda(), 1};
    if (s.ta == kT) {
      src_strides[0] = 1;
      src_strides[1] = s.lda();
    }
    int64_t wei_dims[kDnnlMaxNdims] = {s.k, s.n};
    int64_t wei_strides[kDnnlMaxNdims] = {s.ldb(), 1};
    if (s.tb == kT) {
      wei_strides[0] = 1;
      wei_strides[1] = s.ldb();
    }
    int64_t dst_dims[kDnnlMaxNdims] = {s.m, s.n};
    int64_t dst_strides[kDnnlMaxNdims] = {s.n, 1};
    DnnlMemoryDesc src{}, wei{}, dst{};
    LOOM_RETURN_IF_ERROR(
        DnnlCheck(d.memory_desc_init_by_strides(&src, 2, src_dims, kDnnlBf16, src_strides),
                  "dnnl_memory_desc_init_by_strides(src)"));
    LOOM_RETURN_IF_ERROR(
        DnnlCheck(d.memory_desc_init_by_strides(&wei, 2, wei_dims, kDnnlBf16, wei_strides),
                  "dnnl_memory_desc_init_by_strides(weights)"));
    LOOM_RETURN_IF_ERROR(
        DnnlCheck(d.memory_desc_init_by_strides(&dst, 2, dst_dims, kDnnlF32, dst_strides),
                  "dnnl_memory_desc_init_by_strides(dst)"));
    auto desc = std::make_unique<DnnlMatmulDesc>();
    LOOM_RETURN_IF_ERROR(DnnlCheck(d.matmul_desc_init(desc.get(), &src, &wei, nullptr, &dst),
                                   "dnnl_matmul_desc_init"));
    LOOM_RETURN_IF_ERROR(
        DnnlCheck(d.primitive_desc_create(&r->pd_, desc.get(), nullptr, d.engine, nullptr),
                  "dnnl_primitive_desc_create(matmul bf16 x bf16 -> f32)"));
    const char* impl = nullptr;
    if (d.primitive_desc_query(r->pd_, kDnnlQueryImplInfoStr, 0, &impl) == 0 && impl != nullptr) {
      r->impl_ = impl;
    }
    LOOM_RETURN_IF_ERROR(DnnlCheck(d.primitive_create(&r->prim_, r->pd_), "dnnl_primitive_create"));
    LOOM_RETURN_IF_ERROR(DnnlCheck(d.memory_create(&r->src_, &src, d.engine, op.a16.data()),
                                   "dnnl_memory_create(src)"));
    LOOM_RETURN_IF_ERROR(DnnlCheck(d.memory_create(&r->wei_, &wei, d.engine, op.b16.data()),
                                   "dnnl_memory_create(weights)"));
    LOOM_RETURN_IF_ERROR(
        DnnlCheck(d.memory_create(&r->dst_, &dst, d.engine, c.data()), "dnnl_memory_create(dst)"));
    return r;
  }

  ~DnnlMatmulRunner() override {
    for (DnnlHandle m : {src_, wei_, dst_}) {
      if (m != nullptr) d_.memory_destroy(m);
    }
    if (prim_ != nullptr) d_.primitive_destroy(prim_);
    if (pd_ != nullptr) d_.primitive_desc_destroy(pd_);
  }

  absl::Status Run() override {
    const DnnlExecArg args[] = {{kDnnlArgSrc, src_}, {kDnnlArgWeights, wei_}, {kDnnlArgDst, dst_}};
    LOOM_RETURN_IF_ERROR(
        DnnlCheck(d_.primitive_execute(prim_, d_.stream, 3, args), "dnnl_primitive_execute"));
    return DnnlCheck(d_.stream_wait(d_.stream), "dnnl_stream_wait");
  }

  std::string Label() const override { return impl_; }

  // Use Create.
  explicit DnnlMatmulRunner(const Dnnl& d) : d_(d) {}

 private:
  const Dnnl& d_;
  DnnlHandle pd_ = nullptr, prim_ = nullptr;
  DnnlHandle src_ = nullptr, wei_ = nullptr, dst_ = nullptr;
  std::string impl_;
};

// SetThreads sets the backend's threads for the products that follow, and checks
// that the library took the setting where it can say.
absl::Status SetThreads(Backend backend, int threads) {
  switch (backend) {
    case Backend::kOpenBlas:
      return SetGemmThreads(threads);
    case Backend::kDnnl: {
      const Dnnl& d = *DnnlLib();
      d.omp_set_num_threads(threads);
      if (const int got = d.omp_get_max_threads(); got != threads) {
        return absl::InternalError(
            absl::StrCat("omp_set_num_threads(", threads, ") left omp_get_max_threads() at ", got));
      }
      return absl::OkStatus();
    }
    case Backend::kBlis:
      BlisLib()->set_num_threads(threads);
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError("unknown backend");
}

absl::Status LibraryAvailable(Backend backend) {
  switch (backend) {
    case Backend::kOpenBlas:
      return absl::OkStatus();
    case Backend::kDnnl:
      return DnnlLib().status();
    case Backend::kBlis:
      return BlisLib().status();
  }
  return absl::InvalidArgumentError("unknown backend");
}

absl::StatusOr<std::unique_ptr<GemmRunner>> MakeRunner(const Variant& v, const GemmShape& s,
                                                       Operands& op, absl::Span<float> c) {
  if (v.dtype == DType::kBf16 && v.backend == Backend::kOpenBlas) {
    return std::unique_ptr<GemmRunner>(
        std::make_unique<OpenBlasRunner>(s, op, c, GemmPrecision::kBf16));
  }
  if (v.dtype == DType::kBf16) {
    if (v.backend != Backend::kDnnl) return absl::UnimplementedError("bf16 only on oneDNN");
    LOOM_ASSIGN_OR_RETURN(auto r, DnnlMatmulRunner::Create(*DnnlLib(), s, op, c));
    return std::unique_ptr<GemmRunner>(std::move(r));
  }
  switch (v.backend) {
    case Backend::kOpenBlas:
      return std::unique_ptr<GemmRunner>(std::make_unique<OpenBlasRunner>(s, op, c));
    case Backend::kDnnl:
      return std::unique_ptr<GemmRunner>(std::make_unique<DnnlSgemmRunner>(*DnnlLib(), s, op, c));
    case Backend::kBlis:
      return std::unique_ptr<GemmRunner>(std::make_unique<BlisRunner>(*BlisLib(), s, op, c));
  }
  return absl::InvalidArgumentError("unknown backend");
}

// MaxRelDiff returns max |x - ref| over max |ref|.
double MaxRelDiff(absl::Span<const float> x, absl::Span<const float> ref) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(x[i]) - static_cast<double>(ref[i])));
    scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
  }
  return scale > 0.0 ? diff / scale : diff;
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Everything one row times, ready before its loop.
struct Prepared {
  Operands op;
  AlignedBuffer<float> c;
  std::unique_ptr<GemmRunner> runner;
  int bitwise_vs_1t = -1;  // threads > 1: 1 if C equals the 1-thread C bit for bit
};

absl::StatusOr<std::unique_ptr<Prepared>> Prepare(const Variant& v, const GemmShape& s,
                                                  uint32_t seed, int threads) {
  LOOM_RETURN_IF_ERROR(LibraryAvailable(v.backend));
  auto p = std::make_unique<Prepared>();
  LOOM_ASSIGN_OR_RETURN(p->op, MakeOperands(s, seed, v.dtype));
  const size_t mn = static_cast<size_t>(s.m * s.n);
  LOOM_ASSIGN_OR_RETURN(p->c, AlignedBuffer<float>::Create(mn));

  // The reference: OpenBLAS on the calling thread alone (no OpenBLAS workers left
  // spinning into another library's timing).
  LOOM_ASSIGN_OR_RETURN(AlignedBuffer<float> ref, AlignedBuffer<float>::Create(mn));
  LOOM_RETURN_IF_ERROR(SetGemmThreads(1));
  LOOM_RETURN_IF_ERROR(OpenBlasRunner(s, p->op, ref.span()).Run());

  AlignedBuffer<float> one_thread;
  if (threads > 1) {
    LOOM_ASSIGN_OR_RETURN(one_thread, AlignedBuffer<float>::Create(mn));
    LOOM_RETURN_IF_ERROR(SetThreads(v.backend, 1));
    LOOM_ASSIGN_OR_RETURN(auto r1, MakeRunner(v, s, p->op, one_thread.span()));
    LOOM_RETURN_IF_ERROR(r1->Run());
  }
  LOOM_RETURN_IF_ERROR(SetThreads(v.backend, threads));
  LOOM_ASSIGN_OR_RETURN(p->runner, MakeRunner(v, s, p->op, p->c.span()));
  LOOM_RETURN_IF_ERROR(p->runner->Run());

  const double bound = v.dtype == DType::kBf16 ? 1e-3 : 1e-4;
  const double diff = MaxRelDiff(p->c.span(), ref.span());
  if (!(diff <= bound)) {
    return absl::InternalError(absl::StrCat(v.name, " ", s.Name(), " threads:", threads,
                                            " differs from OpenBLAS f32 by ", diff,
                                            " of max |C| (bound ", bound, ")"));
  }
  if (threads > 1) {
    p->bitwise_vs_1t = std::memcmp(p->c.data(), one_thread.data(), mn * sizeof(float)) == 0;
  }
  return p;
}

// ---------------------------------------------------------------------------------
// Benchmarks.

const absl::StatusOr<FmaPeak>& PeakPerCore() {
  static const auto* peak = new absl::StatusOr<FmaPeak>(MeasureFmaPeak(absl::Milliseconds(100)));
  return *peak;
}

void BM_FmaPeakPerCore(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(PeakPerCore());
  const absl::StatusOr<FmaPeak>& peak = PeakPerCore();
  if (!peak.ok()) {
    state.SkipWithError(peak.status().ToString().c_str());
    return;
  }
  state.counters["GFLOP/s"] = peak->flops_per_core / 1e9;
  state.SetLabel(absl::StrCat(peak->cpu_model, ", ", peak->vector_target));
}
BENCHMARK(BM_FmaPeakPerCore)->Iterations(1)->UseRealTime();

// openblas/f32 GFLOP/s by shape and threads, for the other rows' x_openblas.
std::map<std::pair<std::string, int>, double>& OpenBlasGflops() {
  static auto* m = new std::map<std::pair<std::string, int>, double>();
  return *m;
}

void BM_Gemm(benchmark::State& state, const Variant* variant, const GemmShape* shape, uint32_t seed,
             int threads) {
  const Variant& v = *variant;
  const GemmShape& s = *shape;
  // A library's idle workers spin for a while after its last product (OpenBLAS about
  // 0.1 s, libgomp less); let them settle before another library is timed.
  static const Variant* previous = nullptr;
  if (previous != variant) absl::SleepFor(absl::Milliseconds(300));
  previous = variant;

  absl::StatusOr<std::unique_ptr<Prepared>> p = Prepare(v, s, seed, threads);
  if (!p.ok()) {
    state.SkipWithError(p.status().ToString().c_str());
    return;
  }
  GemmRunner& runner = *(*p)->runner;
  const double cpu_start = ProcessCpuSeconds();
  const absl::Time start = absl::Now();
  absl::Status run_status;
  for (auto _ : state) {
    run_status = runner.Run();
    if (!run_status.ok()) break;
    benchmark::ClobberMemory();
  }
  if (!run_status.ok()) {
    state.SkipWithError(run_status.ToString().c_str());
    return;
  }
  const double wall = absl::ToDoubleSeconds(absl::Now() - start);
  const double cpu = ProcessCpuSeconds() - cpu_start;
  const double gflops = s.Flops() * static_cast<double>(state.iterations()) / wall / 1e9;
  state.counters["GFLOP/s"] = gflops;
  state.counters["cpus"] = cpu / wall;
  if ((*p)->bitwise_vs_1t >= 0) state.counters["bitwise_vs_1t"] = (*p)->bitwise_vs_1t;
  const auto key = std::make_pair(s.Name(), threads);
  if (v.backend == Backend::kOpenBlas && v.dtype == DType::kF32) {
    OpenBlasGflops()[key] = gflops;
  } else if (auto it = OpenBlasGflops().find(key); it != OpenBlasGflops().end()) {
    state.counters["x_openblas"] = gflops / it->second;
  }
  if (const absl::StatusOr<FmaPeak>& peak = PeakPerCore(); peak.ok()) {
    state.counters["of_peak"] = gflops * 1e9 / (peak->flops_per_core * threads);
  }
  state.SetLabel(runner.Label());
}

bool RegisterAll() {
  for (int threads : {1, 2}) {
    for (const Variant& v : kVariants) {
      uint32_t seed = 0;
      for (const GemmShape& s : kShapes) {
        const std::string name =
            absl::StrCat("BM_Gemm/", v.name, "/", s.Name(), "/threads:", threads);
        benchmark::RegisterBenchmark(name.c_str(), BM_Gemm, &v, &s, seed++, threads)
            ->UseRealTime()
            ->MinTime(0.3)
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
  return true;
}
[[maybe_unused]] const bool registered = RegisterAll();

}  // namespace
}  // namespace loom
