// The kernels of flash_attention_kernels.h. One block of 4 warps per 64-row tile and
// (sequence, head); each warp owns 16 rows. The products run on WMMA fragments
// (bf16 in, f32 accumulators); the softmax reads the scores through shared memory,
// two lanes per row, so nothing depends on the accumulators' register layout.
#include "models/gpt/gpu/flash_attention_kernels.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>

namespace loom {
namespace gpt_gpu {
namespace {

using Bf16 = __nv_bfloat16;
namespace wmma = nvcuda::wmma;

constexpr int kTile = 64;
constexpr int kThreads = 128;  // 4 warps x 16 rows
constexpr int kScoreLd = kTile + 4;  // f32 scores, per warp [16][kScoreLd]
constexpr int kProbLd = kTile + 8;   // bf16 probabilities [rows][kProbLd]

using AccFrag = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
using RowA = wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf16, wmma::row_major>;
using ColA = wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf16, wmma::col_major>;
using RowB = wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf16, wmma::row_major>;
using ColB = wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf16, wmma::col_major>;

constexpr int Align(int bytes) { return (bytes + 127) / 128 * 128; }

template <int D>
struct ForwardLayout {
  static constexpr int kLd = D + 8;   // bf16 tiles [64][kLd]
  static constexpr int kOLd = D + 4;  // f32 output accumulator, per warp [16][kOLd]
  static constexpr int kTileBytes = Align(kTile * kLd * 2);
  static constexpr int kQ = 0, kK = kQ + kTileBytes, kV = kK + kTileBytes;
  static constexpr int kS = kV + kTileBytes;
  static constexpr int kP = kS + Align(4 * 16 * kScoreLd * 4);
  static constexpr int kO = kP + Align(4 * 16 * kProbLd * 2);
  static constexpr int kBytes = kO + Align(4 * 16 * kOLd * 4);
};

template <int D>
struct BackwardLayout {
  static constexpr int kLd = D + 8;
  static constexpr int kQLd = D + 4;  // f32 scratch per warp [16][kQLd]
  static constexpr int kTileBytes = Align(kTile * kLd * 2);
  static constexpr int kK = 0, kV = kK + kTileBytes, kQ = kV + kTileBytes,
                       kDo = kQ + kTileBytes;
  static constexpr int kP = kDo + kTileBytes;
  static constexpr int kDs = kP + Align(kTile * kProbLd * 2);
  static constexpr int kS = kDs + Align(kTile * kProbLd * 2);
  static constexpr int kDp = kS + Align(4 * 16 * kScoreLd * 4);
  static constexpr int kDq = kDp + Align(4 * 16 * kScoreLd * 4);
  static constexpr int kLse = kDq + Align(4 * 16 * kQLd * 4);
  static constexpr int kDelta = kLse + Align(kTile * 4);
  static constexpr int kBytes = kDelta + Align(kTile * 4);
};

// Rows [row0, row0 + 64) of a [s, D] bf16 matrix into shared [64][ld], zeros past s.
template <int D>
__device__ void LoadTile(const Bf16* m, int row0, int s, Bf16* tile, int ld) {
  constexpr int kVectors = D / 8;  // 16-byte vectors per row
  for (int i = threadIdx.x; i < kTile * kVectors; i += kThreads) {
    const int r = i / kVectors, c = (i % kVectors) * 8;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (row0 + r < s) value = *reinterpret_cast<const uint4*>(m + static_cast<int64_t>(row0 + r) * D + c);
    *reinterpret_cast<uint4*>(tile + r * ld + c) = value;
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    FlashForwardKernel(const Bf16* q, const Bf16* k, const Bf16* v, Bf16* out, float* lse, int s,
                       float scale) {
  using L = ForwardLayout<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  Bf16* qs = reinterpret_cast<Bf16*>(smem + L::kQ);
  Bf16* ks = reinterpret_cast<Bf16*>(smem + L::kK);
  Bf16* vs = reinterpret_cast<Bf16*>(smem + L::kV);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* sw = reinterpret_cast<float*>(smem + L::kS) + warp * 16 * kScoreLd;
  Bf16* pw = reinterpret_cast<Bf16*>(smem + L::kP) + warp * 16 * kProbLd;
  float* ow = reinterpret_cast<float*>(smem + L::kO) + warp * 16 * L::kOLd;
  const int64_t bh = blockIdx.y;
  const int qt = blockIdx.x, q0 = qt * kTile;
  const int64_t base = bh * s * D;
  LoadTile<D>(q + base, q0, s, qs, L::kLd);
  for (int i = lane; i < 16 * L::kOLd; i += 32) ow[i] = 0.0f;
  const int r = lane >> 1, half = lane & 1;  // this lane's row, and half of its columns
  const int qi = q0 + warp * 16 + r;
  float m = -INFINITY, l = 0.0f;
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();  // the previous tile's K and V are no longer read
    LoadTile<D>(k + base, k0, s, ks, L::kLd);
    LoadTile<D>(v + base, k0, s, vs, L::kLd);
    __syncthreads();
    AccFrag sf[4];
    for (int n = 0; n < 4; ++n) wmma::fill_fragment(sf[n], 0.0f);
    for (int kk = 0; kk < D / 16; ++kk) {
      RowA a;
      wmma::load_matrix_sync(a, qs + warp * 16 * L::kLd + kk * 16, L::kLd);
      for (int n = 0; n < 4; ++n) {
        ColB b;  // K^T: element (kk, n) at ks[n][kk]
        wmma::load_matrix_sync(b, ks + n * 16 * L::kLd + kk * 16, L::kLd);
        wmma::mma_sync(sf[n], a, b, sf[n]);
      }
    }
    for (int n = 0; n < 4; ++n) {
      wmma::store_matrix_sync(sw + n * 16, sf[n], kScoreLd, wmma::mem_row_major);
    }
    __syncwarp();
    float tile_max = -INFINITY;
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const int kj = k0 + c;
      if (kj <= qi && kj < s) tile_max = fmaxf(tile_max, sw[r * kScoreLd + c] * scale);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);
    const float alpha = m_new == -INFINITY ? 1.0f : expf(m - m_new);
    float sum = 0.0f;
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const int kj = k0 + c;
      const bool valid = kj <= qi && kj < s && m_new != -INFINITY;
      const float p = valid ? expf(sw[r * kScoreLd + c] * scale - m_new) : 0.0f;
      pw[r * kProbLd + c] = __float2bfloat16_rn(p);
      sum += p;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * alpha + sum;
    m = m_new;
    for (int c = half * (D / 2); c < half * (D / 2) + D / 2; ++c) ow[r * L::kOLd + c] *= alpha;
    __syncwarp();
    AccFrag of[D / 16];
    for (int n = 0; n < D / 16; ++n) {
      wmma::load_matrix_sync(of[n], ow + n * 16, L::kOLd, wmma::mem_row_major);
    }
    for (int kk = 0; kk < 4; ++kk) {
      RowA a;
      wmma::load_matrix_sync(a, pw + kk * 16, kProbLd);
      for (int n = 0; n < D / 16; ++n) {
        RowB b;
        wmma::load_matrix_sync(b, vs + kk * 16 * L::kLd + n * 16, L::kLd);
        wmma::mma_sync(of[n], a, b, of[n]);
      }
    }
    for (int n = 0; n < D / 16; ++n) {
      wmma::store_matrix_sync(ow + n * 16, of[n], L::kOLd, wmma::mem_row_major);
    }
    __syncwarp();
  }
  if (qi < s) {
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    for (int c = half * (D / 2); c < half * (D / 2) + D / 2; ++c) {
      out[base + static_cast<int64_t>(qi) * D + c] = __float2bfloat16_rn(ow[r * L::kOLd + c] * inv);
    }
    if (half == 0) lse[bh * s + qi] = m + logf(l);
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    FlashBackwardKernel(const Bf16* q, const Bf16* k, const Bf16* v, const Bf16* dout,
                        const float* lse, const float* delta, Bf16* dk, Bf16* dv, float* dq_accum,
                        int s, float scale) {
  using L = BackwardLayout<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  Bf16* ks = reinterpret_cast<Bf16*>(smem + L::kK);
  Bf16* vs = reinterpret_cast<Bf16*>(smem + L::kV);
  Bf16* qs = reinterpret_cast<Bf16*>(smem + L::kQ);
  Bf16* dos = reinterpret_cast<Bf16*>(smem + L::kDo);
  Bf16* p_all = reinterpret_cast<Bf16*>(smem + L::kP);
  Bf16* ds_all = reinterpret_cast<Bf16*>(smem + L::kDs);
  float* lse_s = reinterpret_cast<float*>(smem + L::kLse);
  float* delta_s = reinterpret_cast<float*>(smem + L::kDelta);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* sw = reinterpret_cast<float*>(smem + L::kS) + warp * 16 * kScoreLd;
  float* dpw = reinterpret_cast<float*>(smem + L::kDp) + warp * 16 * kScoreLd;
  float* scratch = reinterpret_cast<float*>(smem + L::kDq) + warp * 16 * L::kQLd;
  const int64_t bh = blockIdx.y;
  const int kt = blockIdx.x, k0 = kt * kTile;
  const int64_t base = bh * s * D;
  const int tiles = (s + kTile - 1) / kTile;
  LoadTile<D>(k + base, k0, s, ks, L::kLd);
  LoadTile<D>(v + base, k0, s, vs, L::kLd);
  AccFrag dk_acc[D / 16], dv_acc[D / 16];
  for (int n = 0; n < D / 16; ++n) {
    wmma::fill_fragment(dk_acc[n], 0.0f);
    wmma::fill_fragment(dv_acc[n], 0.0f);
  }
  const int r = lane >> 1, half = lane & 1;
  for (int qt = kt; qt < tiles; ++qt) {
    const int q0 = qt * kTile;
    __syncthreads();  // the previous query tile is no longer read
    LoadTile<D>(q + base, q0, s, qs, L::kLd);
    LoadTile<D>(dout + base, q0, s, dos, L::kLd);
    for (int i = threadIdx.x; i < kTile; i += kThreads) {
      const int row = q0 + i;
      lse_s[i] = row < s ? lse[bh * s + row] : 0.0f;
      delta_s[i] = row < s ? delta[bh * s + row] : 0.0f;
    }
    __syncthreads();
    // The warp's 16 query rows: S = Q K^T, dP = dO V^T.
    {
      AccFrag sf[4], dpf[4];
      for (int n = 0; n < 4; ++n) {
        wmma::fill_fragment(sf[n], 0.0f);
        wmma::fill_fragment(dpf[n], 0.0f);
      }
      for (int kk = 0; kk < D / 16; ++kk) {
        RowA aq, ado;
        wmma::load_matrix_sync(aq, qs + warp * 16 * L::kLd + kk * 16, L::kLd);
        wmma::load_matrix_sync(ado, dos + warp * 16 * L::kLd + kk * 16, L::kLd);
        for (int n = 0; n < 4; ++n) {
          ColB bk, bv;
          wmma::load_matrix_sync(bk, ks + n * 16 * L::kLd + kk * 16, L::kLd);
          wmma::load_matrix_sync(bv, vs + n * 16 * L::kLd + kk * 16, L::kLd);
          wmma::mma_sync(sf[n], aq, bk, sf[n]);
          wmma::mma_sync(dpf[n], ado, bv, dpf[n]);
        }
      }
      for (int n = 0; n < 4; ++n) {
        wmma::store_matrix_sync(sw + n * 16, sf[n], kScoreLd, wmma::mem_row_major);
        wmma::store_matrix_sync(dpw + n * 16, dpf[n], kScoreLd, wmma::mem_row_major);
      }
    }
    __syncwarp();
    {
      const int row = warp * 16 + r, qi = q0 + row;
      const float row_lse = lse_s[row], row_delta = delta_s[row];
      for (int c = half * 32; c < half * 32 + 32; ++c) {
        const int kj = k0 + c;
        const bool valid = kj <= qi && qi < s && kj < s;
        const float p = valid ? expf(sw[r * kScoreLd + c] * scale - row_lse) : 0.0f;
        const float ds = valid ? p * (dpw[r * kScoreLd + c] - row_delta) * scale : 0.0f;
        p_all[row * kProbLd + c] = __float2bfloat16_rn(p);
        ds_all[row * kProbLd + c] = __float2bfloat16_rn(ds);
      }
    }
    __syncthreads();  // every row of P and dS is there
    // The warp's 16 keys: dV += P^T dO, dK += dS^T Q over the tile's 64 queries.
    for (int kk = 0; kk < 4; ++kk) {
      ColA ap, as;  // element (key i, query j) at p_all[j][i]
      wmma::load_matrix_sync(ap, p_all + kk * 16 * kProbLd + warp * 16, kProbLd);
      wmma::load_matrix_sync(as, ds_all + kk * 16 * kProbLd + warp * 16, kProbLd);
      for (int n = 0; n < D / 16; ++n) {
        RowB bdo, bq;
        wmma::load_matrix_sync(bdo, dos + kk * 16 * L::kLd + n * 16, L::kLd);
        wmma::load_matrix_sync(bq, qs + kk * 16 * L::kLd + n * 16, L::kLd);
        wmma::mma_sync(dv_acc[n], ap, bdo, dv_acc[n]);
        wmma::mma_sync(dk_acc[n], as, bq, dk_acc[n]);
      }
    }
    // The warp's 16 query rows: dQ += dS K, added into the f32 accumulator.
    {
      AccFrag dqf[D / 16];
      for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(dqf[n], 0.0f);
      for (int kk = 0; kk < 4; ++kk) {
        RowA a;
        wmma::load_matrix_sync(a, ds_all + warp * 16 * kProbLd + kk * 16, kProbLd);
        for (int n = 0; n < D / 16; ++n) {
          RowB b;
          wmma::load_matrix_sync(b, ks + kk * 16 * L::kLd + n * 16, L::kLd);
          wmma::mma_sync(dqf[n], a, b, dqf[n]);
        }
      }
      for (int n = 0; n < D / 16; ++n) {
        wmma::store_matrix_sync(scratch + n * 16, dqf[n], L::kQLd, wmma::mem_row_major);
      }
      __syncwarp();
      const int qi = q0 + warp * 16 + r;
      if (qi < s) {
        float* dst = dq_accum + base + static_cast<int64_t>(qi) * D;
        for (int c = half * (D / 2); c < half * (D / 2) + D / 2; ++c) {
          atomicAdd(dst + c, scratch[r * L::kQLd + c]);
        }
      }
      __syncwarp();
    }
  }
  // The warp's 16 keys' dK and dV, through the scratch (each array by name: taking
  // an accumulator array's address would move it to local memory).
  const int kj = k0 + warp * 16 + r;
  for (int n = 0; n < D / 16; ++n) {
    wmma::store_matrix_sync(scratch + n * 16, dk_acc[n], L::kQLd, wmma::mem_row_major);
  }
  __syncwarp();
  if (kj < s) {
    for (int c = half * (D / 2); c < half * (D / 2) + D / 2; ++c) {
      dk[base + static_cast<int64_t>(kj) * D + c] = __float2bfloat16_rn(scratch[r * L::kQLd + c]);
    }
  }
  __syncwarp();
  for (int n = 0; n < D / 16; ++n) {
    wmma::store_matrix_sync(scratch + n * 16, dv_acc[n], L::kQLd, wmma::mem_row_major);
  }
  __syncwarp();
  if (kj < s) {
    for (int c = half * (D / 2); c < half * (D / 2) + D / 2; ++c) {
      dv[base + static_cast<int64_t>(kj) * D + c] = __float2bfloat16_rn(scratch[r * L::kQLd + c]);
    }
  }
}

__global__ void AttentionDeltaKernel(const Bf16* ctx, const Bf16* dctx, float* delta, int64_t s,
                                     int64_t b, int64_t heads, int64_t d) {
  const int64_t rows = b * heads * s;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  // row = (bi * heads + j) * s + qi
  const int64_t qi = row % s, bj = row / s, j = bj % heads, bi = bj / heads;
  const int64_t at = (qi * b + bi) * heads * d + j * d;
  float sum = 0.0f;
  for (int64_t e = lane; e < d; e += 32) {
    sum += __bfloat162float(ctx[at + e]) * __bfloat162float(dctx[at + e]);
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) delta[row] = sum;
}

__global__ void ToBf16Kernel(const float* x, Bf16* y, int64_t count) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = __float2bfloat16_rn(x[i]);
  }
}

template <int D>
cudaError_t Forward(const void* q, const void* k, const void* v, void* out, float* lse, int64_t bh,
                    int64_t s, float scale, cudaStream_t stream) {
  using L = ForwardLayout<D>;
  cudaError_t e = cudaFuncSetAttribute(FlashForwardKernel<D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, L::kBytes);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((s + kTile - 1) / kTile), static_cast<unsigned>(bh));
  FlashForwardKernel<D><<<grid, kThreads, L::kBytes, stream>>>(
      static_cast<const Bf16*>(q), static_cast<const Bf16*>(k), static_cast<const Bf16*>(v),
      static_cast<Bf16*>(out), lse, static_cast<int>(s), scale);
  return cudaGetLastError();
}

template <int D>
cudaError_t Backward(const void* q, const void* k, const void* v, const void* dout,
                     const float* lse, const float* delta, void* dq, void* dk, void* dv,
                     float* dq_accum, int64_t bh, int64_t s, float scale, cudaStream_t stream) {
  using L = BackwardLayout<D>;
  const int64_t count = bh * s * D;
  cudaError_t e = cudaMemsetAsync(dq_accum, 0, static_cast<size_t>(count) * 4, stream);
  if (e != cudaSuccess) return e;
  e = cudaFuncSetAttribute(FlashBackwardKernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           L::kBytes);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((s + kTile - 1) / kTile), static_cast<unsigned>(bh));
  FlashBackwardKernel<D><<<grid, kThreads, L::kBytes, stream>>>(
      static_cast<const Bf16*>(q), static_cast<const Bf16*>(k), static_cast<const Bf16*>(v),
      static_cast<const Bf16*>(dout), lse, delta, static_cast<Bf16*>(dk), static_cast<Bf16*>(dv),
      dq_accum, static_cast<int>(s), scale);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  const int64_t blocks = (count + 255) / 256;
  ToBf16Kernel<<<static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8), 256, 0, stream>>>(
      dq_accum, static_cast<Bf16*>(dq), count);
  return cudaGetLastError();
}

}  // namespace

