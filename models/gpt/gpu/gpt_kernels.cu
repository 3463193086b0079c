// The kernels of gpt_kernels.h. Reductions run in a fixed order (warp shuffles, then
// per-warp partials in shared memory, then partial buffers summed in index order), so
// a run is repeatable on one device.
#include "models/gpt/gpu/gpt_kernels.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace loom {
namespace gpt_gpu {
namespace {

using Bf16 = __nv_bfloat16;

constexpr int kThreads = 256;
// Rows per partial of a column sum.
constexpr int64_t kRowChunk = 128;
// The layer norm's backward with its parameter gradients (LayerNormBackwardGradsKernel):
// 8 warps a block, each walking 4 consecutive rows, so a block's partial covers 32 rows.
constexpr int kGradsWarps = 8;
constexpr int kGradsRowsPerWarp = 4;
constexpr int64_t kGradsRows = kGradsWarps * kGradsRowsPerWarp;
constexpr int kSquareBlocks = 256;

__device__ __forceinline__ float ToF(float x) { return x; }
__device__ __forceinline__ float ToF(Bf16 x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T FromF(float x);
template <>
__device__ __forceinline__ float FromF<float>(float x) { return x; }
template <>
__device__ __forceinline__ Bf16 FromF<Bf16>(float x) { return __float2bfloat16_rn(x); }

__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ double WarpSumD(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block-wide sum / max (blockDim.x a multiple of 32, at most 1024); every thread gets
// the result. The leading barrier lets a block call these back to back.
__device__ float BlockSum(float v) {
  __shared__ float partial[32];
  v = WarpSum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  return WarpSum(lane < warps ? partial[lane] : 0.0f);
}
__device__ float BlockMax(float v) {
  __shared__ float partial[32];
  v = WarpMax(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  return WarpMax(lane < warps ? partial[lane] : -INFINITY);
}
__device__ double BlockSumD(double v) {
  __shared__ double partial[32];
  v = WarpSumD(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  return WarpSumD(lane < warps ? partial[lane] : 0.0);
}

// Threads for a block that walks a row of n: a multiple of 32, at most kThreads.
int RowThreads(int64_t n) {
  const int64_t t = (n + 31) / 32 * 32;
  return static_cast<int>(std::max<int64_t>(32, std::min<int64_t>(kThreads, t)));
}
// Blocks for a grid-stride loop over `count` elements.
unsigned GridFor(int64_t count) {
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, 65535LL * 8)));
}
#define LOOM_GRID_STRIDE(i, count)                                                   \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (count); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// The same loop with index type I: element-wise kernels index in 32 bits wherever the
// count allows (Fits32), since 64-bit division and remainder are long instruction
// sequences on the GPU and these kernels compute several per element.
#define LOOM_GRID_STRIDE_T(I, i, count)                                                \
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < static_cast<I>(count); \
       i += static_cast<I>(gridDim.x) * blockDim.x)
bool Fits32(int64_t count) { return count < (int64_t{1} << 31); }

cudaError_t Launched() { return cudaGetLastError(); }

// --- Embeddings --------------------------------------------------------------------

template <typename I>
__global__ void EmbedForwardKernel(const int32_t* tokens, const float* token,
                                   const float* position, float* x, I b, I s, I h) {
  LOOM_GRID_STRIDE_T(I, i, s * b * h) {
    const I r = i / h, c = i % h, si = r / b, bi = r % b;
    const int64_t t = tokens[bi * s + si];
    x[i] = token[t * h + c] + position[si * h + c];
  }
}

__global__ void PositionGradKernel(const float* dx, float* dposition, int64_t b, int64_t s,
                                   int64_t h) {
  LOOM_GRID_STRIDE(i, s * h) {
    const int64_t si = i / h, c = i % h;
    float sum = 0.0f;
    for (int64_t bi = 0; bi < b; ++bi) sum += dx[(si * b + bi) * h + c];
    dposition[i] += sum;
  }
}

template <typename I>
__global__ void TokenGradKernel(const float* dx, const int32_t* tokens, float* dtoken, I b, I s,
                                I h) {
  LOOM_GRID_STRIDE_T(I, i, s * b * h) {
    const I r = i / h, c = i % h, si = r / b, bi = r % b;
    atomicAdd(&dtoken[static_cast<int64_t>(tokens[bi * s + si]) * h + c], dx[i]);
  }
}

// --- Layer norm --------------------------------------------------------------------

template <typename T>
__global__ void LayerNormForwardKernel(const float* x, const float* gamma, const float* beta,
                                       float eps, T* y, float* mean, float* rstd, int64_t n) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * n;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sum += xr[j];
  const float mu = BlockSum(sum) / static_cast<float>(n);
  float sq = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float d = xr[j] - mu;
    sq += d * d;
  }
  const float var = BlockSum(sq) / static_cast<float>(n);
  const float rs = 1.0f / sqrtf(var + eps);
  T* yr = y + row * n;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    yr[j] = FromF<T>((xr[j] - mu) * rs * gamma[j] + beta[j]);
  }
  if (threadIdx.x == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// A warp per row for rows of n = 4 * n4 <= 128 * kMaxVec floats: the row stays in
// registers between its two reductions and its output (the block-per-row kernel above
// walks it three times and waits on two block-wide barriers).
__device__ __forceinline__ void StoreNormalized4(float* y, const float (&v)[4]) {
  *reinterpret_cast<float4*>(y) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void StoreNormalized4(Bf16* y, const float (&v)[4]) {
  __nv_bfloat162 pairs[2] = {__floats2bfloat162_rn(v[0], v[1]), __floats2bfloat162_rn(v[2], v[3])};
  *reinterpret_cast<uint2*>(y) = *reinterpret_cast<const uint2*>(pairs);
}
// With kAdd, the row normalized is first made as BiasResidual makes it, x + add + bias
// (in that order), and written to sum_out (which may alias x or add: each lane reads
// its elements before it writes them): the residual add and the norm after it read
// the stream once.
template <typename T, int kMaxVec, bool kAdd = false>
__global__ void LayerNormForwardWarpKernel(const float* x, const float* gamma, const float* beta,
                                           float eps, T* y, float* mean, float* rstd,
                                           int64_t rows, int n4, const float* add = nullptr,
                                           const float* add_bias = nullptr,
                                           float* sum_out = nullptr) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const float4* xr = reinterpret_cast<const float4*>(x + row * n4 * 4);
  float4 v[kMaxVec];
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxVec; ++k) {
    const int j = lane + 32 * k;
    v[k] = j < n4 ? xr[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (kAdd && j < n4) {
      const float4 a = reinterpret_cast<const float4*>(add + row * n4 * 4)[j];
      const float4 b = reinterpret_cast<const float4*>(add_bias)[j];
      v[k] = make_float4(v[k].x + a.x + b.x, v[k].y + a.y + b.y, v[k].z + a.z + b.z,
                         v[k].w + a.w + b.w);
      reinterpret_cast<float4*>(sum_out + row * n4 * 4)[j] = v[k];
    }
    sum += (v[k].x + v[k].y) + (v[k].z + v[k].w);
  }
  const float n = static_cast<float>(n4 * 4);
  const float mu = WarpSum(sum) / n;
  float sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxVec; ++k) {
    if (lane + 32 * k < n4) {
      const float a = v[k].x - mu, b = v[k].y - mu, c = v[k].z - mu, d = v[k].w - mu;
      sq += (a * a + b * b) + (c * c + d * d);
    }
  }
  const float rs = 1.0f / sqrtf(WarpSum(sq) / n + eps);
  const float4* g4 = reinterpret_cast<const float4*>(gamma);
  const float4* b4 = reinterpret_cast<const float4*>(beta);
#pragma unroll
  for (int k = 0; k < kMaxVec; ++k) {
    const int j = lane + 32 * k;
    if (j < n4) {
      const float4 g = g4[j], b = b4[j];
      const float out[4] = {(v[k].x - mu) * rs * g.x + b.x, (v[k].y - mu) * rs * g.y + b.y,
                            (v[k].z - mu) * rs * g.z + b.z, (v[k].w - mu) * rs * g.w + b.w};
      StoreNormalized4(y + row * n4 * 4 + j * 4, out);
    }
  }
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

template <typename T>
__global__ void LayerNormBackwardKernel(const float* x, const float* gamma, const float* mean,
                                        const float* rstd, const float* dy, const float* residual,
                                        float* dx, T* dx_operand, int64_t n) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * n;
  const float* dyr = dy + row * n;
  const float mu = mean[row], rs = rstd[row];
  float sg = 0.0f, sgx = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float g = dyr[j] * gamma[j];
    sg += g;
    sgx += g * (xr[j] - mu) * rs;
  }
  const float mg = BlockSum(sg) / static_cast<float>(n);
  const float mgx = BlockSum(sgx) / static_cast<float>(n);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float g = dyr[j] * gamma[j];
    const float xhat = (xr[j] - mu) * rs;
    float v = rs * (g - mg - xhat * mgx);
    if (residual != nullptr) v += residual[row * n + j];
    dx[row * n + j] = v;
    if (dx_operand != nullptr) dx_operand[row * n + j] = FromF<T>(v);
  }
}

