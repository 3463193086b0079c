#include "models/gpt/gpu/device_gpt_model.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/gpu/cuda_status.h"
#include "core/gpu/cuda_stream.h"
#include "core/gpu/device_buffer.h"
#include "core/half.h"
#include "core/status_macros.h"
#include "models/gpt/gpu/flash_attention_kernels.h"
#include "models/gpt/gpu/gpt_kernels.h"
#include "offload/gpu/gpu_adamw.h"
#include "tensor_parallel/gpu/cublas_gemm.h"

namespace loom {
namespace {

constexpr int64_t kAlign = 256;           // bytes, every buffer
constexpr int64_t kParamAlign = 64;       // elements, every parameter in the flat buffers
constexpr int kTokenSlots = 2;            // pinned staging slots for the batches' ids
// Device memory left free beside the model: cuBLAS's workspaces, the CUDA context's
// allocations after Create.
constexpr int64_t kHeadroomBytes = int64_t{512} << 20;

int64_t RoundUp(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// One layer's activations kept for its backward (byte offsets into the arena). p:
// the attention probabilities, or with flash attention each row's log-sum-exp.
struct LayerBuffers {
  int64_t x0, a1, mean1, rstd1, q, k, v, p, ctx, x1, a2, mean2, rstd2, pre, g;
};

bool UsesFlash(const GptConfig& c, const DeviceGptOptions& o) {
  switch (o.attention) {
    case DeviceAttention::kMaterialized:
      return false;
    case DeviceAttention::kFlash:
      return true;
    case DeviceAttention::kAuto:
      break;
  }
  return o.bf16 && gpt_gpu::FlashSupported(c.head_dim());
}

// The indices of one block's parameters.
struct BlockParams {
  int ln1g, ln1b, qkvw, qkvb, outw, outb, ln2g, ln2b, fcw, fcb, projw, projb;
};

// Where every buffer lies in the one device allocation.
struct Layout {
  int64_t flat = 0;  // elements of each flat parameter buffer
  int64_t params = 0, grads = 0, m = 0, v = 0, half = 0;
  std::vector<LayerBuffers> layers;
  int64_t x_final = 0, af = 0, meanf = 0, rstdf = 0, logits = 0, row_loss = 0;
  int64_t qkv_raw = 0, scores = 0, ctx_h = 0, dlogits = 0, dres = 0, dres_t = 0, da = 0, dg = 0, dpre = 0,
          dctx = 0, dctx_h = 0, dp = 0, dq = 0, dk = 0, dv = 0, dqkv = 0, partial = 0,
          squares = 0, doubles = 0, bad = 0, tokens = 0, targets = 0, delta = 0, dq_accum = 0;
  int64_t state_end = 0, activations_end = 0, total = 0;
};

class Arena {
 public:
  int64_t Take(int64_t bytes) {
    const int64_t at = end_;
    end_ = RoundUp(end_ + std::max<int64_t>(bytes, 1), kAlign);
    return at;
  }
  int64_t end() const { return end_; }

 private:
  int64_t end_ = 0;
};

std::vector<DeviceParameter> ParameterList(const GptConfig& c) {
  const int64_t v = c.vocab, s = c.seq_len, h = c.hidden, f = c.ffn_size();
  std::vector<DeviceParameter> list;
  int64_t offset = 0;
  const auto add = [&](std::string name, std::vector<int64_t> shape) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    list.push_back({std::move(name), std::move(shape), offset, numel});
    offset = RoundUp(offset + numel, kParamAlign);
  };
  add("embed.token", {v, h});
  add("embed.position", {s, h});
  for (int64_t i = 0; i < c.layers; ++i) {
    const std::string p = absl::StrCat("blocks.", i, ".");
    add(p + "ln1.gamma", {h});
    add(p + "ln1.beta", {h});
    add(p + "attn.qkv.weight", {3 * h, h});
    add(p + "attn.qkv.bias", {3 * h});
    add(p + "attn.out.weight", {h, h});
    add(p + "attn.out.bias", {h});
    add(p + "ln2.gamma", {h});
    add(p + "ln2.beta", {h});
    add(p + "mlp.fc.weight", {f, h});
    add(p + "mlp.fc.bias", {f});
    add(p + "mlp.proj.weight", {h, f});
    add(p + "mlp.proj.bias", {h});
  }
  add("final_ln.gamma", {h});
  add("final_ln.beta", {h});
  add("head.weight", {v, h});
  return list;
}

int64_t FlatElements(const std::vector<DeviceParameter>& list) {
  return list.empty() ? 0 : RoundUp(list.back().offset + list.back().numel, kParamAlign);
}

absl::Status CheckShape(const GptConfig& c, const DeviceGptOptions& o) {
  LOOM_RETURN_IF_ERROR(c.Validate(1));
  if (o.micro_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceGptModel: micro_batch ", o.micro_batch, " must be at least 1"));
  }
  // cuBLAS takes int dimensions and leading dimensions; the row kernels launch a
  // block per row.
  const int64_t rows = c.seq_len * o.micro_batch;
  const int64_t widest = std::max({c.vocab, c.ffn_size(), 3 * c.hidden, c.seq_len});
  const int64_t score_rows = o.micro_batch * c.heads * c.seq_len;
  // The column sums launch a grid row per 128 rows (at most 65535 of them).
  if (o.attention == DeviceAttention::kFlash &&
      (!o.bf16 || !gpt_gpu::FlashSupported(c.head_dim()))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeviceGptModel: flash attention runs bf16 operands with head_dim 64 or 128; this model is ",
        o.bf16 ? "bf16" : "f32", " with head_dim ", c.head_dim()));
  }
  if (rows > INT_MAX || widest > INT_MAX || score_rows > INT_MAX || rows > 128 * 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeviceGptModel: ", rows, " rows of up to ", widest, " (", score_rows,
        " attention rows) exceed the 32-bit sizes cuBLAS and the row kernels take"));
  }
  return absl::OkStatus();
}

