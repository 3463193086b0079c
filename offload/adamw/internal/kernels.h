// The per-ISA tile kernels behind offload/adamw/cpu_adamw.h, exposed so that tests and
// benchmarks can name each one: the scalar reference (internal/adamw_scalar.cc) and the
// vector kernels written once with Highway (internal/adamw_simd.cc, simd_tile_kernels.h).
// Callers outside this package use AdamWStep, which checks its arguments, splits the
// arrays into tiles and picks the ISA.
//
// Each kernel updates one tile in a single pass: it reads param, grad, m and v of an
// element once and writes param, m, v (and the optional 16-bit copy of param) once. The
// element math is the same sequence of IEEE float operations in every kernel (written out
// in internal/adamw_scalar.cc), so every ISA gives the scalar kernel's bits. The 8-bit
// kernel keeps a block's new m and v in an L1-resident scratch array between computing them
// and encoding them (the block's scale is their absmax).
//
// The GPU AdamW's nvcc build includes this header too, so it includes nothing but
// <cstdint>.
#ifndef LOOM_OFFLOAD_ADAMW_INTERNAL_KERNELS_H_
#define LOOM_OFFLOAD_ADAMW_INTERNAL_KERNELS_H_

#include <cstdint>

namespace loom {

struct AdamWHyper;

namespace adamw_internal {

// StepConstants: the per-step scalars every element uses, derived once from AdamWHyper (in
// double, rounded to float once) by the dispatcher.
struct StepConstants {
  float beta1;
  float one_minus_beta1;
  float beta2;
  float one_minus_beta2;
  float grad_scale;  // multiplies each gradient
  float eps;
  float decay;         // 1 - lr * weight_decay (decoupled weight decay)
  float step_size;     // lr / (1 - beta1^step)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^step)
};

// DeriveStepConstants derives a step's constants from the hyperparameters (defined in
// cpu_adamw.cc). The GPU AdamW (offload/gpu) uses it too, so both multiply by the same
// floats.
StepConstants DeriveStepConstants(const AdamWHyper& hyper);

// Which 16-bit copy of the updated params a kernel writes, if any.
enum class HalfKind : int32_t { kNone, kBF16, kF16 };

// TileArgs: one tile. Pointers are to the tile's first element (and, for 8-bit state, the
// first block's scales); the tile of an 8-bit state starts on a block boundary, and only
// its last block may be shorter than block_size.
struct TileArgs {
  float* params;
  const float* grads;
  void* m;  // float, bf16 bits (uint16_t) or 8-bit codes (uint8_t)
  void* v;
  float* m_absmax;  // 8-bit state: one scale per block, read and rewritten
  float* v_absmax;
  uint16_t* half;      // bf16 or f16 bits of the updated params; null for kNone
  int64_t count;       // elements in the tile, >= 0
  int64_t block_size;  // 8-bit state only; a multiple of 64 in [256, 2048]
  HalfKind half_kind;
};

// The largest block an 8-bit kernel's scratch holds.
inline constexpr int64_t kMaxBlockSize = 2048;

using TileKernel = void (*)(const StepConstants& constants, const TileArgs& tile);

// One ISA's kernels, one per state format.
struct TileKernels {
  TileKernel f32;
  TileKernel bf16;
  TileKernel blockwise8;
};

void StepF32Scalar(const StepConstants& constants, const TileArgs& tile);
void StepBF16Scalar(const StepConstants& constants, const TileArgs& tile);
void StepBlockwise8Scalar(const StepConstants& constants, const TileArgs& tile);

}  // namespace adamw_internal
}  // namespace loom

#endif  // LOOM_OFFLOAD_ADAMW_INTERNAL_KERNELS_H_