// One row of LayerNormBackwardKernel by one warp (n = 4 * n4 <= 128 * kMaxVec; lane l
// holds columns 4 (l + 32 k) .. + 3): dy * gamma and xhat stay in registers between
// the two sums and the output, so x and dy are read once. residual may alias dx: each
// lane reads its elements before it writes them. With kGather the lane also adds its
// columns' dy * xhat, dy and dx (as written) into sum_dyx, sum_dy and sum_dx.
template <typename T, int kMaxVec, bool kGather>
__device__ __forceinline__ void LayerNormBackwardRow(
    const float* x, const float* gamma, float mu, float rs, const float* dy,
    const float* residual, float* dx, T* dx_operand, int64_t at, int n4,
    float4 (&sum_dyx)[kMaxVec], float4 (&sum_dy)[kMaxVec], float4 (&sum_dx)[kMaxVec]) {
  const int lane = threadIdx.x & 31;
  const float4* xr = reinterpret_cast<const float4*>(x + at);
  const float4* dyr = reinterpret_cast<const float4*>(dy + at);
  const float4* g4 = reinterpret_cast<const float4*>(gamma);
  float4 g[kMaxVec], xh[kMaxVec];
  float sg = 0.0f, sgx = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxVec; ++k) {
    const int j = lane + 32 * k;
    if (j < n4) {
      const float4 d = dyr[j], gm = g4[j], xv = xr[j];
      g[k] = make_float4(d.x * gm.x, d.y * gm.y, d.z * gm.z, d.w * gm.w);
      xh[k] = make_float4((xv.x - mu) * rs, (xv.y - mu) * rs, (xv.z - mu) * rs, (xv.w - mu) * rs);
      sg += (g[k].x + g[k].y) + (g[k].z + g[k].w);
      sgx += (g[k].x * xh[k].x + g[k].y * xh[k].y) + (g[k].z * xh[k].z + g[k].w * xh[k].w);
      if (kGather) {
        sum_dyx[k].x += d.x * xh[k].x;
        sum_dyx[k].y += d.y * xh[k].y;
        sum_dyx[k].z += d.z * xh[k].z;
        sum_dyx[k].w += d.w * xh[k].w;
        sum_dy[k].x += d.x;
        sum_dy[k].y += d.y;
        sum_dy[k].z += d.z;
        sum_dy[k].w += d.w;
      }
    }
  }
  const float n = static_cast<float>(n4 * 4);
  const float mg = WarpSum(sg) / n, mgx = WarpSum(sgx) / n;
#pragma unroll
  for (int k = 0; k < kMaxVec; ++k) {
    const int j = lane + 32 * k;
    if (j < n4) {
      float out[4] = {rs * (g[k].x - mg - xh[k].x * mgx), rs * (g[k].y - mg - xh[k].y * mgx),
                      rs * (g[k].z - mg - xh[k].z * mgx), rs * (g[k].w - mg - xh[k].w * mgx)};
      if (residual != nullptr) {
        const float4 r = reinterpret_cast<const float4*>(residual + at)[j];
        out[0] += r.x;
        out[1] += r.y;
        out[2] += r.z;
        out[3] += r.w;
      }
      StoreNormalized4(dx + at + 4 * j, out);
      if (dx_operand != nullptr) StoreNormalized4(dx_operand + at + 4 * j, out);
      if (kGather) {
        sum_dx[k].x += out[0];
        sum_dx[k].y += out[1];
        sum_dx[k].z += out[2];
        sum_dx[k].w += out[3];
      }
    }
  }
}

// LayerNormBackwardKernel with a warp a row (LayerNormBackwardRow).
template <typename T, int kMaxVec>
__global__ void LayerNormBackwardWarpKernel(const float* x, const float* gamma, const float* mean,
                                            const float* rstd, const float* dy,
                                            const float* residual, float* dx, T* dx_operand,
                                            int64_t rows, int n4) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  float4 unused[kMaxVec];  // no sums gathered
  LayerNormBackwardRow<T, kMaxVec, false>(x, gamma, mean[row], rstd[row], dy, residual, dx,
                                          dx_operand, row * n4 * 4, n4, unused, unused, unused);
}

// Column partial sums over chunks of kRowChunk rows: block (32, 8) covers 32 columns
// of one chunk. With mean/rstd (layer norm): partial[0] gets dy * xhat and
// partial[1] dy; without: partial[0] gets x.
template <typename T>
__global__ void ColumnPartialKernel(const T* v, const float* x, const float* mean,
                                    const float* rstd, float* partial, int64_t rows, int64_t n) {
  __shared__ float a[8][33];
  __shared__ float bsum[8][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * kRowChunk, r1 = min(rows, r0 + kRowChunk);
  float sa = 0.0f, sb = 0.0f;
  if (c < n) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      const float value = ToF(v[r * n + c]);
      if (mean != nullptr) {
        sa += value * (x[r * n + c] - mean[r]) * rstd[r];
        sb += value;
      } else {
        sa += value;
      }
    }
  }
  a[threadIdx.y][threadIdx.x] = sa;
  bsum[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && c < n) {
    float ta = 0.0f, tb = 0.0f;
    for (int k = 0; k < 8; ++k) {
      ta += a[k][threadIdx.x];
      tb += bsum[k][threadIdx.x];
    }
    const int64_t chunks = gridDim.y;
    partial[chunk * n + c] = ta;
    if (mean != nullptr) partial[(chunks + chunk) * n + c] = tb;
  }
}

// Four consecutive elements as floats (16-byte aligned f32, 8-byte aligned bf16).
__device__ __forceinline__ void Load4(const float* p, float (&v)[4]) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
}
__device__ __forceinline__ void Load4(const Bf16* p, float (&v)[4]) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
  const float2 lo = __bfloat1622float2(pairs[0]), hi = __bfloat1622float2(pairs[1]);
  v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
}