Layout LayoutOf(const GptConfig& c, const DeviceGptOptions& o,
                const std::vector<DeviceParameter>& list) {
  const int64_t b = o.micro_batch, s = c.seq_len, h = c.hidden, f = c.ffn_size(), v = c.vocab;
  const int64_t rows = s * b, bh = b * c.heads;
  const int64_t es = o.bf16 ? 2 : 4;  // an operand's element
  Layout l;
  Arena a;
  l.flat = FlatElements(list);
  l.params = a.Take(l.flat * 4);
  l.grads = a.Take(l.flat * 4);
  l.m = a.Take(l.flat * 4);
  l.v = a.Take(l.flat * 4);
  if (o.bf16) l.half = a.Take(l.flat * 2);
  l.state_end = a.end();
  for (int64_t i = 0; i < c.layers; ++i) {
    LayerBuffers lb;
    lb.x0 = a.Take(rows * h * 4);
    lb.a1 = a.Take(rows * h * es);
    lb.mean1 = a.Take(rows * 4);
    lb.rstd1 = a.Take(rows * 4);
    if (UsesFlash(c, o)) {
      // One [s, b, 3h] block (bf16): flash attention reads Q, K, V in place.
      lb.q = a.Take(rows * 3 * h * es);
      lb.k = lb.q + h * es;
      lb.v = lb.q + 2 * h * es;
    } else {  // head layout [b * heads, s, d] each, for the batched products
      lb.q = a.Take(rows * h * es);
      lb.k = a.Take(rows * h * es);
      lb.v = a.Take(rows * h * es);
    }
    lb.p = UsesFlash(c, o) ? a.Take(bh * s * 4) : a.Take(bh * s * s * es);
    lb.ctx = a.Take(rows * h * es);
    lb.x1 = a.Take(rows * h * 4);
    lb.a2 = a.Take(rows * h * es);
    lb.mean2 = a.Take(rows * 4);
    lb.rstd2 = a.Take(rows * 4);
    lb.pre = a.Take(rows * f * es);  // the FC product in the operand type
    lb.g = a.Take(rows * f * es);
    l.layers.push_back(lb);
  }
  l.x_final = a.Take(rows * h * 4);
  l.af = a.Take(rows * h * es);
  l.meanf = a.Take(rows * 4);
  l.rstdf = a.Take(rows * 4);
  l.logits = a.Take(rows * v * 4);
  l.row_loss = a.Take(rows * 4);
  l.activations_end = a.end();
  l.qkv_raw = a.Take(rows * 3 * h * 4);
  // The attention scores in f32 before the softmax (with f32 operands, in place in
  // the probabilities' memory).
  const bool flash = UsesFlash(c, o);
  if (o.bf16 && !flash) l.scores = a.Take(bh * s * s * 4);
  if (!flash) l.ctx_h = a.Take(rows * h * es);
  l.dlogits = a.Take(rows * v * es);
  l.dres = a.Take(rows * h * 4);
  if (o.bf16) l.dres_t = a.Take(rows * h * es);
  l.da = a.Take(rows * h * 4);
  l.dg = a.Take(rows * f * es);
  l.dpre = a.Take(rows * f * es);
  l.dctx = a.Take(rows * h * es);
  if (!flash) l.dctx_h = a.Take(rows * h * es);
  if (flash) {
    l.delta = a.Take(bh * s * 4);
    l.dq_accum = a.Take(rows * h * 4);
  } else {
    l.dp = a.Take(bh * s * s * es);
  }
  if (!flash) {  // flash writes its gradients straight into dqkv
    l.dq = a.Take(rows * h * es);
    l.dk = a.Take(rows * h * es);
    l.dv = a.Take(rows * h * es);
  }
  l.dqkv = a.Take(rows * 3 * h * es);
  l.partial = a.Take(gpt_gpu::ColumnPartialFloats(rows, std::max({f, 3 * h, v})) * 4);
  l.squares = a.Take(gpt_gpu::SquaresPartialDoubles() * 8);
  l.doubles = a.Take(3 * 8);  // loss accumulator, eval loss, squared norm
  l.bad = a.Take(4);
  l.tokens = a.Take(rows * 4);
  l.targets = a.Take(rows * 4);
  l.total = a.end();
  return l;
}

absl::Status Kernel(cudaError_t error, const char* name) {
  return CudaStatus(error, absl::StrCat("gpt_gpu::", name));
}

}  // namespace

struct DeviceGptModel::Impl {
  Layout layout;
  DeviceBuffer arena;
  DeviceBuffer pinned;  // kTokenSlots x (tokens, targets) as int32, then 3 doubles
  CudaStream stream;
  CudaEvent slot_free[kTokenSlots];
  int next_slot = 0;
  CublasHandle cublas;
  std::vector<BlockParams> blocks;
  int token = 0, position = 0, final_gamma = 0, final_beta = 0, head = 0;

  std::byte* at(int64_t offset) const { return const_cast<std::byte*>(arena.data()) + offset; }
  float* F(int64_t offset) const { return reinterpret_cast<float*>(at(offset)); }
  void* T(int64_t offset) const { return at(offset); }
};

const char* DeviceAttentionName(DeviceAttention attention) {
  switch (attention) {
    case DeviceAttention::kAuto:
      return "auto";
    case DeviceAttention::kMaterialized:
      return "materialized";
    case DeviceAttention::kFlash:
      return "flash";
  }
  return "?";
}