bool FlashSupported(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

cudaError_t FlashForward(const void* q, const void* k, const void* v, void* out, float* lse,
                         int64_t bh, int64_t s, int64_t d, float scale, cudaStream_t stream) {
  if (bh == 0 || s == 0) return cudaSuccess;
  if (d == 64) return Forward<64>(q, k, v, out, lse, bh, s, scale, stream);
  if (d == 128) return Forward<128>(q, k, v, out, lse, bh, s, scale, stream);
  return cudaErrorInvalidValue;
}

cudaError_t AttentionDelta(const void* ctx, const void* dctx, float* delta, int64_t s, int64_t b,
                           int64_t heads, int64_t d, cudaStream_t stream) {
  const int64_t rows = b * heads * s;
  if (rows == 0) return cudaSuccess;
  AttentionDeltaKernel<<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(
      static_cast<const Bf16*>(ctx), static_cast<const Bf16*>(dctx), delta, s, b, heads, d);
  return cudaGetLastError();
}

cudaError_t FlashBackward(const void* q, const void* k, const void* v, const void* dout,
                          const float* lse, const float* delta, void* dq, void* dk, void* dv,
                          float* dq_accum, int64_t bh, int64_t s, int64_t d, float scale,
                          cudaStream_t stream) {
  if (bh == 0 || s == 0) return cudaSuccess;
  if (d == 64) {
    return Backward<64>(q, k, v, dout, lse, delta, dq, dk, dv, dq_accum, bh, s, scale, stream);
  }
  if (d == 128) {
    return Backward<128>(q, k, v, dout, lse, delta, dq, dk, dv, dq_accum, bh, s, scale, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace gpt_gpu
}  // namespace loom