// The end of a 4-columns-a-thread partial (block (32, 8), thread (x, y) holding the
// sums of columns c..c+3 over rows r0 + y, r0 + y + 8, ...): the 8 lanes of each
// column added in order into partial[chunk * n + column], and the second sums (with
// b) into partial[(chunks + chunk) * n + column]: ColumnPartialKernel's layout and
// order.
__device__ __forceinline__ void FinishPartial4(const float (&sa)[4], const float (&sb)[4],
                                               bool with_b, float* partial, int64_t n,
                                               int64_t c) {
  __shared__ float a[8][4 * 32 + 4];
  __shared__ float bsum[8][4 * 32 + 4];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    a[threadIdx.y][4 * threadIdx.x + e] = sa[e];
    bsum[threadIdx.y][4 * threadIdx.x + e] = sb[e];
  }
  __syncthreads();
  if (threadIdx.y == 0 && c < n) {
    const int64_t chunk = blockIdx.y, chunks = gridDim.y;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float ta = 0.0f, tb = 0.0f;
      for (int k = 0; k < 8; ++k) {
        ta += a[k][4 * threadIdx.x + e];
        tb += bsum[k][4 * threadIdx.x + e];
      }
      partial[chunk * n + c + e] = ta;
      if (with_b) partial[(chunks + chunk) * n + c + e] = tb;
    }
  }
}

// ColumnPartialKernel with 4 columns a thread (n a multiple of 4, rows aligned for
// Load4): block (32, 8) covers 128 columns of one chunk, a warp reading 512 (f32) or
// 256 (bf16) contiguous bytes a row where the scalar kernel read 128 or 64. Each
// column is summed in the scalar kernel's order, and `partial` has its layout.
template <typename T>
__global__ void ColumnPartial4Kernel(const T* v, const float* x, const float* mean,
                                     const float* rstd, float* partial, int64_t rows, int64_t n) {
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x) * 4;
  const int64_t r0 = blockIdx.y * kRowChunk, r1 = min(rows, r0 + kRowChunk);
  float sa[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (c < n) {
#pragma unroll 4
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      float value[4];
      Load4(v + r * n + c, value);
      if (mean != nullptr) {
        float xv[4];
        Load4(x + r * n + c, xv);
        const float mu = mean[r], rs = rstd[r];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          sa[e] += value[e] * (xv[e] - mu) * rs;
          sb[e] += value[e];
        }
      } else {
#pragma unroll
        for (int e = 0; e < 4; ++e) sa[e] += value[e];
      }
    }
  }
  FinishPartial4(sa, sb, mean != nullptr, partial, n, c);
}

// Block (32, kFinishLanes) finishes 32 columns: lane y sums chunks y, y + kFinishLanes,
// ..., then lane 0 adds the kFinishLanes sums in order (a fixed order; many lanes per
// column, since a column's chunks are a dependent walk through memory).
constexpr int kFinishLanes = 16;
__global__ void ColumnFinishKernel(const float* partial, int64_t chunks, int64_t n, float* out_a,
                                   float* out_b) {
  __shared__ float sa[kFinishLanes][33];
  __shared__ float sb[kFinishLanes][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float ta = 0.0f, tb = 0.0f;
  if (c < n) {
    for (int64_t k = threadIdx.y; k < chunks; k += kFinishLanes) {
      ta += partial[k * n + c];
      if (out_b != nullptr) tb += partial[(chunks + k) * n + c];
    }
  }
  sa[threadIdx.y][threadIdx.x] = ta;
  sb[threadIdx.y][threadIdx.x] = tb;
  __syncthreads();
  if (threadIdx.y == 0 && c < n) {
    float fa = 0.0f, fb = 0.0f;
    for (int k = 0; k < kFinishLanes; ++k) {
      fa += sa[k][threadIdx.x];
      fb += sb[k][threadIdx.x];
    }
    out_a[c] += fa;
    if (out_b != nullptr) out_b[c] += fb;
  }
}
unsigned FinishBlocks(int64_t n) { return static_cast<unsigned>((n + 31) / 32); }

// One warp's per-column sums over its rows (lane l holds columns 4 (l + 32 k) .. + 3)
// added over the block's 8 warps in warp order, into partial[(which * chunks + chunk)
// * n + column] (chunk = blockIdx.x): ColumnFinishKernel's layout. `stage` is the
// block's [8][n] shared scratch; every thread of the block calls this.
template <int kMaxVec>
__device__ __forceinline__ void CombineWarps(const float4 (&acc)[kMaxVec], float* stage,
                                             float* partial, int which, int n4) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n = 4 * n4;
  __syncthreads();  // the previous combine's reads are done
#pragma unroll
  for (int k = 0; k < kMaxVec; ++k) {
    const int j = lane + 32 * k;
    if (j < n4) reinterpret_cast<float4*>(stage + warp * n)[j] = acc[k];
  }
  __syncthreads();
  const int64_t chunk = blockIdx.x, chunks = gridDim.x;
  for (int c = threadIdx.x; c < n; c += blockDim.x) {
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kGradsWarps; ++w) sum += stage[w * n + c];
    partial[(which * chunks + chunk) * n + c] = sum;
  }
}

// LayerNormBackwardWarpKernel over a block of 32 rows (8 warps of 4 consecutive rows,
// n = 4 * n4 <= 128 * kMaxVec), with the column sums of dy * xhat, dy and (with_dx_sum)
// dx gathered on the way: the parameter gradients and the bias gradient that reads dx
// next cost no second pass over x, dy and dx. Partials 0, 1 and 2 of `partial`.
template <typename T, int kMaxVec>
__global__ void __launch_bounds__(kGradsWarps * 32)
    LayerNormBackwardGradsKernel(const float* x, const float* gamma, const float* mean,
                                 const float* rstd, const float* dy, const float* residual,
                                 float* dx, T* dx_operand, float* partial, int64_t rows, int n4,
                                 bool with_dx_sum) {
  __shared__ __align__(16) float stage[kGradsWarps * 128 * kMaxVec];
  const int warp = threadIdx.x >> 5;
  const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  float4 sum_dyx[kMaxVec], sum_dy[kMaxVec], sum_dx[kMaxVec];
#pragma unroll
  for (int k = 0; k < kMaxVec; ++k) sum_dyx[k] = sum_dy[k] = sum_dx[k] = zero;
  for (int i = 0; i < kGradsRowsPerWarp; ++i) {
    const int64_t row = blockIdx.x * kGradsRows + warp * kGradsRowsPerWarp + i;
    if (row >= rows) break;  // the same for the whole warp
    LayerNormBackwardRow<T, kMaxVec, true>(x, gamma, mean[row], rstd[row], dy, residual, dx,
                                           dx_operand, row * n4 * 4, n4, sum_dyx, sum_dy, sum_dx);
  }
  CombineWarps<kMaxVec>(sum_dyx, stage, partial, 0, n4);
  CombineWarps<kMaxVec>(sum_dy, stage, partial, 1, n4);
  if (with_dx_sum) CombineWarps<kMaxVec>(sum_dx, stage, partial, 2, n4);
}

// --- Element-wise ------------------------------------------------------------------

template <typename I>
__global__ void BiasResidualKernel(const float* x, const float* y, const float* bias, float* out,
                                   I rows, I n) {
  LOOM_GRID_STRIDE_T(I, i, rows * n) { out[i] = x[i] + y[i] + bias[i % n]; }
}