absl::StatusOr<DeviceGptBytes> DeviceGptModel::BytesOf(const GptConfig& config,
                                                       const DeviceGptOptions& options) {
  LOOM_RETURN_IF_ERROR(CheckShape(config, options));
  const Layout l = LayoutOf(config, options, ParameterList(config));
  DeviceGptBytes bytes;
  bytes.state = l.state_end;
  bytes.activations = l.activations_end - l.state_end;
  bytes.scratch = l.total - l.activations_end;
  return bytes;
}

DeviceGptModel::DeviceGptModel(const GptConfig& config, const DeviceGptOptions& options)
    : config_(config), options_(options), impl_(std::make_unique<Impl>()) {}

DeviceGptModel::~DeviceGptModel() {
  // Nothing may still write into the arena when it is freed.
  if (impl_ != nullptr && impl_->stream.get() != nullptr) {
    (void)impl_->stream.Synchronize(absl::Now() + options_.timeout);
  }
}

absl::StatusOr<std::unique_ptr<DeviceGptModel>> DeviceGptModel::Create(
    const GptConfig& config, const DeviceGptOptions& options) {
  LOOM_RETURN_IF_ERROR(CheckShape(config, options));
  std::unique_ptr<DeviceGptModel> model(new DeviceGptModel(config, options));
  Impl& im = *model->impl_;
  model->params_ = ParameterList(config);
  model->flash_ = UsesFlash(config, options);
  im.layout = LayoutOf(config, options, model->params_);
  const Layout& l = im.layout;
  model->bytes_ = {l.state_end, l.activations_end - l.state_end, l.total - l.activations_end};
  LOOM_ASSIGN_OR_RETURN(im.stream, CudaStream::Create(options.device));
  LOOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
  size_t free_bytes = 0, total_bytes = 0;
  LOOM_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (static_cast<int64_t>(free_bytes) < l.total + kHeadroomBytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "DeviceGptModel: ", config.ToString(), " at micro_batch ", options.micro_batch,
        (options.bf16 ? " bf16" : " f32"), " needs ", l.total, " bytes of CUDA device ",
        options.device, " (state ", model->bytes_.state, ", activations ",
        model->bytes_.activations, ", scratch ", model->bytes_.scratch, ") and ", kHeadroomBytes,
        " beside them; ", free_bytes, " of ", total_bytes, " are free"));
  }
  LOOM_ASSIGN_OR_RETURN(im.arena,
                        DeviceBuffer::Allocate(MemorySpace::kDevice, l.total, options.device));
  const int64_t rows = config.seq_len * options.micro_batch;
  LOOM_ASSIGN_OR_RETURN(im.pinned, DeviceBuffer::Allocate(MemorySpace::kHostPinned,
                                                          kTokenSlots * 2 * rows * 4 + 3 * 8));
  for (CudaEvent& e : im.slot_free) {
    LOOM_ASSIGN_OR_RETURN(e, CudaEvent::Create(options.device));
  }
  LOOM_ASSIGN_OR_RETURN(im.cublas, CublasHandle::Create(im.stream, options.bf16
                                                                        ? CublasMath::kDefault
                                                                        : CublasMath::kPedantic));
  // Zero state: parameters, gradients, moments (and the accumulators).
  LOOM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(im.arena.data(), 0, l.total, im.stream.get()));
  const auto index = [&](const std::string& name) { return model->ParameterIndex(name); };
  im.token = index("embed.token");
  im.position = index("embed.position");
  for (int64_t i = 0; i < config.layers; ++i) {
    const std::string p = absl::StrCat("blocks.", i, ".");
    im.blocks.push_back({index(p + "ln1.gamma"), index(p + "ln1.beta"),
                         index(p + "attn.qkv.weight"), index(p + "attn.qkv.bias"),
                         index(p + "attn.out.weight"), index(p + "attn.out.bias"),
                         index(p + "ln2.gamma"), index(p + "ln2.beta"), index(p + "mlp.fc.weight"),
                         index(p + "mlp.fc.bias"), index(p + "mlp.proj.weight"),
                         index(p + "mlp.proj.bias")});
  }
  im.final_gamma = index("final_ln.gamma");
  im.final_beta = index("final_ln.beta");
  im.head = index("head.weight");
  LOOM_RETURN_IF_ERROR(model->Synchronize());
  return model;
}

int DeviceGptModel::ParameterIndex(absl::string_view name) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int64_t DeviceGptModel::parameter_count() const {
  int64_t n = 0;
  for (const DeviceParameter& p : params_) n += p.numel;
  return n;
}

absl::Status DeviceGptModel::Synchronize() {
  return impl_->stream.Synchronize(absl::Now() + options_.timeout);
}

