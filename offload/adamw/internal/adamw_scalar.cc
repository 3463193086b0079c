// The scalar kernels: the reference that the AVX2 and AVX-512 kernels reproduce bit for
// bit. Built with -fno-tree-vectorize (so "scalar" in the benchmark means one element at a
// time) and, like the whole package, -ffp-contract=off.
//
// Every element goes through Update, and this sequence of single-rounding IEEE float
// operations, in this order, is the definition of the step:
//
//   g = grad * grad_scale
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * (g * g)
//   d = sqrt(v) * (1 / sqrt(1 - beta2^step)) + eps
//   p = p * (1 - lr * weight_decay) - (lr / (1 - beta1^step)) * (m / d)
//
// which is PyTorch's AdamW (decoupled weight decay applied to the old p, bias corrections
// folded into the step size and the denominator).
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/half.h"
#include "offload/adamw/internal/code_map.h"
#include "offload/adamw/internal/kernels.h"

namespace loom {
namespace adamw_internal {
namespace {

inline float Update(const StepConstants& c, float p, float grad, float& m, float& v) {
  const float g = grad * c.grad_scale;
  m = c.beta1 * m + c.one_minus_beta1 * g;
  v = c.beta2 * v + c.one_minus_beta2 * (g * g);
  const float d = std::sqrt(v) * c.inv_sqrt_bc2 + c.eps;
  return p * c.decay - c.step_size * (m / d);
}

inline void StoreHalf(HalfKind kind, uint16_t* half, int64_t i, float p) {
  switch (kind) {
    case HalfKind::kNone:
      break;
    case HalfKind::kBF16:
      half[i] = ToBFloat16(p).bits;
      break;
    case HalfKind::kF16:
      half[i] = ToFloat16(p).bits;
      break;
  }
}

// Per-element storage of m and v.
struct F32Storage {
  using Elem = float;
  static float Load(const float* base, int64_t i) { return base[i]; }
  static void Store(float* base, int64_t i, float value) { base[i] = value; }
};

struct BF16Storage {
  using Elem = uint16_t;
  static float Load(const uint16_t* base, int64_t i) { return ToFloat(BFloat16{base[i]}); }
  static void Store(uint16_t* base, int64_t i, float value) { base[i] = ToBFloat16(value).bits; }
};

template <typename Storage>
void StepElementwise(const StepConstants& c, const TileArgs& tile) {
  using Elem = typename Storage::Elem;
  Elem* const m = static_cast<Elem*>(tile.m);
  Elem* const v = static_cast<Elem*>(tile.v);
  for (int64_t i = 0; i < tile.count; ++i) {
    float mi = Storage::Load(m, i);
    float vi = Storage::Load(v, i);
    const float p = Update(c, tile.params[i], tile.grads[i], mi, vi);
    tile.params[i] = p;
    Storage::Store(m, i, mi);
    Storage::Store(v, i, vi);
    StoreHalf(tile.half_kind, tile.half, i, p);
  }
}

// The level of every code, tabulated once; MagnitudeValue is exact, so decoding by table
// gives the same bits as the vector kernels' arithmetic decoding.
struct Levels {
  float signed_magnitude[128];
  float unsigned_magnitude[256];
};

const Levels& CodeLevels() {
  static const Levels levels = [] {
    Levels l;
    for (uint32_t c = 0; c < 128; ++c) {
      l.signed_magnitude[c] = MagnitudeValue(c, kSignedMagnitudeBits);
    }
    for (uint32_t c = 0; c < 256; ++c) {
      l.unsigned_magnitude[c] = MagnitudeValue(c, kUnsignedMagnitudeBits);
    }
    return l;
  }();
  return levels;
}

}  // namespace

void StepF32Scalar(const StepConstants& constants, const TileArgs& tile) {
  StepElementwise<F32Storage>(constants, tile);
}

void StepBF16Scalar(const StepConstants& constants, const TileArgs& tile) {
  StepElementwise<BF16Storage>(constants, tile);
}

// Per block: decode, update and keep the new m and v in scratch while taking their absmax
// (pass A), then encode them against the new absmax (pass B).
void StepBlockwise8Scalar(const StepConstants& c, const TileArgs& tile) {
  const Levels& levels = CodeLevels();
  uint8_t* const m_codes = static_cast<uint8_t*>(tile.m);
  uint8_t* const v_codes = static_cast<uint8_t*>(tile.v);
  float m_new[kMaxBlockSize];
  float v_new[kMaxBlockSize];
  for (int64_t begin = 0, block = 0; begin < tile.count; begin += tile.block_size, ++block) {
    const int64_t n = tile.count - begin < tile.block_size ? tile.count - begin : tile.block_size;
    const float m_scale = tile.m_absmax[block];
    const float v_scale = tile.v_absmax[block];
    uint32_t m_max = 0;
    uint32_t v_max = 0;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t i = begin + j;
      const uint8_t mc = m_codes[i];
      const float m_magnitude = levels.signed_magnitude[mc & 0x7Fu] * m_scale;
      float mi = BitsToFloat(FloatToBits(m_magnitude) | (static_cast<uint32_t>(mc & 0x80u) << 24));
      float vi = levels.unsigned_magnitude[v_codes[i]] * v_scale;
      const float p = Update(c, tile.params[i], tile.grads[i], mi, vi);
      tile.params[i] = p;
      StoreHalf(tile.half_kind, tile.half, i, p);
      m_new[j] = mi;
      v_new[j] = vi;
      m_max = AbsBits(mi) > m_max ? AbsBits(mi) : m_max;
      v_max = AbsBits(vi) > v_max ? AbsBits(vi) : v_max;
    }
    const float m_absmax = BitsToFloat(m_max);
    const float v_absmax = BitsToFloat(v_max);
    const float m_inv = InverseScale(m_absmax);
    const float v_inv = InverseScale(v_absmax);
    for (int64_t j = 0; j < n; ++j) {
      m_codes[begin + j] = EncodeSigned(m_new[j], m_inv);
      v_codes[begin + j] = EncodeUnsigned(v_new[j], v_inv);
    }
    tile.m_absmax[block] = m_absmax;
    tile.v_absmax[block] = v_absmax;
  }
}

}  // namespace adamw_internal
}  // namespace loom