// y = bf16(x + bias) over [rows, n], 8 columns a thread where n allows.
__global__ void BiasCastVectorKernel(const float* x, const float* bias, Bf16* y, int64_t vectors,
                                     int64_t n8) {
  LOOM_GRID_STRIDE(i, vectors) {
    const int64_t c = (i % n8) * 8;
    const float4 a = *reinterpret_cast<const float4*>(x + i * 8);
    const float4 b = *reinterpret_cast<const float4*>(x + i * 8 + 4);
    const float4 ba = *reinterpret_cast<const float4*>(bias + c);
    const float4 bb = *reinterpret_cast<const float4*>(bias + c + 4);
    __nv_bfloat162 out[4] = {__floats2bfloat162_rn(a.x + ba.x, a.y + ba.y),
                             __floats2bfloat162_rn(a.z + ba.z, a.w + ba.w),
                             __floats2bfloat162_rn(b.x + bb.x, b.y + bb.y),
                             __floats2bfloat162_rn(b.z + bb.z, b.w + bb.w)};
    *reinterpret_cast<uint4*>(y + i * 8) = *reinterpret_cast<const uint4*>(out);
  }
}
__global__ void BiasCastKernel(const float* x, const float* bias, Bf16* y, int64_t count,
                               int64_t n) {
  LOOM_GRID_STRIDE(i, count) { y[i] = __float2bfloat16_rn(x[i] + bias[i % n]); }
}

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

