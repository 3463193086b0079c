// The kernels of flash_attention_kernels.h: FlashAttention-2's tiling with the tiles'
// products on mma.sync (m16n8k16, bf16 in, f32 accumulators) and the softmax done on
// the accumulators in registers. A block of 4 warps takes a 64-row tile; each warp owns
// 16 of its rows. The register layouts below are the PTX ISA's for m16n8k16 (g = lane
// / 4, t = lane % 4):
//   A (16 x 16, 4 x b32):  a0 (g, 2t..2t+1)  a1 (g+8, 2t..)  a2 (g, 2t+8..)  a3 (g+8, 2t+8..)
//   B (16 x 8, 2 x b32):   b0 (k 2t..2t+1, n g)  b1 (k 2t+8.., n g)
//   C (16 x 8, 4 x f32):   c0 c1 (g, 2t, 2t+1)   c2 c3 (g+8, 2t, 2t+1)
// so the C tiles of two neighbouring n-blocks are, converted to bf16, the A operand of
// the next product over those 16 columns (no trip through shared memory). Operands
// come from shared memory through ldmatrix (.trans where the product needs the tile
// transposed). Tiles are [64][D + 8] bf16: the 8-element pad puts the 8 rows an
// ldmatrix phase reads on distinct banks. The tiles a loop walks (K and V forward, Q
// and dO backward) are double-buffered: cp.async fills the next while this one is used.
#include "models/gpt/gpu/flash_attention_kernels.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace loom {
namespace gpt_gpu {
namespace {

using Bf16 = __nv_bfloat16;

constexpr int kTile = 64;
constexpr int kThreads = 128;  // 4 warps x 16 rows
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8 x 8 bf16 matrices; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void LoadMatrix4(uint32_t (&r)[4], const Bf16* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row)));
}

// The same, each matrix transposed on the way.
__device__ __forceinline__ void LoadMatrix4T(uint32_t (&r)[4], const Bf16* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row)));
}

// c += a b on one m16n8k16 tile.
__device__ __forceinline__ void Mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t PackBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The A operand over columns [16 kk, 16 kk + 16) from C tiles 2 kk and 2 kk + 1.
__device__ __forceinline__ void AFromC(uint32_t (&a)[4], const float (&lo)[4],
                                       const float (&hi)[4]) {
  a[0] = PackBf16(lo[0], lo[1]);
  a[1] = PackBf16(lo[2], lo[3]);
  a[2] = PackBf16(hi[0], hi[1]);
  a[3] = PackBf16(hi[2], hi[3]);
}

template <int D>
struct Tiles {
  static constexpr int kLd = D + 8;                // elements per shared row
  static constexpr int kElements = kTile * kLd;    // one [64][kLd] tile
  // Q, and K and V twice (the next tile loads while this one is used).
  static constexpr int kForwardBytes = 5 * kElements * 2;
  // K, V, Q and dO twice, dS, lse and delta twice.
  static constexpr int kBackwardBytes = 6 * kElements * 2 + kTile * (kTile + 8) * 2 +
                                        4 * kTile * 4;
};

// 16 bytes from global to shared memory without waiting (cp.async); zeros where
// !valid (then nothing is read from src).
__device__ __forceinline__ void CopyAsync16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SharedAddress(dst)),
               "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void CommitCopies() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most `pending` of this thread's committed groups are still in flight.
template <int pending>
__device__ __forceinline__ void WaitCopies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
}

// Rows [row0, row0 + 64) of an [s, D] bf16 matrix whose rows lie `ld` elements apart
// into shared [64][D + 8], zeros past s: copies issued without waiting (CommitCopies
// and WaitCopies complete them).
template <int D>
__device__ __forceinline__ void LoadTileAsync(const Bf16* m, int64_t ld, int row0, int s,
                                              Bf16* tile) {
  constexpr int kVectors = D / 8;
#pragma unroll
  for (int i = threadIdx.x; i < kTile * kVectors; i += kThreads) {
    const int r = i / kVectors, c = (i % kVectors) * 8;
    const bool valid = row0 + r < s;
    CopyAsync16(tile + r * Tiles<D>::kLd + c, valid ? m + (row0 + r) * ld + c : m, valid);
  }
}