namespace {

absl::Status CheckRange(const std::vector<DeviceParameter>& params, int p, int64_t begin,
                        size_t count, const char* what) {
  if (p < 0 || p >= static_cast<int>(params.size())) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceGptModel::", what, ": parameter ", p,
                                                   " of ", params.size()));
  }
  if (begin < 0 || begin + static_cast<int64_t>(count) > params[p].numel) {
    return absl::OutOfRangeError(absl::StrCat("DeviceGptModel::", what, ": elements [", begin, ", ",
                                              begin + static_cast<int64_t>(count), ") of ",
                                              params[p].name, ", which has ", params[p].numel));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DeviceGptModel::SetParameter(int p, int64_t begin, absl::Span<const float> values,
                                          absl::Span<const float> m, absl::Span<const float> v) {
  LOOM_RETURN_IF_ERROR(CheckRange(params_, p, begin, values.size(), "SetParameter"));
  const bool moments = !m.empty() || !v.empty();
  if (moments && (m.size() != values.size() || v.size() != values.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeviceGptModel::SetParameter: ", params_[p].name, ": ", values.size(),
        " values but moments of ", m.size(), " and ", v.size(),
        " (both the values' size, or both empty to leave the moments as they are)"));
  }
  const Layout& l = impl_->layout;
  const int64_t at = (params_[p].offset + begin) * 4;
  const size_t bytes = values.size() * 4;
  // On the model's stream, so the bf16 copy below reads landed values: a plain
  // cudaMemcpy from pageable memory returns before its DMA ends, on the legacy
  // stream, which this non-blocking stream does not wait for.
  cudaStream_t st = impl_->stream.get();
  LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(impl_->at(l.params + at), values.data(), bytes,
                                            cudaMemcpyHostToDevice, st));
  if (moments) {
    LOOM_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(impl_->at(l.m + at), m.data(), bytes, cudaMemcpyHostToDevice, st));
    LOOM_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(impl_->at(l.v + at), v.data(), bytes, cudaMemcpyHostToDevice, st));
  }
  if (options_.bf16 && !values.empty()) {
    LOOM_RETURN_IF_ERROR(Kernel(
        gpt_gpu::ToBf16(impl_->F(l.params + at), impl_->at(l.half + at / 2),
                        static_cast<int64_t>(values.size()), impl_->stream.get()),
        "ToBf16"));
  }
  return Synchronize();
}

absl::Status DeviceGptModel::GetParameter(int p, absl::Span<float> values, absl::Span<float> m,
                                          absl::Span<float> v) const {
  LOOM_RETURN_IF_ERROR(CheckRange(params_, p, 0, values.size(), "GetParameter"));
  if (static_cast<int64_t>(values.size()) != params_[p].numel ||
      (!m.empty() && m.size() != values.size()) || (!v.empty() && v.size() != values.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeviceGptModel::GetParameter: ", params_[p].name, " has ", params_[p].numel,
        " elements; got spans of ", values.size(), ", ", m.size(), " and ", v.size()));
  }
  const Layout& l = impl_->layout;
  const int64_t at = params_[p].offset * 4;
  const size_t bytes = values.size() * 4;
  cudaStream_t st = impl_->stream.get();
  LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(values.data(), impl_->at(l.params + at), bytes,
                                            cudaMemcpyDeviceToHost, st));
  if (!m.empty()) {
    LOOM_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(m.data(), impl_->at(l.m + at), bytes, cudaMemcpyDeviceToHost, st));
  }
  if (!v.empty()) {
    LOOM_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(v.data(), impl_->at(l.v + at), bytes, cudaMemcpyDeviceToHost, st));
  }
  return impl_->stream.Synchronize(absl::Now() + options_.timeout);
}

absl::Status DeviceGptModel::GetGradient(int p, absl::Span<float> grad) const {
  LOOM_RETURN_IF_ERROR(CheckRange(params_, p, 0, grad.size(), "GetGradient"));
  if (static_cast<int64_t>(grad.size()) != params_[p].numel) {
    return absl::InvalidArgumentError(absl::StrCat("DeviceGptModel::GetGradient: ",
                                                   params_[p].name, " has ", params_[p].numel,
                                                   " elements; got a span of ", grad.size()));
  }
  LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      grad.data(), impl_->at(impl_->layout.grads + params_[p].offset * 4), grad.size() * 4,
      cudaMemcpyDeviceToHost, impl_->stream.get()));
  return impl_->stream.Synchronize(absl::Now() + options_.timeout);
}

absl::Status DeviceGptModel::ZeroGrad() {
  const Layout& l = impl_->layout;
  LOOM_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(impl_->at(l.grads), 0, l.flat * 4, impl_->stream.get()));
  LOOM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(impl_->at(l.doubles), 0, 8, impl_->stream.get()));
  return absl::OkStatus();
}

namespace {

// The row-major product of tensor_parallel/layers/gemm.h's meaning, C[m,n] =
// alpha op(A)[m,k] op(B)[k,n] + beta C, on cuBLAS's column-major interface (C^T =
// op(B)^T op(A)^T), over `batch` products `stride_*` elements apart. A and B are
// operands (bf16 or f32); C is an operand (c_operand) or f32.
struct Gemmer {
  const CublasHandle& cublas;
  bool bf16;