__device__ __forceinline__ float Gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluC * (x + kGeluA * x * x * x)));
}
__device__ __forceinline__ float GeluGrad(float x) {
  const float t = tanhf(kGeluC * (x + kGeluA * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluA * x * x);
}

// Eight consecutive elements as floats, and back (16- or 32-byte aligned).
__device__ __forceinline__ void Load8(const float* p, float (&v)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void Load8(const Bf16* p, float (&v)[8]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(pairs[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ void Store8(float* p, const float (&v)[8]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  *reinterpret_cast<float4*>(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void Store8(Bf16* p, const float (&v)[8]) {
  uint4 raw;
  __nv_bfloat162* pairs = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) pairs[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
}

// pre (the FC product, in the operand type T) += bias; g = GELU(pre).
template <typename I, typename T>
__global__ void BiasGeluKernel(T* pre, const float* bias, T* g, I rows, I n) {
  LOOM_GRID_STRIDE_T(I, i, rows * n) {
    const T x = FromF<T>(ToF(pre[i]) + bias[i % n]);
    pre[i] = x;
    g[i] = FromF<T>(Gelu(ToF(x)));
  }
}
// The same, 8 elements a thread (n a multiple of 8; n8 = n / 8).
template <typename I, typename T>
__global__ void BiasGeluVectorKernel(T* pre, const float* bias, T* g, I vectors, I n8) {
  LOOM_GRID_STRIDE_T(I, i, vectors) {
    float x[8], b[8], y[8];
    Load8(pre + i * 8, x);
    Load8(bias + (i % n8) * 8, b);
#pragma unroll
    for (int e = 0; e < 8; ++e) x[e] = ToF(FromF<T>(x[e] + b[e]));  // as stored
    Store8(pre + i * 8, x);
#pragma unroll
    for (int e = 0; e < 8; ++e) y[e] = Gelu(x[e]);
    Store8(g + i * 8, y);
  }
}
template <typename I, typename T>
__global__ void GeluBackwardKernel(const T* pre, const T* dg, T* dpre, I count) {
  LOOM_GRID_STRIDE_T(I, i, count) { dpre[i] = FromF<T>(ToF(dg[i]) * GeluGrad(ToF(pre[i]))); }
}
template <typename I, typename T>
__global__ void GeluBackwardVectorKernel(const T* pre, const T* dg, T* dpre, I vectors) {
  LOOM_GRID_STRIDE_T(I, i, vectors) {
    float x[8], d[8];
    Load8(pre + i * 8, x);
    Load8(dg + i * 8, d);
#pragma unroll
    for (int e = 0; e < 8; ++e) d[e] *= GeluGrad(x[e]);
    Store8(dpre + i * 8, d);
  }
}

// Four elements from floats, in T (Load4's alignment).
__device__ __forceinline__ void Store4(float* p, const float (&v)[4]) {
  *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
}
__device__ __forceinline__ void Store4(Bf16* p, const float (&v)[4]) {
  __nv_bfloat162 pairs[2] = {__floats2bfloat162_rn(v[0], v[1]), __floats2bfloat162_rn(v[2], v[3])};
  *reinterpret_cast<uint2*>(p) = *reinterpret_cast<const uint2*>(pairs);
}

// GeluBackward and the column partials of its output (the FC bias's gradient) in one
// pass: the blocks of ColumnPartial4Kernel, each element's dpre computed as
// GeluBackwardVectorKernel does and summed as stored (rounded to T), so the sums are
// ColumnSumAdd's of the dpre written.
template <typename T>
__global__ void GeluBackwardPartial4Kernel(const T* pre, const T* dg, T* dpre, float* partial,
                                           int64_t rows, int64_t n) {
  const int64_t c = (static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x) * 4;
  const int64_t r0 = blockIdx.y * kRowChunk, r1 = min(rows, r0 + kRowChunk);
  float sa[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const float none[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (c < n) {
#pragma unroll 4
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      float x[4], d[4];
      Load4(pre + r * n + c, x);
      Load4(dg + r * n + c, d);
#pragma unroll
      for (int e = 0; e < 4; ++e) d[e] = ToF(FromF<T>(d[e] * GeluGrad(x[e])));  // as stored
      Store4(dpre + r * n + c, d);
#pragma unroll
      for (int e = 0; e < 4; ++e) sa[e] += d[e];
    }
  }
  FinishPartial4(sa, none, false, partial, n, c);
}

// --- Heads -------------------------------------------------------------------------

template <typename I, typename T>
__global__ void SplitQkvKernel(const float* qkv, const float* bias, T* q, T* k, T* v, I s, I b,
                               I heads, I d) {
  const I h = heads * d, w = 3 * h;
  LOOM_GRID_STRIDE_T(I, i, s * b * w) {
    const I r = i / w, c = i % w, si = r / b, bi = r % b;
    const I part = c / h, cc = c % h, j = cc / d, e = cc % d;
    T* dst = part == 0 ? q : (part == 1 ? k : v);
    dst[((bi * heads + j) * s + si) * d + e] = FromF<T>(qkv[i] + bias[c]);
  }
}

template <typename I, typename T>
__global__ void MergeQkvKernel(const T* dq, const T* dk, const T* dv, T* dqkv, I s, I b, I heads,
                               I d) {
  const I h = heads * d, w = 3 * h;
  LOOM_GRID_STRIDE_T(I, i, s * b * w) {
    const I r = i / w, c = i % w, si = r / b, bi = r % b;
    const I part = c / h, cc = c % h, j = cc / d, e = cc % d;
    const T* src = part == 0 ? dq : (part == 1 ? dk : dv);
    dqkv[i] = src[((bi * heads + j) * s + si) * d + e];
  }
}

template <typename I, typename T>
__global__ void PermuteHeadsKernel(const T* in, T* out, bool to_heads, I s, I b, I heads, I d) {
  const I h = heads * d;
  LOOM_GRID_STRIDE_T(I, i, s * b * h) {
    const I r = i / h, cc = i % h, si = r / b, bi = r % b, j = cc / d, e = cc % d;
    const I hidx = ((bi * heads + j) * s + si) * d + e;
    if (to_heads) {
      out[hidx] = in[i];
    } else {
      out[i] = in[hidx];
    }
  }
}

// --- Causal softmax ----------------------------------------------------------------

// scores and probs may be the same memory (f32): each element is read, after the
// block's reductions, by the thread that writes it.
template <typename T>
__global__ void CausalSoftmaxForwardKernel(const float* scores, T* probs, int64_t s) {
  const int64_t row = blockIdx.x;
  const int64_t i = row % s;  // the query: keys 0..i are visible
  const float* x = scores + row * s;
  T* p = probs + row * s;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) m = fmaxf(m, x[j]);
  m = BlockMax(m);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) sum += expf(x[j] - m);
  const float inv = 1.0f / BlockSum(sum);
  for (int64_t j = threadIdx.x; j < s; j += blockDim.x) {
    p[j] = FromF<T>(j <= i ? expf(x[j] - m) * inv : 0.0f);
  }
}

template <typename T>
__global__ void CausalSoftmaxBackwardKernel(const T* p, T* dp, int64_t s, float scale) {
  const int64_t row = blockIdx.x;
  const int64_t i = row % s;
  const T* pr = p + row * s;
  T* dr = dp + row * s;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) dot += ToF(pr[j]) * ToF(dr[j]);
  dot = BlockSum(dot);
  for (int64_t j = threadIdx.x; j < s; j += blockDim.x) {
    dr[j] = FromF<T>(j <= i ? scale * ToF(pr[j]) * (ToF(dr[j]) - dot) : 0.0f);
  }
}

// --- Cross-entropy -----------------------------------------------------------------

template <typename T>
__global__ void CrossEntropyKernel(const float* logits, const int32_t* targets, float* row_loss,
                                   T* dlogits, float grad_scale, int* bad_targets, int64_t b,
                                   int64_t s, int64_t vocab) {
  const int64_t row = blockIdx.x;  // si * b + bi
  const int64_t si = row / b, bi = row % b;
  const int32_t t = targets[bi * s + si];
  const bool valid = t >= 0 && t < vocab;
  const float* l = logits + row * vocab;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) m = fmaxf(m, l[j]);
  m = BlockMax(m);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) sum += expf(l[j] - m);
  const float lse = m + logf(BlockSum(sum));
  if (threadIdx.x == 0) {
    row_loss[row] = valid ? lse - l[t] : 0.0f;
    if (!valid) atomicAdd(bad_targets, 1);
  }
  if (dlogits != nullptr) {
    T* d = dlogits + row * vocab;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      const float softmax = expf(l[j] - lse);
      d[j] = FromF<T>(valid ? (softmax - (j == t ? 1.0f : 0.0f)) * grad_scale : 0.0f);
    }
  }
}

// --- Sums --------------------------------------------------------------------------

__global__ void SumIntoKernel(const float* x, int64_t count, double scale, double* out) {
  double sum = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) sum += x[i];
  sum = BlockSumD(sum);
  if (threadIdx.x == 0) *out += scale * sum;
}

__global__ void SquaresPartialKernel(const float* x, int64_t count, double* partial) {
  double sum = 0.0;
  LOOM_GRID_STRIDE(i, count) {
    const double v = x[i];
    sum += v * v;
  }
  sum = BlockSumD(sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

__global__ void SquaresFinishKernel(const double* partial, int blocks, double* out) {
  double sum = 0.0;
  for (int i = threadIdx.x; i < blocks; i += blockDim.x) sum += partial[i];
  sum = BlockSumD(sum);
  if (threadIdx.x == 0) *out = sum;
}

__global__ void ToBf16Kernel(const float* x, Bf16* y, int64_t count) {
  LOOM_GRID_STRIDE(i, count) { y[i] = __float2bfloat16_rn(x[i]); }
}

}  // namespace

cudaError_t EmbedForward(const int32_t* tokens, const float* token, const float* position,
                         float* x, int64_t b, int64_t s, int64_t h, cudaStream_t stream) {
  if (Fits32(s * b * h)) {
    EmbedForwardKernel<uint32_t><<<GridFor(s * b * h), kThreads, 0, stream>>>(
        tokens, token, position, x, static_cast<uint32_t>(b), static_cast<uint32_t>(s),
        static_cast<uint32_t>(h));
  } else {
    EmbedForwardKernel<int64_t><<<GridFor(s * b * h), kThreads, 0, stream>>>(tokens, token,
                                                                           position, x, b, s, h);
  }
  return Launched();
}

cudaError_t EmbedBackward(const float* dx, const int32_t* tokens, float* dtoken, float* dposition,
                          int64_t b, int64_t s, int64_t h, cudaStream_t stream) {
  PositionGradKernel<<<GridFor(s * h), kThreads, 0, stream>>>(dx, dposition, b, s, h);
  if (cudaError_t e = Launched(); e != cudaSuccess) return e;
  if (Fits32(s * b * h)) {
    TokenGradKernel<uint32_t><<<GridFor(s * b * h), kThreads, 0, stream>>>(
        dx, tokens, dtoken, static_cast<uint32_t>(b), static_cast<uint32_t>(s),
        static_cast<uint32_t>(h));
  } else {
    TokenGradKernel<int64_t><<<GridFor(s * b * h), kThreads, 0, stream>>>(dx, tokens, dtoken, b, s,
                                                                         h);
  }
  return Launched();
}

namespace {

bool Aligned(const void* p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// The warp-per-row kernels take rows of n = 4 * n4 <= 2048 floats, 16-byte aligned.
bool ByWarps(int64_t rows, int64_t n) {
  constexpr int kRowsPerBlock = kThreads / 32;
  return n % 4 == 0 && n <= 2048 && (rows + kRowsPerBlock - 1) / kRowsPerBlock <= INT32_MAX;
}
unsigned WarpRowBlocks(int64_t rows) {
  constexpr int kRowsPerBlock = kThreads / 32;
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

// LayerNormForwardWarpKernel where the row fits (false where it does not, and nothing
// is launched); with `add`, its residual add first (kAdd).
template <typename T>
bool LayerNormByWarps(const float* x, const float* gamma, const float* beta, float eps, T* y,
                      float* mean, float* rstd, int64_t rows, int64_t n, cudaStream_t stream,
                      const float* add = nullptr, const float* add_bias = nullptr,
                      float* sum_out = nullptr) {
  const bool aligned = Aligned(x, 16) && Aligned(gamma, 16) && Aligned(beta, 16) &&
                       Aligned(y, 4 * sizeof(T)) &&
                       (add == nullptr ||
                        (Aligned(add, 16) && Aligned(add_bias, 16) && Aligned(sum_out, 16)));
  if (!ByWarps(rows, n) || !aligned) return false;
  const unsigned blocks = WarpRowBlocks(rows);
  const int n4 = static_cast<int>(n / 4);
  if (add != nullptr) {
    if (n <= 1024) {
      LayerNormForwardWarpKernel<T, 8, true><<<blocks, kThreads, 0, stream>>>(
          x, gamma, beta, eps, y, mean, rstd, rows, n4, add, add_bias, sum_out);
    } else {
      LayerNormForwardWarpKernel<T, 16, true><<<blocks, kThreads, 0, stream>>>(
          x, gamma, beta, eps, y, mean, rstd, rows, n4, add, add_bias, sum_out);
    }
  } else if (n <= 1024) {
    LayerNormForwardWarpKernel<T, 8><<<blocks, kThreads, 0, stream>>>(x, gamma, beta, eps, y, mean,
                                                                     rstd, rows, n4);
  } else {
    LayerNormForwardWarpKernel<T, 16><<<blocks, kThreads, 0, stream>>>(x, gamma, beta, eps, y,
                                                                      mean, rstd, rows, n4);
  }
  return true;
}

template <typename T>
bool LayerNormBackwardByWarps(const float* x, const float* gamma, const float* mean,
                              const float* rstd, const float* dy, const float* residual, float* dx,
                              T* dx_operand, int64_t rows, int64_t n, cudaStream_t stream) {
  const bool aligned = Aligned(x, 16) && Aligned(gamma, 16) && Aligned(dy, 16) &&
                       Aligned(residual, 16) && Aligned(dx, 16) &&
                       Aligned(dx_operand, 4 * sizeof(T));
  if (!ByWarps(rows, n) || !aligned) return false;
  const unsigned blocks = WarpRowBlocks(rows);
  const int n4 = static_cast<int>(n / 4);
  if (n <= 1024) {
    LayerNormBackwardWarpKernel<T, 8><<<blocks, kThreads, 0, stream>>>(
        x, gamma, mean, rstd, dy, residual, dx, dx_operand, rows, n4);
  } else {
    LayerNormBackwardWarpKernel<T, 16><<<blocks, kThreads, 0, stream>>>(
        x, gamma, mean, rstd, dy, residual, dx, dx_operand, rows, n4);
  }
  return true;
}

// ColumnPartial4Kernel where n and the rows allow it, else ColumnPartialKernel; then
// the finish into out_a (and out_b with mean / rstd).
template <typename T>
cudaError_t ColumnSums(const T* v, const float* x, const float* mean, const float* rstd,
                       float* out_a, float* out_b, float* partial, int64_t rows, int64_t n,
                       cudaStream_t stream) {
  const int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
  const bool vector = n % 4 == 0 && Aligned(v, 4 * sizeof(T)) && (x == nullptr || Aligned(x, 16));
  if (vector) {
    const dim3 grid(static_cast<unsigned>((n / 4 + 31) / 32), static_cast<unsigned>(chunks));
    ColumnPartial4Kernel<T><<<grid, dim3(32, 8), 0, stream>>>(v, x, mean, rstd, partial, rows, n);
  } else {
    const dim3 grid(static_cast<unsigned>((n + 31) / 32), static_cast<unsigned>(chunks));
    ColumnPartialKernel<T><<<grid, dim3(32, 8), 0, stream>>>(v, x, mean, rstd, partial, rows, n);
  }
  if (cudaError_t e = Launched(); e != cudaSuccess) return e;
  ColumnFinishKernel<<<FinishBlocks(n), dim3(32, kFinishLanes), 0, stream>>>(partial, chunks, n,
                                                                           out_a, out_b);
  return Launched();
}

}  // namespace

cudaError_t LayerNormForward(const float* x, const float* gamma, const float* beta, float eps,
                             void* y, float* mean, float* rstd, int64_t rows, int64_t n, bool bf16,
                             cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const bool by_warps =
      bf16 ? LayerNormByWarps(x, gamma, beta, eps, static_cast<Bf16*>(y), mean, rstd, rows, n,
                              stream)
           : LayerNormByWarps(x, gamma, beta, eps, static_cast<float*>(y), mean, rstd, rows, n,
                              stream);
  if (by_warps) return Launched();
  if (bf16) {
    LayerNormForwardKernel<<<static_cast<unsigned>(rows), RowThreads(n), 0, stream>>>(
        x, gamma, beta, eps, static_cast<__nv_bfloat16*>(y), mean, rstd, n);
  } else {
    LayerNormForwardKernel<<<static_cast<unsigned>(rows), RowThreads(n), 0, stream>>>(
        x, gamma, beta, eps, static_cast<float*>(y), mean, rstd, n);
  }
  return Launched();
}

cudaError_t BiasResidualLayerNorm(const float* x, const float* y, const float* bias, float* out,
                                  const float* gamma, const float* beta, float eps, void* ln_y,
                                  float* mean, float* rstd, int64_t rows, int64_t n, bool bf16,
                                  cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const bool by_warps =
      bf16 ? LayerNormByWarps(x, gamma, beta, eps, static_cast<Bf16*>(ln_y), mean, rstd, rows, n,
                              stream, y, bias, out)
           : LayerNormByWarps(x, gamma, beta, eps, static_cast<float*>(ln_y), mean, rstd, rows, n,
                              stream, y, bias, out);
  if (by_warps) return Launched();
  if (cudaError_t e = BiasResidual(x, y, bias, out, rows, n, stream); e != cudaSuccess) return e;
  return LayerNormForward(out, gamma, beta, eps, ln_y, mean, rstd, rows, n, bf16, stream);
}

cudaError_t LayerNormBackward(const float* x, const float* gamma, const float* mean,
                              const float* rstd, const float* dy, const float* residual, float* dx,
                              void* dx_operand, int64_t rows, int64_t n, bool bf16,
                              cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  const bool by_warps =
      bf16 ? LayerNormBackwardByWarps(x, gamma, mean, rstd, dy, residual, dx,
                                      static_cast<Bf16*>(dx_operand), rows, n, stream)
           : LayerNormBackwardByWarps(x, gamma, mean, rstd, dy, residual, dx,
                                      static_cast<float*>(dx_operand), rows, n, stream);
  if (by_warps) return Launched();
  if (bf16) {
    LayerNormBackwardKernel<<<static_cast<unsigned>(rows), RowThreads(n), 0, stream>>>(
        x, gamma, mean, rstd, dy, residual, dx, static_cast<__nv_bfloat16*>(dx_operand), n);
  } else {
    LayerNormBackwardKernel<<<static_cast<unsigned>(rows), RowThreads(n), 0, stream>>>(
        x, gamma, mean, rstd, dy, residual, dx, static_cast<float*>(dx_operand), n);
  }
  return Launched();
}

int64_t ColumnPartialFloats(int64_t rows, int64_t n) {
  // Two sums a kRowChunk-row chunk (ColumnPartialKernel), or three a kGradsRows-row
  // chunk (LayerNormBackwardGradsKernel).
  const int64_t column = std::max<int64_t>(1, (rows + kRowChunk - 1) / kRowChunk) * 2;
  const int64_t grads = std::max<int64_t>(1, (rows + kGradsRows - 1) / kGradsRows) * 3;
  return std::max(column, grads) * n;
}

cudaError_t LayerNormParamGrads(const float* x, const float* mean, const float* rstd,
                                const float* dy, float* dgamma, float* dbeta, float* partial,
                                int64_t rows, int64_t n, cudaStream_t stream) {
  if (rows == 0 || n == 0) return cudaSuccess;
  return ColumnSums(dy, x, mean, rstd, dgamma, dbeta, partial, rows, n, stream);
}

namespace {
template <typename T>
bool LayerNormBackwardWithGradsFused(const float* x, const float* gamma, const float* mean,
                                     const float* rstd, const float* dy, const float* residual,
                                     float* dx, T* dx_operand, float* dgamma, float* dbeta,
                                     float* dx_sum, float* partial, int64_t rows, int64_t n,
                                     cudaStream_t stream) {
  const bool aligned = Aligned(x, 16) && Aligned(gamma, 16) && Aligned(dy, 16) &&
                       Aligned(residual, 16) && Aligned(dx, 16) &&
                       Aligned(dx_operand, 4 * sizeof(T));
  const int64_t chunks = (rows + kGradsRows - 1) / kGradsRows;
  if (n % 4 != 0 || n > 1024 || !aligned || chunks > INT32_MAX) return false;
  LayerNormBackwardGradsKernel<T, 8><<<static_cast<unsigned>(chunks), kGradsWarps * 32, 0, stream>>>(
      x, gamma, mean, rstd, dy, residual, dx, dx_operand, partial, rows, static_cast<int>(n / 4),
      dx_sum != nullptr);
  return true;
}
}  // namespace

cudaError_t LayerNormBackwardWithGrads(const float* x, const float* gamma, const float* mean,
                                       const float* rstd, const float* dy, const float* residual,
                                       float* dx, void* dx_operand, float* dgamma, float* dbeta,
                                       float* dx_sum, float* partial, int64_t rows, int64_t n,
                                       bool bf16, cudaStream_t stream) {
  if (rows == 0 || n == 0) return cudaSuccess;
  const bool fused =
      bf16 ? LayerNormBackwardWithGradsFused(x, gamma, mean, rstd, dy, residual, dx,
                                             static_cast<Bf16*>(dx_operand), dgamma, dbeta, dx_sum,
                                             partial, rows, n, stream)
           : LayerNormBackwardWithGradsFused(x, gamma, mean, rstd, dy, residual, dx,
                                             static_cast<float*>(dx_operand), dgamma, dbeta,
                                             dx_sum, partial, rows, n, stream);
  if (fused) {
    if (cudaError_t e = Launched(); e != cudaSuccess) return e;
    const int64_t chunks = (rows + kGradsRows - 1) / kGradsRows;
    ColumnFinishKernel<<<FinishBlocks(n), dim3(32, kFinishLanes), 0, stream>>>(partial, chunks, n,
                                                                             dgamma, dbeta);
    if (cudaError_t e = Launched(); e != cudaSuccess) return e;
    if (dx_sum != nullptr) {
      ColumnFinishKernel<<<FinishBlocks(n), dim3(32, kFinishLanes), 0, stream>>>(
          partial + 2 * chunks * n, chunks, n, dx_sum, nullptr);
    }
    return Launched();
  }
  // The three passes: the parameter gradients read dy before the backward writes dx.
  cudaError_t e = LayerNormParamGrads(x, mean, rstd, dy, dgamma, dbeta, partial, rows, n, stream);
  if (e != cudaSuccess) return e;
  e = LayerNormBackward(x, gamma, mean, rstd, dy, residual, dx, dx_operand, rows, n, bf16, stream);
  if (e != cudaSuccess || dx_sum == nullptr) return e;
  return ColumnSumAdd(dx, false, dx_sum, partial, rows, n, stream);
}

cudaError_t ColumnSumAdd(const void* x, bool x_bf16, float* out, float* partial, int64_t rows,
                         int64_t n, cudaStream_t stream) {
  if (rows == 0 || n == 0) return cudaSuccess;
  if (x_bf16) {
    return ColumnSums(static_cast<const Bf16*>(x), nullptr, nullptr, nullptr, out, nullptr,
                      partial, rows, n, stream);
  }
  return ColumnSums(static_cast<const float*>(x), nullptr, nullptr, nullptr, out, nullptr, partial,
                    rows, n, stream);
}

cudaError_t BiasResidual(const float* x, const float* y, const float* bias, float* out,
                         int64_t rows, int64_t n, cudaStream_t stream) {
  if (Fits32(rows * n)) {
    BiasResidualKernel<uint32_t><<<GridFor(rows * n), kThreads, 0, stream>>>(
        x, y, bias, out, static_cast<uint32_t>(rows), static_cast<uint32_t>(n));
  } else {
    BiasResidualKernel<int64_t><<<GridFor(rows * n), kThreads, 0, stream>>>(x, y, bias, out, rows,
                                                                           n);
  }
  return Launched();
}

cudaError_t BiasToBf16(const float* x, const float* bias, void* y, int64_t rows, int64_t n,
                       cudaStream_t stream) {
  const int64_t count = rows * n;
  if (count == 0) return cudaSuccess;
  // 16-byte vectors need n a multiple of 8 and the three pointers aligned to them.
  const bool vector = n % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(bias) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(y) % 16 == 0;
  if (vector) {
    BiasCastVectorKernel<<<GridFor(count / 8), kThreads, 0, stream>>>(
        x, bias, static_cast<Bf16*>(y), count / 8, n / 8);
  } else {
    BiasCastKernel<<<GridFor(count), kThreads, 0, stream>>>(x, bias, static_cast<Bf16*>(y), count,
                                                            n);
  }
  return Launched();
}

namespace {

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T>
cudaError_t BiasGeluAs(T* pre, const float* bias, T* g, int64_t rows, int64_t n,
                       cudaStream_t stream) {
  const int64_t count = rows * n;
  if (count == 0) return cudaSuccess;
  if (n % 8 == 0 && Aligned16(pre) && Aligned16(bias) && Aligned16(g)) {
    const int64_t vectors = count / 8;
    if (Fits32(count)) {
      BiasGeluVectorKernel<uint32_t, T><<<GridFor(vectors), kThreads, 0, stream>>>(
          pre, bias, g, static_cast<uint32_t>(vectors), static_cast<uint32_t>(n / 8));
    } else {
      BiasGeluVectorKernel<int64_t, T><<<GridFor(vectors), kThreads, 0, stream>>>(pre, bias, g,
                                                                                 vectors, n / 8);
    }
  } else if (Fits32(count)) {
    BiasGeluKernel<uint32_t, T><<<GridFor(count), kThreads, 0, stream>>>(
        pre, bias, g, static_cast<uint32_t>(rows), static_cast<uint32_t>(n));
  } else {
    BiasGeluKernel<int64_t, T><<<GridFor(count), kThreads, 0, stream>>>(pre, bias, g, rows, n);
  }
  return Launched();
}

template <typename T>
cudaError_t GeluBackwardAs(const T* pre, const T* dg, T* dpre, int64_t count,
                           cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (count % 8 == 0 && Aligned16(pre) && Aligned16(dg) && Aligned16(dpre)) {
    const int64_t vectors = count / 8;
    if (Fits32(count)) {
      GeluBackwardVectorKernel<uint32_t, T><<<GridFor(vectors), kThreads, 0, stream>>>(
          pre, dg, dpre, static_cast<uint32_t>(vectors));
    } else {
      GeluBackwardVectorKernel<int64_t, T><<<GridFor(vectors), kThreads, 0, stream>>>(pre, dg, dpre,
                                                                                     vectors);
    }
  } else if (Fits32(count)) {
    GeluBackwardKernel<uint32_t, T><<<GridFor(count), kThreads, 0, stream>>>(
        pre, dg, dpre, static_cast<uint32_t>(count));
  } else {
    GeluBackwardKernel<int64_t, T><<<GridFor(count), kThreads, 0, stream>>>(pre, dg, dpre, count);
  }
  return Launched();
}

}  // namespace

cudaError_t BiasGeluForward(void* pre, const float* bias, void* g, int64_t rows, int64_t n,
                            bool bf16, cudaStream_t stream) {
  if (bf16) {
    return BiasGeluAs(static_cast<Bf16*>(pre), bias, static_cast<Bf16*>(g), rows, n, stream);
  }
  return BiasGeluAs(static_cast<float*>(pre), bias, static_cast<float*>(g), rows, n, stream);
}

cudaError_t GeluBackward(const void* pre, const void* dg, void* dpre, int64_t count, bool bf16,
                         cudaStream_t stream) {
  if (bf16) {
    return GeluBackwardAs(static_cast<const Bf16*>(pre), static_cast<const Bf16*>(dg),
                          static_cast<Bf16*>(dpre), count, stream);
  }
  return GeluBackwardAs(static_cast<const float*>(pre), static_cast<const float*>(dg),
                        static_cast<float*>(dpre), count, stream);
}

namespace {
template <typename T>
cudaError_t GeluBackwardBiasGradAs(const T* pre, const T* dg, T* dpre, float* dbias,
                                   float* partial, int64_t rows, int64_t n, cudaStream_t stream) {
  const bool vector = n % 4 == 0 && Aligned(pre, 4 * sizeof(T)) && Aligned(dg, 4 * sizeof(T)) &&
                      Aligned(dpre, 4 * sizeof(T));
  if (!vector) {
    if (cudaError_t e = GeluBackwardAs(pre, dg, dpre, rows * n, stream); e != cudaSuccess) {
      return e;
    }
    return ColumnSums(dpre, nullptr, nullptr, nullptr, dbias, nullptr, partial, rows, n, stream);
  }
  const int64_t chunks = (rows + kRowChunk - 1) / kRowChunk;
  const dim3 grid(static_cast<unsigned>((n / 4 + 31) / 32), static_cast<unsigned>(chunks));
  GeluBackwardPartial4Kernel<T><<<grid, dim3(32, 8), 0, stream>>>(pre, dg, dpre, partial, rows, n);
  if (cudaError_t e = Launched(); e != cudaSuccess) return e;
  ColumnFinishKernel<<<FinishBlocks(n), dim3(32, kFinishLanes), 0, stream>>>(partial, chunks, n,
                                                                           dbias, nullptr);
  return Launched();
}
}  // namespace

cudaError_t GeluBackwardBiasGrad(const void* pre, const void* dg, void* dpre, float* dbias,
                                 float* partial, int64_t rows, int64_t n, bool bf16,
                                 cudaStream_t stream) {
  if (rows == 0 || n == 0) return cudaSuccess;
  if (bf16) {
    return GeluBackwardBiasGradAs(static_cast<const Bf16*>(pre), static_cast<const Bf16*>(dg),
                                  static_cast<Bf16*>(dpre), dbias, partial, rows, n, stream);
  }
  return GeluBackwardBiasGradAs(static_cast<const float*>(pre), static_cast<const float*>(dg),
                                static_cast<float*>(dpre), dbias, partial, rows, n, stream);
}

// Launches kernel<I, T> with I = uint32_t where `count` fits in 31 bits, else int64_t;
// the four sizes converted to I.
#define LOOM_LAUNCH_INDEXED(kernel, T, count, ...)                                   \
  do {                                                                               \
    if (Fits32(count)) {                                                             \
      kernel<uint32_t, T><<<GridFor(count), kThreads, 0, stream>>>(                  \
          __VA_ARGS__, static_cast<uint32_t>(s), static_cast<uint32_t>(b),           \
          static_cast<uint32_t>(heads), static_cast<uint32_t>(head_dim));            \
    } else {                                                                         \
      kernel<int64_t, T><<<GridFor(count), kThreads, 0, stream>>>(__VA_ARGS__, s, b, \
                                                                  heads, head_dim);  \
    }                                                                                \
  } while (0)

cudaError_t SplitQkv(const float* qkv, const float* bias, void* q, void* k, void* v, int64_t s,
                     int64_t b, int64_t heads, int64_t head_dim, bool bf16, cudaStream_t stream) {
  const int64_t count = s * b * 3 * heads * head_dim;
  if (bf16) {
    LOOM_LAUNCH_INDEXED(SplitQkvKernel, Bf16, count, qkv, bias, static_cast<Bf16*>(q),
                        static_cast<Bf16*>(k), static_cast<Bf16*>(v));
  } else {
    LOOM_LAUNCH_INDEXED(SplitQkvKernel, float, count, qkv, bias, static_cast<float*>(q),
                        static_cast<float*>(k), static_cast<float*>(v));
  }
  return Launched();
}

cudaError_t MergeQkv(const void* dq, const void* dk, const void* dv, void* dqkv, int64_t s,
                     int64_t b, int64_t heads, int64_t head_dim, bool bf16, cudaStream_t stream) {
  const int64_t count = s * b * 3 * heads * head_dim;
  if (bf16) {
    LOOM_LAUNCH_INDEXED(MergeQkvKernel, Bf16, count, static_cast<const Bf16*>(dq),
                        static_cast<const Bf16*>(dk), static_cast<const Bf16*>(dv),
                        static_cast<Bf16*>(dqkv));
  } else {
    LOOM_LAUNCH_INDEXED(MergeQkvKernel, float, count, static_cast<const float*>(dq),
                        static_cast<const float*>(dk), static_cast<const float*>(dv),
                        static_cast<float*>(dqkv));
  }
  return Launched();
}

cudaError_t PermuteHeads(const void* in, void* out, bool to_heads, int64_t s, int64_t b,
                         int64_t heads, int64_t head_dim, bool bf16, cudaStream_t stream) {
  const int64_t count = s * b * heads * head_dim;
  if (bf16) {
    LOOM_LAUNCH_INDEXED(PermuteHeadsKernel, Bf16, count, static_cast<const Bf16*>(in),
                        static_cast<Bf16*>(out), to_heads);
  } else {
    LOOM_LAUNCH_INDEXED(PermuteHeadsKernel, float, count, static_cast<const float*>(in),
                        static_cast<float*>(out), to_heads);
  }
  return Launched();
}

cudaError_t CausalSoftmaxForward(const float* scores, void* p, int64_t rows, int64_t s, bool bf16,
                                 cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (bf16) {
    CausalSoftmaxForwardKernel<<<static_cast<unsigned>(rows), RowThreads(s), 0, stream>>>(
        scores, static_cast<Bf16*>(p), s);
  } else {
    CausalSoftmaxForwardKernel<<<static_cast<unsigned>(rows), RowThreads(s), 0, stream>>>(
        scores, static_cast<float*>(p), s);
  }
  return Launched();
}

cudaError_t CausalSoftmaxBackward(const void* p, void* dp, int64_t rows, int64_t s, float scale,
                                  bool bf16, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (bf16) {
    CausalSoftmaxBackwardKernel<<<static_cast<unsigned>(rows), RowThreads(s), 0, stream>>>(
        static_cast<const Bf16*>(p), static_cast<Bf16*>(dp), s, scale);
  } else {
    CausalSoftmaxBackwardKernel<<<static_cast<unsigned>(rows), RowThreads(s), 0, stream>>>(
        static_cast<const float*>(p), static_cast<float*>(dp), s, scale);
  }
  return Launched();
}

cudaError_t CrossEntropy(const float* logits, const int32_t* targets, float* row_loss,
                         void* dlogits, float grad_scale, int* bad_targets, int64_t b, int64_t s,
                         int64_t vocab, bool bf16, cudaStream_t stream) {
  const int64_t rows = b * s;
  if (rows == 0) return cudaSuccess;
  if (bf16) {
    CrossEntropyKernel<<<static_cast<unsigned>(rows), RowThreads(vocab), 0, stream>>>(
        logits, targets, row_loss, static_cast<Bf16*>(dlogits), grad_scale, bad_targets, b, s,
        vocab);
  } else {
    CrossEntropyKernel<<<static_cast<unsigned>(rows), RowThreads(vocab), 0, stream>>>(
        logits, targets, row_loss, static_cast<float*>(dlogits), grad_scale, bad_targets, b, s,
        vocab);
  }
  return Launched();
}

cudaError_t SumInto(const float* x, int64_t count, double scale, double* out,
                    cudaStream_t stream) {
  SumIntoKernel<<<1, 1024, 0, stream>>>(x, count, scale, out);
  return Launched();
}

int64_t SquaresPartialDoubles() { return kSquareBlocks; }

cudaError_t SumSquares(const float* x, int64_t count, double* partial, double* out,
                       cudaStream_t stream) {
  SquaresPartialKernel<<<kSquareBlocks, kThreads, 0, stream>>>(x, count, partial);
  if (cudaError_t e = Launched(); e != cudaSuccess) return e;
  SquaresFinishKernel<<<1, kThreads, 0, stream>>>(partial, kSquareBlocks, out);
  return Launched();
}

cudaError_t ToBf16(const float* x, void* y, int64_t count, cudaStream_t stream) {
  ToBf16Kernel<<<GridFor(count), kThreads, 0, stream>>>(x, static_cast<Bf16*>(y), count);
  return Launched();
}

}  // namespace gpt_gpu
}  // namespace loom