// The A operand of rows [row0, row0 + 16) x columns [16 kk, 16 kk + 16) of a tile.
template <int Ld>
__device__ __forceinline__ void LoadA(uint32_t (&a)[4], const Bf16* tile, int row0, int kk,
                                      int lane) {
  // Matrices in a0..a3 order: (rows +0, cols +0), (rows +8, cols +0), (rows +0, cols +8),
  // (rows +8, cols +8).
  const int m = lane / 8;
  LoadMatrix4(a, tile + (row0 + lane % 8 + (m & 1) * 8) * Ld + kk * 16 + (m >> 1) * 8);
}

// B operands of a product X Y^T where Y's rows are the n index (K for Q K^T): for
// n-block j (rows [8 j, 8 j + 8) of Y), k-steps kk and kk + 1: b[0], b[1] for kk,
// b[2], b[3] for kk + 1.
template <int Ld>
__device__ __forceinline__ void LoadBRows(uint32_t (&b)[4], const Bf16* tile, int j, int kk,
                                          int lane) {
  LoadMatrix4(b, tile + (8 * j + lane % 8) * Ld + kk * 16 + (lane / 8) * 8);
}

// B operands of a product X Y where Y's rows are the k index (V for P V): k-step kk
// (rows [16 kk, 16 kk + 16) of Y), n-blocks n and n + 1 (columns [8 n, 8 n + 16)):
// b[0], b[1] for n, b[2], b[3] for n + 1.
template <int Ld>
__device__ __forceinline__ void LoadBCols(uint32_t (&b)[4], const Bf16* tile, int kk, int n,
                                          int lane) {
  const int m = lane / 8;
  LoadMatrix4T(b, tile + (16 * kk + lane % 8 + (m & 1) * 8) * Ld + 8 * n + (m >> 1) * 8);
}

// Where block (x, bh) finds its (sequence, head): bh = bi * heads + j.
__device__ __forceinline__ int64_t HeadOffset(const AttentionStrides& st, int64_t bh, int heads) {
  return (bh / heads) * st.batch + (bh % heads) * st.head;
}

// acc[n] += a B(kk, n) for every n-block of a [64][Ld] tile whose rows are the k index
// (V in P V, K in dS K): the A operand held, the B operands streamed by columns.
template <int D, int Ld>
__device__ __forceinline__ void MmaAcrossColumns(float (&acc)[D / 8][4], const uint32_t (&a)[4],
                                                 const Bf16* tile, int kk, int lane) {
#pragma unroll
  for (int n = 0; n < D / 8; n += 2) {
    uint32_t b[4];
    LoadBCols<Ld>(b, tile, kk, n, lane);
    Mma(acc[n], a, b[0], b[1]);
    Mma(acc[n + 1], a, b[2], b[3]);
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    FlashForwardKernel(const Bf16* __restrict__ q, const Bf16* __restrict__ k,
                       const Bf16* __restrict__ v, AttentionStrides in, Bf16* __restrict__ out,
                       AttentionStrides os, float* __restrict__ lse, int heads, int s,
                       float scale) {
  using T = Tiles<D>;
  constexpr int kLd = T::kLd;
  extern __shared__ __align__(128) unsigned char smem[];
  Bf16* qs = reinterpret_cast<Bf16*>(smem);
  Bf16* kv = qs + T::kElements;  // K then V, two buffers of each: kv + (2 * buffer + 0 / 1) E
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t bh = blockIdx.y;
  const int tiles = (s + kTile - 1) / kTile;
  const int qt = tiles - 1 - static_cast<int>(blockIdx.x);  // the longest rows first
  const int q0 = qt * kTile;
  const int64_t base = HeadOffset(in, bh, heads), obase = HeadOffset(os, bh, heads);
  LoadTileAsync<D>(q + base, in.row, q0, s, qs);
  LoadTileAsync<D>(k + base, in.row, 0, s, kv);
  LoadTileAsync<D>(v + base, in.row, 0, s, kv + T::kElements);
  CommitCopies();
  uint32_t qa[D / 16][4];
  // This lane's two rows (g and g + 8 of the warp's 16).
  const int row_lo = q0 + warp * 16 + g, row_hi = row_lo + 8;
  const float scale2 = scale * kLog2e;  // scores in log2 units
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  for (int kt = 0; kt <= qt; ++kt) {
    const int k0 = kt * kTile;
    const Bf16* ks = kv + 2 * (kt & 1) * T::kElements;
    const Bf16* vs = ks + T::kElements;
    if (kt < qt) {  // the next K and V into the other buffers, read two iterations ago
      Bf16* next = kv + 2 * ((kt + 1) & 1) * T::kElements;
      LoadTileAsync<D>(k + base, in.row, k0 + kTile, s, next);
      LoadTileAsync<D>(v + base, in.row, k0 + kTile, s, next + T::kElements);
      CommitCopies();
      WaitCopies<1>();  // all but the group just issued
    } else {
      WaitCopies<0>();
    }
    __syncthreads();  // every thread's copies of this tile (and of Q) have landed
    if (kt == 0) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) LoadA<kLd>(qa[kk], qs, warp * 16, kk, lane);
    }
    float sc[8][4];
#pragma unroll
    for (int j = 0; j < 8; ++j) sc[j][0] = sc[j][1] = sc[j][2] = sc[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; kk += 2) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        uint32_t b[4];
        LoadBRows<kLd>(b, ks, j, kk, lane);
        Mma(sc[j], qa[kk], b[0], b[1]);
        Mma(sc[j], qa[kk + 1], b[2], b[3]);
      }
    }
    // Scale, mask (the diagonal tile, and keys past s), and the rows' new maxima.
    const bool edge = kt == qt || k0 + kTile > s;
    float tile_lo = -INFINITY, tile_hi = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + 8 * j + 2 * t + (e & 1);
        const int row = e < 2 ? row_lo : row_hi;
        float x = sc[j][e] * scale2;
        if (edge && (key > row || key >= s)) x = -INFINITY;
        sc[j][e] = x;
      }
      tile_lo = fmaxf(tile_lo, fmaxf(sc[j][0], sc[j][1]));
      tile_hi = fmaxf(tile_hi, fmaxf(sc[j][2], sc[j][3]));
    }