  absl::Status operator()(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const void* a, int64_t lda, const void* b, int64_t ldb, float beta,
                          void* c, bool c_operand, int64_t ldc, int64_t batch = 1,
                          int64_t stride_a = 0, int64_t stride_b = 0, int64_t stride_c = 0) const {
    const cudaDataType ab = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    const cudaDataType ct = bf16 && c_operand ? CUDA_R_16BF : CUDA_R_32F;
    const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (batch == 1) {
      LOOM_CUBLAS_RETURN_IF_ERROR(cublasGemmEx(
          cublas.get(), op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
          &alpha, b, ab, static_cast<int>(ldb), a, ab, static_cast<int>(lda), &beta, c, ct,
          static_cast<int>(ldc), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
      LOOM_CUBLAS_RETURN_IF_ERROR(cublasGemmStridedBatchedEx(
          cublas.get(), op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
          &alpha, b, ab, static_cast<int>(ldb), stride_b, a, ab, static_cast<int>(lda), stride_a,
          &beta, c, ct, static_cast<int>(ldc), stride_c, static_cast<int>(batch),
          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    return absl::OkStatus();
  }
};

absl::Status CheckBatch(const GptConfig& c, const DeviceGptOptions& o, const GptBatch& batch) {
  const size_t want = static_cast<size_t>(o.micro_batch * c.seq_len);
  if (batch.batch != o.micro_batch || batch.seq_len != c.seq_len || batch.tokens.size() != want ||
      batch.targets.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DeviceGptModel: batch of ", batch.batch, " sequences of ", batch.seq_len, " (",
        batch.tokens.size(), " tokens, ", batch.targets.size(), " targets); the model was made for ",
        o.micro_batch, " of ", c.seq_len));
  }
  for (size_t i = 0; i < want; ++i) {
    for (const auto* ids : {&batch.tokens, &batch.targets}) {
      const int64_t id = (*ids)[i];
      if (id < 0 || id >= c.vocab) {
        return absl::InvalidArgumentError(absl::StrCat(
            "DeviceGptModel: ", ids == &batch.tokens ? "token " : "target ", id, " at ", i,
            " is outside the vocabulary [0, ", c.vocab, ")"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

// The forward and backward passes, free functions over the model's buffers.
class DeviceGptPass {
 public:
  DeviceGptPass(const GptConfig& c, const DeviceGptOptions& o,
                const std::vector<DeviceParameter>& params, DeviceGptModel::Impl& im)
      : c_(c), o_(o), params_(params), im_(im), l_(im.layout), gemm_{im.cublas, o.bf16},
        flash_(UsesFlash(c, o)) {}

  // Copies the batch's ids into the device (through a pinned slot).
  absl::Status Upload(const GptBatch& batch) {
    const int64_t rows = c_.seq_len * o_.micro_batch;
    const int slot = im_.next_slot;
    im_.next_slot = (slot + 1) % kTokenSlots;
    // The slot's previous copy must have left it before it is overwritten.
    LOOM_RETURN_IF_ERROR(im_.slot_free[slot].Wait(absl::Now() + o_.timeout));
    int32_t* host = reinterpret_cast<int32_t*>(im_.pinned.data()) + slot * 2 * rows;
    for (int64_t i = 0; i < rows; ++i) {
      host[i] = static_cast<int32_t>(batch.tokens[i]);
      host[rows + i] = static_cast<int32_t>(batch.targets[i]);
    }
    LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(im_.at(l_.tokens), host, rows * 4,
                                              cudaMemcpyHostToDevice, im_.stream.get()));
    LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(im_.at(l_.targets), host + rows, rows * 4,
                                              cudaMemcpyHostToDevice, im_.stream.get()));
    return im_.slot_free[slot].Record(im_.stream);
  }

  absl::Status Forward(bool train, float grad_scale) {
    const int64_t b = o_.micro_batch, s = c_.seq_len, h = c_.hidden, f = c_.ffn_size(),
                  v = c_.vocab, heads = c_.heads, d = c_.head_dim();
    const int64_t rows = s * b, bh = b * heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const bool bf = o_.bf16;
    cudaStream_t st = im_.stream.get();
    const int64_t x_first = c_.layers > 0 ? l_.layers[0].x0 : l_.x_final;
    LOOM_RETURN_IF_ERROR(Kernel(gpt_gpu::EmbedForward(Ids(l_.tokens), P(im_.token),
                                                      P(im_.position), F(x_first), b, s, h, st),
                                "EmbedForward"));
    // Each residual add runs in one pass with the layer norm that reads its sum (the
    // next block's first, or the final one), so only the first norm runs alone.
    if (c_.layers > 0) {
      const LayerBuffers& first = l_.layers[0];
      LOOM_RETURN_IF_ERROR(Kernel(
          gpt_gpu::LayerNormForward(F(first.x0), P(im_.blocks[0].ln1g), P(im_.blocks[0].ln1b),
                                    c_.layer_norm_eps, T(first.a1), F(first.mean1),
                                    F(first.rstd1), rows, h, bf, st),
          "LayerNormForward"));
    }
    for (int64_t i = 0; i < c_.layers; ++i) {
      const LayerBuffers& lb = l_.layers[i];
      const BlockParams& bp = im_.blocks[i];
      LOOM_RETURN_IF_ERROR(gemm_(false, true, rows, 3 * h, h, 1.0f, T(lb.a1), h, W(bp.qkvw), h,
                                 0.0f, F(l_.qkv_raw), false, 3 * h));
      if (flash_) {
        // Q, K and V stay side by side in the [s, b, 3h] rows; flash attention reads
        // them there and writes its output straight into ctx's [s, b, h] rows.
        LOOM_RETURN_IF_ERROR(
            Kernel(gpt_gpu::BiasToBf16(F(l_.qkv_raw), P(bp.qkvb), T(lb.q), rows, 3 * h, st),
                   "BiasToBf16"));
        LOOM_RETURN_IF_ERROR(Kernel(
            gpt_gpu::FlashForward(T(lb.q), T(lb.k), T(lb.v), gpt_gpu::RowLayout(b, 3 * h, d),
                                  T(lb.ctx), gpt_gpu::RowLayout(b, h, d), F(lb.p), b, heads, s, d,
                                  scale, st),
            "FlashForward"));
      } else {
        LOOM_RETURN_IF_ERROR(Kernel(gpt_gpu::SplitQkv(F(l_.qkv_raw), P(bp.qkvb), T(lb.q), T(lb.k),
                                                      T(lb.v), s, b, heads, d, bf, st),
                                    "SplitQkv"));
        float* scores = bf ? F(l_.scores) : F(lb.p);
        LOOM_RETURN_IF_ERROR(gemm_(false, true, s, s, d, scale, T(lb.q), d, T(lb.k), d, 0.0f,
                                   scores, false, s, bh, s * d, s * d, s * s));
        LOOM_RETURN_IF_ERROR(Kernel(
            gpt_gpu::CausalSoftmaxForward(scores, T(lb.p), bh * s, s, bf, st),
            "CausalSoftmaxForward"));
        LOOM_RETURN_IF_ERROR(gemm_(false, false, s, d, s, 1.0f, T(lb.p), s, T(lb.v), d, 0.0f,
                                   T(l_.ctx_h), true, d, bh, s * s, s * d, s * d));
        LOOM_RETURN_IF_ERROR(Kernel(gpt_gpu::PermuteHeads(T(l_.ctx_h), T(lb.ctx),
                                                          /*to_heads=*/false, s, b, heads, d, bf,
                                                          st),
                                    "PermuteHeads"));
      }
      LOOM_RETURN_IF_ERROR(gemm_(false, true, rows, h, h, 1.0f, T(lb.ctx), h, W(bp.outw), h, 0.0f,
                                 F(lb.x1), false, h));
      LOOM_RETURN_IF_ERROR(Kernel(
          gpt_gpu::BiasResidualLayerNorm(F(lb.x0), F(lb.x1), P(bp.outb), F(lb.x1), P(bp.ln2g),
                                         P(bp.ln2b), c_.layer_norm_eps, T(lb.a2), F(lb.mean2),
                                         F(lb.rstd2), rows, h, bf, st),
          "BiasResidualLayerNorm"));
      LOOM_RETURN_IF_ERROR(gemm_(false, true, rows, f, h, 1.0f, T(lb.a2), h, W(bp.fcw), h, 0.0f,
                                 T(lb.pre), true, f));
      LOOM_RETURN_IF_ERROR(Kernel(
          gpt_gpu::BiasGeluForward(T(lb.pre), P(bp.fcb), T(lb.g), rows, f, bf, st),
          "BiasGeluForward"));
      const bool last = i + 1 == c_.layers;
      const int64_t next = last ? l_.x_final : l_.layers[i + 1].x0;
      LOOM_RETURN_IF_ERROR(gemm_(false, true, rows, h, f, 1.0f, T(lb.g), f, W(bp.projw), f, 0.0f,
                                 F(next), false, h));
      // The sum's norm: the next block's first, or the final one.
      const LayerBuffers* nb = last ? nullptr : &l_.layers[i + 1];
      const int gamma = last ? im_.final_gamma : im_.blocks[i + 1].ln1g;
      const int beta = last ? im_.final_beta : im_.blocks[i + 1].ln1b;
      LOOM_RETURN_IF_ERROR(Kernel(
          gpt_gpu::BiasResidualLayerNorm(
              F(lb.x1), F(next), P(bp.projb), F(next), P(gamma), P(beta), c_.layer_norm_eps,
              T(last ? l_.af : nb->a1), F(last ? l_.meanf : nb->mean1),
              F(last ? l_.rstdf : nb->rstd1), rows, h, bf, st),
          "BiasResidualLayerNorm"));
    }
    if (c_.layers == 0) {
      LOOM_RETURN_IF_ERROR(Kernel(
          gpt_gpu::LayerNormForward(F(l_.x_final), P(im_.final_gamma), P(im_.final_beta),
                                    c_.layer_norm_eps, T(l_.af), F(l_.meanf), F(l_.rstdf), rows,
                                    h, bf, st),
          "LayerNormForward"));
    }
    LOOM_RETURN_IF_ERROR(gemm_(false, true, rows, v, h, 1.0f, T(l_.af), h, W(im_.head), h, 0.0f,
                               F(l_.logits), false, v));
    return Kernel(gpt_gpu::CrossEntropy(F(l_.logits), Ids(l_.targets), F(l_.row_loss),
                                        train ? T(l_.dlogits) : nullptr, grad_scale,
                                        reinterpret_cast<int*>(im_.at(l_.bad)), b, s, v, bf, st),
                  "CrossEntropy");
  }

  absl::Status Backward() {
    const int64_t b = o_.micro_batch, s = c_.seq_len, h = c_.hidden, f = c_.ffn_size(),
                  v = c_.vocab, heads = c_.heads, d = c_.head_dim();
    const int64_t rows = s * b, bh = b * heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const bool bf = o_.bf16;
    cudaStream_t st = im_.stream.get();
    float* partial = F(l_.partial);
    // The residual stream's gradient, f32, and as an operand (the same memory in f32).
    float* dres = F(l_.dres);
    void* dres_t = bf ? T(l_.dres_t) : static_cast<void*>(dres);
    void* dres_copy = bf ? T(l_.dres_t) : nullptr;
    LOOM_RETURN_IF_ERROR(gemm_(true, false, v, h, rows, 1.0f, T(l_.dlogits), v, T(l_.af), h, 1.0f,
                               G(im_.head), false, h));
    LOOM_RETURN_IF_ERROR(gemm_(false, false, rows, h, v, 1.0f, T(l_.dlogits), v, W(im_.head), h,
                               0.0f, F(l_.da), false, h));
    LOOM_RETURN_IF_ERROR(LayerNormBack(l_.x_final, im_.final_gamma, im_.final_beta, l_.meanf,
                                       l_.rstdf, /*residual=*/nullptr, dres, dres_copy, rows, h));
    for (int64_t i = c_.layers - 1; i >= 0; --i) {
      const LayerBuffers& lb = l_.layers[i];
      const BlockParams& bp = im_.blocks[i];
      // MLP: y = x1 + proj(gelu(fc(ln2(x1)))).
      LOOM_RETURN_IF_ERROR(Kernel(gpt_gpu::ColumnSumAdd(dres, false, G(bp.projb), partial, rows, h,
                                                        st),
                                  "ColumnSumAdd"));
      LOOM_RETURN_IF_ERROR(gemm_(true, false, h, f, rows, 1.0f, dres_t, h, T(lb.g), f, 1.0f,
                                 G(bp.projw), false, f));
      LOOM_RETURN_IF_ERROR(gemm_(false, false, rows, f, h, 1.0f, dres_t, h, W(bp.projw), f, 0.0f,
                                 T(l_.dg), true, f));
      LOOM_RETURN_IF_ERROR(Kernel(gpt_gpu::GeluBackwardBiasGrad(T(lb.pre), T(l_.dg), T(l_.dpre),
                                                                G(bp.fcb), partial, rows, f, bf,
                                                                st),
                                  "GeluBackwardBiasGrad"));
      LOOM_RETURN_IF_ERROR(gemm_(true, false, f, h, rows, 1.0f, T(l_.dpre), f, T(lb.a2), h, 1.0f,
                                 G(bp.fcw), false, h));
      LOOM_RETURN_IF_ERROR(gemm_(false, false, rows, h, f, 1.0f, T(l_.dpre), f, W(bp.fcw), h, 0.0f,
                                 F(l_.da), false, h));
      LOOM_RETURN_IF_ERROR(
          LayerNormBack(lb.x1, bp.ln2g, bp.ln2b, lb.mean2, lb.rstd2, dres, dres, dres_copy, rows, h));
      // Attention: x1 = x0 + out(attend(split(qkv(ln1(x0))))).
      LOOM_RETURN_IF_ERROR(Kernel(gpt_gpu::ColumnSumAdd(dres, false, G(bp.outb), partial, rows, h,
                                                        st),
                                  "ColumnSumAdd"));
      LOOM_RETURN_IF_ERROR(gemm_(true, false, h, h, rows, 1.0f, dres_t, h, T(lb.ctx), h, 1.0f,
                                 G(bp.outw), false, h));
      LOOM_RETURN_IF_ERROR(gemm_(false, false, rows, h, h, 1.0f, dres_t, h, W(bp.outw), h, 0.0f,
                                 T(l_.dctx), true, h));
      if (flash_) {
        // dctx in its [s, b, h] rows; dq, dk, dv straight into dqkv's [s, b, 3h] rows.
        LOOM_RETURN_IF_ERROR(Kernel(gpt_gpu::AttentionDelta(T(lb.ctx), T(l_.dctx), F(l_.delta), s,
                                                            b, heads, d, st),
                                    "AttentionDelta"));
        std::byte* dqkv = im_.at(l_.dqkv);
        const gpt_gpu::AttentionStrides qkv_rows = gpt_gpu::RowLayout(b, 3 * h, d);
        LOOM_RETURN_IF_ERROR(Kernel(
            gpt_gpu::FlashBackward(T(lb.q), T(lb.k), T(lb.v), qkv_rows, T(l_.dctx),
                                   gpt_gpu::RowLayout(b, h, d), F(lb.p), F(l_.delta), dqkv,
                                   dqkv + h * 2, dqkv + 2 * h * 2, qkv_rows, F(l_.dq_accum), b,
                                   heads, s, d, scale, st),
            "FlashBackward"));
      } else {
        LOOM_RETURN_IF_ERROR(Kernel(gpt_gpu::PermuteHeads(T(l_.dctx), T(l_.dctx_h),
                                                          /*to_heads=*/true, s, b, heads, d, bf,
                                                          st),
                                    "PermuteHeads"));
        LOOM_RETURN_IF_ERROR(gemm_(true, false, s, d, s, 1.0f, T(lb.p), s, T(l_.dctx_h), d, 0.0f,
                                   T(l_.dv), true, d, bh, s * s, s * d, s * d));
        LOOM_RETURN_IF_ERROR(gemm_(false, true, s, s, d, 1.0f, T(l_.dctx_h), d, T(lb.v), d, 0.0f,
                                   T(l_.dp), true, s, bh, s * d, s * d, s * s));
        LOOM_RETURN_IF_ERROR(Kernel(
            gpt_gpu::CausalSoftmaxBackward(T(lb.p), T(l_.dp), bh * s, s, scale, bf, st),
            "CausalSoftmaxBackward"));
        LOOM_RETURN_IF_ERROR(gemm_(false, false, s, d, s, 1.0f, T(l_.dp), s, T(lb.k), d, 0.0f,
                                   T(l_.dq), true, d, bh, s * s, s * d, s * d));
        LOOM_RETURN_IF_ERROR(gemm_(true, false, s, d, s, 1.0f, T(l_.dp), s, T(lb.q), d, 0.0f,
                                   T(l_.dk), true, d, bh, s * s, s * d, s * d));
        LOOM_RETURN_IF_ERROR(Kernel(gpt_gpu::MergeQkv(T(l_.dq), T(l_.dk), T(l_.dv), T(l_.dqkv), s,
                                                      b, heads, d, bf, st),
                                    "MergeQkv"));
      }
      LOOM_RETURN_IF_ERROR(Kernel(
          gpt_gpu::ColumnSumAdd(T(l_.dqkv), bf, G(bp.qkvb), partial, rows, 3 * h, st),
          "ColumnSumAdd"));
      LOOM_RETURN_IF_ERROR(gemm_(true, false, 3 * h, h, rows, 1.0f, T(l_.dqkv), 3 * h, T(lb.a1), h,
                                 1.0f, G(bp.qkvw), false, h));
      LOOM_RETURN_IF_ERROR(gemm_(false, false, rows, h, 3 * h, 1.0f, T(l_.dqkv), 3 * h,
                                 W(bp.qkvw), h, 0.0f, F(l_.da), false, h));
      LOOM_RETURN_IF_ERROR(
          LayerNormBack(lb.x0, bp.ln1g, bp.ln1b, lb.mean1, lb.rstd1, dres, dres, dres_copy, rows, h));
    }
    return Kernel(gpt_gpu::EmbedBackward(dres, Ids(l_.tokens), G(im_.token), G(im_.position), b, s,
                                         h, st),
                  "EmbedBackward");
  }

  // *accumulator(index) += weight * mean of the rows' losses.
  absl::Status AddLoss(int index, double weight) {
    const int64_t rows = c_.seq_len * o_.micro_batch;
    return Kernel(gpt_gpu::SumInto(F(l_.row_loss), rows, weight / static_cast<double>(rows),
                                   Double(index), im_.stream.get()),
                  "SumInto");
  }

  double* Double(int index) const { return reinterpret_cast<double*>(im_.at(l_.doubles)) + index; }

 private:
  // LayerNorm's backward (da is the output's gradient): dx = residual + input
  // gradient (and its operand copy), parameter gradients added.
  absl::Status LayerNormBack(int64_t x, int gamma, int beta, int64_t mean, int64_t rstd,
                             const float* residual, float* dx, void* dx_copy, int64_t rows,
                             int64_t n) {
    cudaStream_t st = im_.stream.get();
    // The parameter gradients first: they read da before nothing else writes it.
    LOOM_RETURN_IF_ERROR(Kernel(gpt_gpu::LayerNormParamGrads(F(x), F(mean), F(rstd), F(l_.da),
                                                             G(gamma), G(beta), F(l_.partial), rows,
                                                             n, st),
                                "LayerNormParamGrads"));
    return Kernel(gpt_gpu::LayerNormBackward(F(x), P(gamma), F(mean), F(rstd), F(l_.da), residual,
                                             dx, dx_copy, rows, n, o_.bf16, st),
                  "LayerNormBackward");
  }

  float* F(int64_t offset) const { return im_.F(offset); }
  void* T(int64_t offset) const { return im_.T(offset); }
  const int32_t* Ids(int64_t offset) const {
    return reinterpret_cast<const int32_t*>(im_.at(offset));
  }
  float* P(int p) const { return F(l_.params) + params_[p].offset; }
  float* G(int p) const { return F(l_.grads) + params_[p].offset; }
  // A weight as a product reads it: the bf16 copy, or the f32 values.
  const void* W(int p) const {
    return o_.bf16 ? static_cast<const void*>(im_.at(l_.half + params_[p].offset * 2))
                   : static_cast<const void*>(P(p));
  }

  const GptConfig& c_;
  const DeviceGptOptions& o_;
  const std::vector<DeviceParameter>& params_;
  DeviceGptModel::Impl& im_;
  const Layout& l_;
  Gemmer gemm_;
  bool flash_;
};

absl::Status DeviceGptModel::ForwardBackward(const GptBatch& batch, float loss_weight) {
  LOOM_RETURN_IF_ERROR(CheckBatch(config_, options_, batch));
  if (!std::isfinite(loss_weight)) {
    return absl::InvalidArgumentError(
        absl::StrCat("DeviceGptModel::ForwardBackward: loss_weight ", loss_weight));
  }
  DeviceGptPass pass(config_, options_, params_, *impl_);
  LOOM_RETURN_IF_ERROR(pass.Upload(batch));
  const float rows = static_cast<float>(config_.seq_len * options_.micro_batch);
  LOOM_RETURN_IF_ERROR(pass.Forward(/*train=*/true, loss_weight / rows));
  LOOM_RETURN_IF_ERROR(pass.AddLoss(0, loss_weight));
  return pass.Backward();
}

namespace {

absl::StatusOr<double> ReadDouble(DeviceGptModel::Impl& im, const double* device,
                                  absl::Duration timeout) {
  double* host = reinterpret_cast<double*>(im.pinned.data() + im.pinned.size() - 3 * 8);
  LOOM_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(host, device, 8, cudaMemcpyDeviceToHost, im.stream.get()));
  LOOM_RETURN_IF_ERROR(im.stream.Synchronize(absl::Now() + timeout));
  return *host;
}

}  // namespace

absl::StatusOr<double> DeviceGptModel::ForwardLoss(const GptBatch& batch) {
  LOOM_RETURN_IF_ERROR(CheckBatch(config_, options_, batch));
  DeviceGptPass pass(config_, options_, params_, *impl_);
  LOOM_RETURN_IF_ERROR(pass.Upload(batch));
  LOOM_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(pass.Double(1), 0, 8, impl_->stream.get()));
  LOOM_RETURN_IF_ERROR(pass.Forward(/*train=*/false, 0.0f));
  LOOM_RETURN_IF_ERROR(pass.AddLoss(1, 1.0));
  return ReadDouble(*impl_, pass.Double(1), options_.timeout);
}

absl::StatusOr<double> DeviceGptModel::TakeLoss() {
  DeviceGptPass pass(config_, options_, params_, *impl_);
  return ReadDouble(*impl_, pass.Double(0), options_.timeout);
}

absl::StatusOr<double> DeviceGptModel::GradSquaredNorm() {
  DeviceGptPass pass(config_, options_, params_, *impl_);
  const Layout& l = impl_->layout;
  LOOM_RETURN_IF_ERROR(Kernel(gpt_gpu::SumSquares(impl_->F(l.grads), l.flat,
                                                  reinterpret_cast<double*>(impl_->at(l.squares)),
                                                  pass.Double(2), impl_->stream.get()),
                              "SumSquares"));
  return ReadDouble(*impl_, pass.Double(2), options_.timeout);
}

absl::Status DeviceGptModel::Step(const AdamWHyper& hyper) {
  const Layout& l = impl_->layout;
  const size_t n = static_cast<size_t>(l.flat);
  GpuAdamWTensors t{absl::MakeSpan(impl_->F(l.params), n),
                    absl::MakeConstSpan(impl_->F(l.grads), n), absl::MakeSpan(impl_->F(l.m), n),
                    absl::MakeSpan(impl_->F(l.v), n)};
  HalfCopy half;
  if (options_.bf16) {
    half = HalfCopy(absl::MakeSpan(reinterpret_cast<BFloat16*>(impl_->at(l.half)), n));
  }
  return GpuAdamWStep(hyper, t, impl_->stream, half);
}

}  // namespace loom
