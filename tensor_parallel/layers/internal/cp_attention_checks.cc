#include "tensor_parallel/layers/internal/cp_attention_checks.h"

#include <algorithm>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/status_macros.h"
#include "tensor_parallel/layers/flash_attention.h"
#include "tensor_parallel/layers/gemm.h"
#include "tensor_parallel/layers/ring_attention.h"

namespace loom {
namespace cp_attention_internal {
namespace {

std::string Shape(int64_t rows, int64_t cols) { return absl::StrCat("[", rows, ",", cols, "]"); }

// HeadNote: " (head 3)" in a call of several heads, "" in a one-head call.
std::string HeadNote(const CpCall& call, size_t head) {
  return call.heads > 1 ? absl::StrCat(" (head ", head, ")") : std::string();
}

template <typename View>
absl::Status CheckView(const View& view, int64_t rows, int64_t cols, const char* name,
                       const CpCall& call, size_t head) {
  const std::string who = absl::StrCat(call.op, ": ", name, HeadNote(call, head));
  if (view.rows != rows || view.cols != cols) {
    return absl::InvalidArgumentError(absl::StrCat(who, " is ", Shape(view.rows, view.cols),
                                                   " but rank ", call.rank, " of ", call.cp,
                                                   " holds ", Shape(rows, cols)));
  }
  return CheckMatrixLayout(view, who);
}

absl::Status CheckLse(size_t size, int64_t rows, const CpCall& call, size_t head) {
  if (static_cast<int64_t>(size) != rows) {
    return absl::InvalidArgumentError(absl::StrCat(call.op, ": lse", HeadNote(call, head), " has ",
                                                   size, " values but rank ", call.rank, " of ",
                                                   call.cp, " holds ", rows, " rows"));
  }
  return absl::OkStatus();
}

// CheckForward checks what Forward's and Backward's heads share.
template <typename Head>
absl::Status CheckForward(const Head& head, int64_t rows, int64_t d, const CpCall& call, size_t h) {
  LOOM_RETURN_IF_ERROR(CheckView(head.q, rows, d, "q", call, h));
  LOOM_RETURN_IF_ERROR(CheckView(head.k, rows, d, "k", call, h));
  LOOM_RETURN_IF_ERROR(CheckView(head.v, rows, d, "v", call, h));
  LOOM_RETURN_IF_ERROR(CheckView(head.out, rows, d, "out", call, h));
  return CheckLse(head.lse.size(), rows, call, h);
}

}  // namespace

absl::Status CheckHeads(absl::Span<const RingAttentionHead> heads, int64_t rows, int64_t d,
                        const CpCall& call) {
  for (size_t h = 0; h < heads.size(); ++h) {
    LOOM_RETURN_IF_ERROR(CheckForward(heads[h], rows, d, call, h));
  }
  return absl::OkStatus();
}

absl::Status CheckHeads(absl::Span<const RingAttentionHeadGrad> heads, int64_t rows, int64_t d,
                        const CpCall& call) {
  for (size_t h = 0; h < heads.size(); ++h) {
    const RingAttentionHeadGrad& head = heads[h];
    LOOM_RETURN_IF_ERROR(CheckForward(head, rows, d, call, h));
    LOOM_RETURN_IF_ERROR(CheckView(head.grad_out, rows, d, "grad_out", call, h));
    LOOM_RETURN_IF_ERROR(CheckView(head.grad_q, rows, d, "grad_q", call, h));
    LOOM_RETURN_IF_ERROR(CheckView(head.grad_k, rows, d, "grad_k", call, h));
    LOOM_RETURN_IF_ERROR(CheckView(head.grad_v, rows, d, "grad_v", call, h));
  }
  return absl::OkStatus();
}

FlashAttentionOptions FlashOptionsOf(const RingAttentionOptions& options) {
  FlashAttentionOptions flash;
  flash.causal = options.causal;
  flash.scale = options.scale;
  flash.tile_q = options.tile_q;
  flash.tile_k = options.tile_k;
  return flash;
}

std::vector<float>& Fit(std::vector<float>& buffer, size_t n) {
  if (buffer.size() < n) buffer.resize(n);
  return buffer;
}

void PackRows(ConstMatrixView m, float* dst) {
  for (int64_t i = 0; i < m.rows; ++i) {
    std::copy_n(m.data.data() + i * m.ld, m.cols, dst + i * m.cols);
  }
}

}  // namespace cp_attention_internal
}  // namespace loom