#pragma unroll
    for (int mask = 1; mask <= 2; mask <<= 1) {  // the 4 lanes of a row
      tile_lo = fmaxf(tile_lo, __shfl_xor_sync(0xffffffffu, tile_lo, mask));
      tile_hi = fmaxf(tile_hi, __shfl_xor_sync(0xffffffffu, tile_hi, mask));
    }
    const float new_lo = fmaxf(m_lo, tile_lo), new_hi = fmaxf(m_hi, tile_hi);
    // A row with nothing unmasked yet keeps max -inf: subtract 0 so exp2 gives 0.
    const float sub_lo = new_lo == -INFINITY ? 0.0f : new_lo;
    const float sub_hi = new_hi == -INFINITY ? 0.0f : new_hi;
    const float alpha_lo = exp2f(m_lo - sub_lo), alpha_hi = exp2f(m_hi - sub_hi);
    m_lo = new_lo;
    m_hi = new_hi;
    float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      sc[j][0] = exp2f(sc[j][0] - sub_lo);
      sc[j][1] = exp2f(sc[j][1] - sub_lo);
      sc[j][2] = exp2f(sc[j][2] - sub_hi);
      sc[j][3] = exp2f(sc[j][3] - sub_hi);
      sum_lo += sc[j][0] + sc[j][1];
      sum_hi += sc[j][2] + sc[j][3];
    }
    l_lo = l_lo * alpha_lo + sum_lo;  // this lane's columns; the row's sum at the end
    l_hi = l_hi * alpha_hi + sum_hi;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      o[n][0] *= alpha_lo;
      o[n][1] *= alpha_lo;
      o[n][2] *= alpha_hi;
      o[n][3] *= alpha_hi;
    }
    // O += P V, P in bf16 straight from the score registers.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t pa[4];
      AFromC(pa, sc[2 * kk], sc[2 * kk + 1]);
      MmaAcrossColumns<D, kLd>(o, pa, vs, kk, lane);
    }
    __syncthreads();  // this K and V are no longer read: the next iteration refills them
  }
#pragma unroll
  for (int mask = 1; mask <= 2; mask <<= 1) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, mask);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, mask);
  }
  const float inv_lo = l_lo > 0.0f ? 1.0f / l_lo : 0.0f;
  const float inv_hi = l_hi > 0.0f ? 1.0f / l_hi : 0.0f;
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    const int col = 8 * n + 2 * t;
    if (row_lo < s) {
      *reinterpret_cast<uint32_t*>(out + obase + row_lo * os.row + col) =
          PackBf16(o[n][0] * inv_lo, o[n][1] * inv_lo);
    }
    if (row_hi < s) {
      *reinterpret_cast<uint32_t*>(out + obase + row_hi * os.row + col) =
          PackBf16(o[n][2] * inv_hi, o[n][3] * inv_hi);
    }
  }
  if (t == 0) {
    if (row_lo < s) lse[bh * s + row_lo] = (m_lo + log2f(l_lo)) * kLn2;
    if (row_hi < s) lse[bh * s + row_hi] = (m_hi + log2f(l_hi)) * kLn2;
  }
}

// One block per 64-key tile and (sequence, head); each warp owns 16 keys. Per query
// tile (from the diagonal on): S^T = K Q^T and dP^T = V dO^T for the warp's keys, then
// P^T and dS^T = P^T (dP^T - delta) scale in registers, dV += P^T dO and dK += dS^T Q
// from them, and dS through shared memory for dQ += dS K (each warp 16 queries), which
// is added into the f32 dq_accum with atomics.
template <int D>
__global__ void __launch_bounds__(kThreads)
    FlashBackwardKernel(const Bf16* __restrict__ q, const Bf16* __restrict__ k,
                        const Bf16* __restrict__ v, AttentionStrides in,
                        const Bf16* __restrict__ dout, AttentionStrides os,
                        const float* __restrict__ lse, const float* __restrict__ delta,
                        Bf16* __restrict__ dk, Bf16* __restrict__ dv, AttentionStrides gs,
                        float* dq_accum, int heads, int s, float scale) {
  using T = Tiles<D>;
  constexpr int kLd = T::kLd;
  constexpr int kDsLd = kTile + 8;
  extern __shared__ __align__(128) unsigned char smem[];
  Bf16* ks = reinterpret_cast<Bf16*>(smem);
  Bf16* vs = ks + T::kElements;
  Bf16* qdo = vs + T::kElements;  // Q then dO, two buffers of each: qdo + (2 * buffer + 0 / 1) E
  Bf16* dss = qdo + 4 * T::kElements;  // dS^T: [key][query]
  float* stats = reinterpret_cast<float*>(dss + kTile * kDsLd);  // [buffer][lse, delta][64]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t bh = blockIdx.y;
  const int kt = blockIdx.x, k0 = kt * kTile;  // blockIdx.x 0 has the most query tiles
  const int64_t base = HeadOffset(in, bh, heads), obase = HeadOffset(os, bh, heads);
  const int64_t gbase = HeadOffset(gs, bh, heads), abase = bh * s * D;  // dq_accum: head layout
  const int tiles = (s + kTile - 1) / kTile;
  const float scale2 = scale * kLog2e;
  // Fills buffer `buffer` with query tile qt: Q and dO by cp.async, lse (in log2 units)
  // and delta by plain loads (visible after the next barrier).
  const auto load_queries = [&](int qt, int buffer) {
    const int q0 = qt * kTile;
    Bf16* qb = qdo + 2 * buffer * T::kElements;
    LoadTileAsync<D>(q + base, in.row, q0, s, qb);
    LoadTileAsync<D>(dout + obase, os.row, q0, s, qb + T::kElements);
    CommitCopies();
    float* st = stats + buffer * 2 * kTile;
    for (int i = threadIdx.x; i < kTile; i += kThreads) {
      const int row = q0 + i;
      st[i] = row < s ? lse[bh * s + row] * kLog2e : 0.0f;
      st[kTile + i] = row < s ? delta[bh * s + row] : 0.0f;
    }
  };
  LoadTileAsync<D>(k + base, in.row, k0, s, ks);
  LoadTileAsync<D>(v + base, in.row, k0, s, vs);
  load_queries(kt, 0);  // one group with K and V
  const int key_lo = k0 + warp * 16 + g, key_hi = key_lo + 8;
  float dka[D / 8][4], dva[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    dka[n][0] = dka[n][1] = dka[n][2] = dka[n][3] = 0.0f;
    dva[n][0] = dva[n][1] = dva[n][2] = dva[n][3] = 0.0f;
  }
  for (int qt = kt; qt < tiles; ++qt) {
    const int q0 = qt * kTile;
    const int buffer = (qt - kt) & 1;
    const Bf16* qs = qdo + 2 * buffer * T::kElements;
    const Bf16* dos = qs + T::kElements;
    const float* lse_s = stats + buffer * 2 * kTile;
    const float* delta_s = lse_s + kTile;
    if (qt + 1 < tiles) {  // the next query tile into the other buffer, read two tiles ago
      load_queries(qt + 1, buffer ^ 1);
      WaitCopies<1>();
    } else {
      WaitCopies<0>();
    }
    __syncthreads();  // this tile's copies (and K and V) have landed everywhere
    float st[8][4], dpt[8][4];  // [query block j]: rows = the warp's keys
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) st[j][e] = dpt[j][e] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < D / 16; kk += 2) {
      // The warp's K and V rows as A operands, from shared memory each time: kept in
      // registers they would push D = 128 into spills.
      uint32_t ka[2][4], va[2][4];
      LoadA<kLd>(ka[0], ks, warp * 16, kk, lane);
      LoadA<kLd>(ka[1], ks, warp * 16, kk + 1, lane);
      LoadA<kLd>(va[0], vs, warp * 16, kk, lane);
      LoadA<kLd>(va[1], vs, warp * 16, kk + 1, lane);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        uint32_t b[4];
        LoadBRows<kLd>(b, qs, j, kk, lane);
        Mma(st[j], ka[0], b[0], b[1]);
        Mma(st[j], ka[1], b[2], b[3]);
        LoadBRows<kLd>(b, dos, j, kk, lane);
        Mma(dpt[j], va[0], b[0], b[1]);
        Mma(dpt[j], va[1], b[2], b[3]);
      }
    }
    const bool edge = qt == kt || q0 + kTile > s;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = 8 * j + 2 * t + (e & 1);
        const int query = q0 + col;
        const int key = e < 2 ? key_lo : key_hi;
        float p = exp2f(st[j][e] * scale2 - lse_s[col]);
        if (edge && (key > query || query >= s)) p = 0.0f;
        st[j][e] = p;
        dpt[j][e] = p * (dpt[j][e] - delta_s[col]) * scale;
      }
    }
    // dV += P^T dO and dK += dS^T Q over the tile's 64 queries; dS^T to shared memory.
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t pa[4], dsa[4];
      AFromC(pa, st[2 * kk], st[2 * kk + 1]);
      AFromC(dsa, dpt[2 * kk], dpt[2 * kk + 1]);
      Bf16* ds_row = dss + (warp * 16 + g) * kDsLd + 16 * kk + 2 * t;
      *reinterpret_cast<uint32_t*>(ds_row) = dsa[0];
      *reinterpret_cast<uint32_t*>(ds_row + 8 * kDsLd) = dsa[1];
      *reinterpret_cast<uint32_t*>(ds_row + 8) = dsa[2];
      *reinterpret_cast<uint32_t*>(ds_row + 8 * kDsLd + 8) = dsa[3];
#pragma unroll
      for (int n = 0; n < D / 8; n += 2) {
        uint32_t b[4];
        LoadBCols<kLd>(b, dos, kk, n, lane);
        Mma(dva[n], pa, b[0], b[1]);
        Mma(dva[n + 1], pa, b[2], b[3]);
        LoadBCols<kLd>(b, qs, kk, n, lane);
        Mma(dka[n], dsa, b[0], b[1]);
        Mma(dka[n + 1], dsa, b[2], b[3]);
      }
    }
    __syncthreads();  // all of dS^T is there
    // dQ (the warp's 16 queries) = dS K: A[query][key] = dS^T[key][query], read
    // transposed: matrices (keys +0, queries +0), (keys +0, queries +8), (keys +8,
    // queries +0), (keys +8, queries +8).
    float dq[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t a[4];
      const int m = lane / 8;
      LoadMatrix4T(a, dss + (16 * kk + lane % 8 + (m >> 1) * 8) * kDsLd + warp * 16 + (m & 1) * 8);
      MmaAcrossColumns<D, kLd>(dq, a, ks, kk, lane);
    }
    const int qrow_lo = q0 + warp * 16 + g, qrow_hi = qrow_lo + 8;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const int col = 8 * n + 2 * t;
      if (qrow_lo < s) {
        float* dst = dq_accum + abase + static_cast<int64_t>(qrow_lo) * D + col;
        atomicAdd(dst, dq[n][0]);
        atomicAdd(dst + 1, dq[n][1]);
      }
      if (qrow_hi < s) {
        float* dst = dq_accum + abase + static_cast<int64_t>(qrow_hi) * D + col;
        atomicAdd(dst, dq[n][2]);
        atomicAdd(dst + 1, dq[n][3]);
      }
    }
    __syncthreads();  // this tile's buffers and dS are no longer read
  }
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    const int col = 8 * n + 2 * t;
    if (key_lo < s) {
      const int64_t at = gbase + key_lo * gs.row + col;
      *reinterpret_cast<uint32_t*>(dk + at) = PackBf16(dka[n][0], dka[n][1]);
      *reinterpret_cast<uint32_t*>(dv + at) = PackBf16(dva[n][0], dva[n][1]);
    }
    if (key_hi < s) {
      const int64_t at = gbase + key_hi * gs.row + col;
      *reinterpret_cast<uint32_t*>(dk + at) = PackBf16(dka[n][2], dka[n][3]);
      *reinterpret_cast<uint32_t*>(dv + at) = PackBf16(dva[n][2], dva[n][3]);
    }
  }
}

// Eight lanes per (position, sequence, head), walked in memory order (m = (qi * b + bi)
// * heads + j, so a warp reads 4 whole rows of d), 16 bytes a load.
__global__ void AttentionDeltaKernel(const Bf16* ctx, const Bf16* dctx, float* delta, int64_t s,
                                     int64_t b, int64_t heads, int64_t d) {
  const int64_t rows = b * heads * s;
  const int64_t m = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 8;
  const int part = threadIdx.x % 8;
  float sum = 0.0f;
  if (m < rows) {
    for (int64_t e = part * 8; e < d; e += 64) {
      const uint4 x = *reinterpret_cast<const uint4*>(ctx + m * d + e);
      const uint4 y = *reinterpret_cast<const uint4*>(dctx + m * d + e);
      const __nv_bfloat162* xa = reinterpret_cast<const __nv_bfloat162*>(&x);
      const __nv_bfloat162* ya = reinterpret_cast<const __nv_bfloat162*>(&y);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 xf = __bfloat1622float2(xa[i]), yf = __bfloat1622float2(ya[i]);
        sum += xf.x * yf.x + xf.y * yf.y;
      }
    }
  }
  // The 8 lanes of a row, in a fixed order.
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  sum += __shfl_xor_sync(0xffffffffu, sum, 4);
  if (m < rows && part == 0) {
    const int64_t qi = m / (b * heads), bj = m % (b * heads);
    delta[bj * s + qi] = sum;
  }
}

// dq from its f32 accumulator (head layout [bh, s, D]) into bf16 at gs, 8 elements a
// thread.
template <int D>
__global__ void DqToBf16Kernel(const float* accum, Bf16* dq, AttentionStrides gs, int heads,
                               int s, int64_t vectors) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / (D / 8), bh = row / s;
    const int c = static_cast<int>(i % (D / 8)) * 8, si = static_cast<int>(row % s);
    const float4 a = *reinterpret_cast<const float4*>(accum + i * 8);
    const float4 b = *reinterpret_cast<const float4*>(accum + i * 8 + 4);
    uint4 packed;
    packed.x = PackBf16(a.x, a.y);
    packed.y = PackBf16(a.z, a.w);
    packed.z = PackBf16(b.x, b.y);
    packed.w = PackBf16(b.z, b.w);
    *reinterpret_cast<uint4*>(dq + HeadOffset(gs, bh, heads) + si * gs.row + c) = packed;
  }
}

// Grids put the (sequence, head) on y, which holds at most 65535; the strides must keep
// every row's 16-byte vectors aligned.
bool Fits(int64_t bh, int64_t s, const AttentionStrides& a) {
  return bh <= 65535 && s <= (int64_t{1} << 30) && a.batch % 8 == 0 && a.head % 8 == 0 &&
         a.row % 8 == 0;
}

template <int D>
cudaError_t Forward(const void* q, const void* k, const void* v, const AttentionStrides& in,
                    void* out, const AttentionStrides& os, float* lse, int64_t bh, int heads,
                    int64_t s, float scale, cudaStream_t stream) {
  constexpr int kBytes = Tiles<D>::kForwardBytes;
  cudaError_t e = cudaFuncSetAttribute(FlashForwardKernel<D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((s + kTile - 1) / kTile), static_cast<unsigned>(bh));
  FlashForwardKernel<D><<<grid, kThreads, kBytes, stream>>>(
      static_cast<const Bf16*>(q), static_cast<const Bf16*>(k), static_cast<const Bf16*>(v), in,
      static_cast<Bf16*>(out), os, lse, heads, static_cast<int>(s), scale);
  return cudaGetLastError();
}

template <int D>
cudaError_t Backward(const void* q, const void* k, const void* v, const AttentionStrides& in,
                     const void* dout, const AttentionStrides& os, const float* lse,
                     const float* delta, void* dq, void* dk, void* dv, const AttentionStrides& gs,
                     float* dq_accum, int64_t bh, int heads, int64_t s, float scale,
                     cudaStream_t stream) {
  constexpr int kBytes = Tiles<D>::kBackwardBytes;
  const int64_t count = bh * s * D;
  cudaError_t e = cudaMemsetAsync(dq_accum, 0, static_cast<size_t>(count) * 4, stream);
  if (e != cudaSuccess) return e;
  e = cudaFuncSetAttribute(FlashBackwardKernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           kBytes);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>((s + kTile - 1) / kTile), static_cast<unsigned>(bh));
  FlashBackwardKernel<D><<<grid, kThreads, kBytes, stream>>>(
      static_cast<const Bf16*>(q), static_cast<const Bf16*>(k), static_cast<const Bf16*>(v), in,
      static_cast<const Bf16*>(dout), os, lse, delta, static_cast<Bf16*>(dk),
      static_cast<Bf16*>(dv), gs, dq_accum, heads, static_cast<int>(s), scale);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  const int64_t vectors = count / 8;
  const int64_t blocks = (vectors + 255) / 256;
  DqToBf16Kernel<D><<<static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8), 256, 0,
                      stream>>>(dq_accum, static_cast<Bf16*>(dq), gs, heads, static_cast<int>(s),
                                vectors);
  return cudaGetLastError();
}

}  // namespace

bool FlashSupported(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

AttentionStrides HeadLayout(int64_t heads, int64_t s, int64_t d) {
  return {heads * s * d, s * d, d};
}

AttentionStrides RowLayout(int64_t b, int64_t width, int64_t d) { return {width, d, b * width}; }

cudaError_t FlashForward(const void* q, const void* k, const void* v,
                         const AttentionStrides& qkv_strides, void* out,
                         const AttentionStrides& out_strides, float* lse, int64_t b,
                         int64_t heads, int64_t s, int64_t d, float scale, cudaStream_t stream) {
  const int64_t bh = b * heads;
  if (bh == 0 || s == 0) return cudaSuccess;
  if (!Fits(bh, s, qkv_strides) || !Fits(bh, s, out_strides)) return cudaErrorInvalidValue;
  const int h = static_cast<int>(heads);
  if (d == 64) {
    return Forward<64>(q, k, v, qkv_strides, out, out_strides, lse, bh, h, s, scale, stream);
  }
  if (d == 128) {
    return Forward<128>(q, k, v, qkv_strides, out, out_strides, lse, bh, h, s, scale, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t AttentionDelta(const void* ctx, const void* dctx, float* delta, int64_t s, int64_t b,
                           int64_t heads, int64_t d, cudaStream_t stream) {
  const int64_t rows = b * heads * s;
  if (rows == 0) return cudaSuccess;
  if (d % 8 != 0) return cudaErrorInvalidValue;
  AttentionDeltaKernel<<<static_cast<unsigned>((rows + 31) / 32), 256, 0, stream>>>(
      static_cast<const Bf16*>(ctx), static_cast<const Bf16*>(dctx), delta, s, b, heads, d);
  return cudaGetLastError();
}

cudaError_t FlashBackward(const void* q, const void* k, const void* v,
                          const AttentionStrides& qkv_strides, const void* dout,
                          const AttentionStrides& out_strides, const float* lse,
                          const float* delta, void* dq, void* dk, void* dv,
                          const AttentionStrides& grad_strides, float* dq_accum, int64_t b,
                          int64_t heads, int64_t s, int64_t d, float scale, cudaStream_t stream) {
  const int64_t bh = b * heads;
  if (bh == 0 || s == 0) return cudaSuccess;
  if (!Fits(bh, s, qkv_strides) || !Fits(bh, s, out_strides) || !Fits(bh, s, grad_strides)) {
    return cudaErrorInvalidValue;
  }
  const int h = static_cast<int>(heads);
  if (d == 64) {
    return Backward<64>(q, k, v, qkv_strides, dout, out_strides, lse, delta, dq, dk, dv,
                        grad_strides, dq_accum, bh, h, s, scale, stream);
  }
  if (d == 128) {
    return Backward<128>(q, k, v, qkv_strides, dout, out_strides, lse, delta, dq, dk, dv,
                         grad_strides, dq_accum, bh, h, s, scale, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace gpt_gpu
}  // namespace loom
