// Highway compiles this file once per target it supports (foreach_target.h includes it
// again for each); the code outside HWY_ONCE is the per-target kernels, the code
// inside it the dispatching entry points.
#include "core/vector_math.h"

#include <algorithm>
#include <cstddef>
#include <limits>

#include "absl/strings/str_cat.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/vector_math.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep (must precede highway.h)
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace loom {
namespace vector_math_internal {
namespace HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;
using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// The widest vector of this target, for the partial vector at the end of a span.
constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

// Every kernel runs whole vectors with unaligned loads and stores, then the last,
// partial vector through a stack copy padded with `pad`, so no access falls outside
// the caller's span on any target (Highway's masked loads below AVX2 read the whole
// vector) and the tail computes exactly as the body does.
template <typename Body>
HWY_INLINE void ForEachVector(size_t n, const Body& body) {
  const size_t lanes = hn::Lanes(D());
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) body(i, lanes);
  if (i < n) body(i, n - i);
}

// Part: `count` values at p (count <= Lanes), as one vector padded with `pad`.
struct Part {
  HWY_ALIGN float buffer[kMaxLanes];
  Part(const float* p, size_t count, float pad) {
    for (size_t j = 0; j < kMaxLanes; ++j) buffer[j] = j < count ? p[j] : pad;
  }
};

HWY_INLINE V LoadPart(const float* p, size_t count, float pad = 0.0f) {
  if (count == hn::Lanes(D())) return hn::LoadU(D(), p);
  const Part part(p, count, pad);
  return hn::Load(D(), part.buffer);
}

HWY_INLINE void StorePart(V v, float* p, size_t count) {
  if (count == hn::Lanes(D())) {
    hn::StoreU(v, D(), p);
    return;
  }
  // Zeroed only to quiet GCC's -O2 maybe-uninitialized, which cannot see the store.
  HWY_ALIGN float buffer[kMaxLanes] = {};
  hn::Store(v, D(), buffer);
  for (size_t j = 0; j < count; ++j) p[j] = buffer[j];
}

// c (x + a x^3) = c x (1 + a x^2), the argument of tanh in both GELU passes.
HWY_INLINE V GeluInner(V x) {
  const D d;
  const V x2 = hn::Mul(x, x);
  const V poly = hn::MulAdd(hn::Set(d, 0.044715f), x2, hn::Set(d, 1.0f));
  return hn::Mul(hn::Mul(hn::Set(d, 0.7978845608028654f), x), poly);
}

void GeluKernel(const float* x, float* y, size_t n) {
  const D d;
  ForEachVector(n, [&](size_t i, size_t count) {
    const V v = LoadPart(x + i, count);
    const V t = hn::Tanh(d, GeluInner(v));
    const V half_x = hn::Mul(hn::Set(d, 0.5f), v);
    StorePart(hn::MulAdd(half_x, t, half_x), y + i, count);  // 0.5 x (1 + t)
  });
}

void GeluBackwardKernel(const float* x, const float* dy, float* dx, size_t n) {
  const D d;
  const V half = hn::Set(d, 0.5f);
  const V one = hn::Set(d, 1.0f);
  ForEachVector(n, [&](size_t i, size_t count) {
    const V v = LoadPart(x + i, count);
    const V t = hn::Tanh(d, GeluInner(v));
    // d(inner)/dx = c (1 + 3 a x^2).
    const V dinner = hn::Mul(hn::Set(d, 0.7978845608028654f),
                             hn::MulAdd(hn::Set(d, 3.0f * 0.044715f), hn::Mul(v, v), one));
    // 0.5 (1 + t) + 0.5 x (1 - t^2) dinner.
    const V sech2 = hn::NegMulAdd(t, t, one);
    const V grad = hn::MulAdd(hn::Mul(hn::Mul(half, v), sech2), dinner, hn::MulAdd(half, t, half));
    StorePart(hn::Mul(LoadPart(dy + i, count), grad), dx + i, count);
  });
}

float MaxKernel(const float* x, size_t n) {
  const D d;
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  V best = hn::Set(d, kLowest);
  // x86's max ignores a NaN operand, so NaNs are tracked beside it and win at the end.
  V nan_seen = hn::Zero(d);
  ForEachVector(n, [&](size_t i, size_t count) {
    const V v = LoadPart(x + i, count, kLowest);
    best = hn::Max(best, v);
    nan_seen = hn::Or(nan_seen, hn::VecFromMask(d, hn::IsNaN(v)));
  });
  if (!hn::AllFalse(d, hn::MaskFromVec(nan_seen))) return std::numeric_limits<float>::quiet_NaN();
  // The lanes are combined here rather than by MaxOfLanes: Highway 1.0.3's EMU128
  // MaxOfLanes starts from the lowest finite float, so an empty or all -Inf input came
  // back as -3.4e38 there (seen in clang builds, which generate that target).
  HWY_ALIGN float lanes[hn::MaxLanes(D())];
  hn::Store(best, d, lanes);
  float result = lanes[0];
  for (size_t i = 1; i < hn::Lanes(d); ++i) result = lanes[i] > result ? lanes[i] : result;
  return result;
}

float ExpShiftKernel(float* x, size_t n, float shift) {
  const D d;
  const V s = hn::Set(d, shift);
  V sum = hn::Zero(d);
  ForEachVector(n, [&](size_t i, size_t count) {
    const V e = hn::Exp(d, hn::Sub(LoadPart(x + i, count), s));
    StorePart(e, x + i, count);
    sum = hn::Add(sum, hn::IfThenElseZero(hn::FirstN(d, count), e));
  });
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

void ScaleKernel(float* x, size_t n, float factor) {
  const V f = hn::Set(D(), factor);
  ForEachVector(n, [&](size_t i, size_t count) {
    StorePart(hn::Mul(LoadPart(x + i, count), f), x + i, count);
  });
}

// Sums in double: f32 values promoted into f64 lanes (half a float vector at a time),
// two accumulators, then the lanes added in lane order, then the scalar tail. The
// order depends only on n and the target, not on the caller's threads.
using DD = hn::ScalableTag<double>;
using DF = hn::Rebind<float, DD>;  // as many floats as DD has doubles
using VD = hn::Vec<DD>;

HWY_INLINE double LanesInOrder(VD v) {
  HWY_ALIGN double lanes[hn::MaxLanes(DD())];
  hn::Store(v, DD(), lanes);
  double sum = 0.0;
  for (size_t i = 0; i < hn::Lanes(DD()); ++i) sum += lanes[i];
  return sum;
}

// Runs body(i) for i = 0, N, 2N, ... while a whole half vector fits, into two
// accumulators alternately; returns the lanes' sum and where the tail starts.
template <typename Term>
HWY_INLINE double SumTerms(size_t n, const Term& term, size_t* tail) {
  const DD dd;
  const size_t lanes = hn::Lanes(dd);
  VD acc0 = hn::Zero(dd), acc1 = hn::Zero(dd);
  size_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    acc0 = hn::Add(acc0, term(i));
    acc1 = hn::Add(acc1, term(i + lanes));
  }
  if (i + lanes <= n) {
    acc0 = hn::Add(acc0, term(i));
    i += lanes;
  }
  *tail = i;
  return LanesInOrder(hn::Add(acc0, acc1));
}

double SumKernel(const float* x, size_t n) {
  const DD dd;
  const DF df;
  size_t i = 0;
  double sum = SumTerms(n, [&](size_t j) { return hn::PromoteTo(dd, hn::LoadU(df, x + j)); }, &i);
  for (; i < n; ++i) sum += static_cast<double>(x[i]);
  return sum;
}

double SquaredDeviationKernel(const float* x, size_t n, float mean) {
  const DD dd;
  const DF df;
  const auto m = hn::Set(df, mean);
  size_t i = 0;
  double sum = SumTerms(n, [&](size_t j) {
    const VD d = hn::PromoteTo(dd, hn::Sub(hn::LoadU(df, x + j), m));
    return hn::Mul(d, d);
  }, &i);
  for (; i < n; ++i) {
    const double d = static_cast<double>(x[i] - mean);
    sum += d * d;
  }
  return sum;
}

void NormGradientSumsKernel(const float* x, const float* dy, const float* gamma, size_t n,
                            float mean, float rstd, double* sum_g, double* sum_g_xhat) {
  const DD dd;
  const DF df;
  const auto m = hn::Set(df, mean);
  const auto r = hn::Set(df, rstd);
  size_t i = 0;
  // g and xhat in f32, as the scalar pass computes them; their product in double.
  double g_total = SumTerms(n, [&](size_t j) {
    return hn::PromoteTo(dd, hn::Mul(hn::LoadU(df, dy + j), hn::LoadU(df, gamma + j)));
  }, &i);
  double gx_total = SumTerms(n, [&](size_t j) {
    const VD g = hn::PromoteTo(dd, hn::Mul(hn::LoadU(df, dy + j), hn::LoadU(df, gamma + j)));
    const VD xhat = hn::PromoteTo(dd, hn::Mul(hn::Sub(hn::LoadU(df, x + j), m), r));
    return hn::Mul(g, xhat);
  }, &i);
  for (; i < n; ++i) {
    const float xhat = (x[i] - mean) * rstd;
    const float g = dy[i] * gamma[i];
    g_total += static_cast<double>(g);
    gx_total += static_cast<double>(g) * static_cast<double>(xhat);
  }
  *sum_g = g_total;
  *sum_g_xhat = gx_total;
}

// y = (x - mean) * rstd * gamma + beta, in the formula's order.
void NormalizeRowKernel(const float* x, const float* gamma, const float* beta, size_t n,
                        float mean, float rstd, float* y) {
  const D d;
  const V m = hn::Set(d, mean);
  const V r = hn::Set(d, rstd);
  ForEachVector(n, [&](size_t i, size_t count) {
    const V xhat = hn::Mul(hn::Sub(LoadPart(x + i, count), m), r);
    StorePart(hn::Add(hn::Mul(xhat, LoadPart(gamma + i, count)), LoadPart(beta + i, count)),
              y + i, count);
  });
}

// dx = rstd * (dy * gamma - mean_g - xhat * mean_g_xhat), xhat = (x - mean) * rstd.
void NormRowBackwardKernel(const float* x, const float* dy, const float* gamma, size_t n,
                           float mean, float rstd, float mean_g, float mean_g_xhat, float* dx) {
  const D d;
  const V m = hn::Set(d, mean);
  const V r = hn::Set(d, rstd);
  const V mg = hn::Set(d, mean_g);
  const V mgx = hn::Set(d, mean_g_xhat);
  ForEachVector(n, [&](size_t i, size_t count) {
    const V xhat = hn::Mul(hn::Sub(LoadPart(x + i, count), m), r);
    const V g = hn::Mul(LoadPart(dy + i, count), LoadPart(gamma + i, count));
    StorePart(hn::Mul(r, hn::Sub(hn::Sub(g, mg), hn::Mul(xhat, mgx))), dx + i, count);
  });
}

// dgamma += dy * xhat and dbeta += dy, in double lanes, xhat in f32.
void AccumulateNormParamGradsKernel(const float* x, const float* dy, size_t n, float mean,
                                    float rstd, double* dgamma, double* dbeta) {
  const DD dd;
  const DF df;
  const auto m = hn::Set(df, mean);
  const auto r = hn::Set(df, rstd);
  const size_t lanes = hn::Lanes(dd);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const VD dyd = hn::PromoteTo(dd, hn::LoadU(df, dy + i));
    const VD xhat = hn::PromoteTo(dd, hn::Mul(hn::Sub(hn::LoadU(df, x + i), m), r));
    hn::StoreU(hn::Add(hn::LoadU(dd, dgamma + i), hn::Mul(dyd, xhat)), dd, dgamma + i);
    hn::StoreU(hn::Add(hn::LoadU(dd, dbeta + i), dyd), dd, dbeta + i);
  }
  for (; i < n; ++i) {
    const float xhat = (x[i] - mean) * rstd;
    dgamma[i] += static_cast<double>(dy[i]) * static_cast<double>(xhat);
    dbeta[i] += static_cast<double>(dy[i]);
  }
}

// Columns in blocks of four vectors held in registers over every row, so each row's
// values are loaded once and `out` once per block; each column still adds its rows
// in row order (the bits of the scalar loop).
void AddRowsIntoKernel(const float* g, size_t rows, size_t stride, float* out, size_t n) {
  const D d;
  const size_t lanes = hn::Lanes(d);
  size_t j = 0;
  for (; j + 4 * lanes <= n; j += 4 * lanes) {
    V a0 = hn::LoadU(d, out + j), a1 = hn::LoadU(d, out + j + lanes);
    V a2 = hn::LoadU(d, out + j + 2 * lanes), a3 = hn::LoadU(d, out + j + 3 * lanes);
    const float* row = g + j;
    for (size_t r = 0; r < rows; ++r, row += stride) {
      a0 = hn::Add(a0, hn::LoadU(d, row));
      a1 = hn::Add(a1, hn::LoadU(d, row + lanes));
      a2 = hn::Add(a2, hn::LoadU(d, row + 2 * lanes));
      a3 = hn::Add(a3, hn::LoadU(d, row + 3 * lanes));
    }
    hn::StoreU(a0, d, out + j);
    hn::StoreU(a1, d, out + j + lanes);
    hn::StoreU(a2, d, out + j + 2 * lanes);
    hn::StoreU(a3, d, out + j + 3 * lanes);
  }
  for (; j < n; j += lanes) {
    const size_t count = std::min(lanes, n - j);
    V a = LoadPart(out + j, count);
    const float* row = g + j;
    for (size_t r = 0; r < rows; ++r, row += stride) a = hn::Add(a, LoadPart(row, count));
    StorePart(a, out + j, count);
  }
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace vector_math_internal
}  // namespace loom
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom {
namespace vector_math_internal {

HWY_EXPORT(GeluKernel);
HWY_EXPORT(GeluBackwardKernel);
HWY_EXPORT(MaxKernel);
HWY_EXPORT(ExpShiftKernel);
HWY_EXPORT(ScaleKernel);
HWY_EXPORT(SumKernel);
HWY_EXPORT(SquaredDeviationKernel);
HWY_EXPORT(NormGradientSumsKernel);
HWY_EXPORT(NormalizeRowKernel);
HWY_EXPORT(NormRowBackwardKernel);
HWY_EXPORT(AccumulateNormParamGradsKernel);
HWY_EXPORT(AddRowsIntoKernel);
HWY_EXPORT(TargetName);

}  // namespace vector_math_internal

namespace vmi = vector_math_internal;

absl::Status GeluTanh(absl::Span<const float> x, absl::Span<float> y) {
  if (x.size() != y.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GeluTanh: x has ", x.size(), " values, y ", y.size()));
  }
  HWY_DYNAMIC_DISPATCH(vmi::GeluKernel)(x.data(), y.data(), x.size());
  return absl::OkStatus();
}

absl::Status GeluTanhBackward(absl::Span<const float> x, absl::Span<const float> dy,
                              absl::Span<float> dx) {
  if (x.size() != dy.size() || x.size() != dx.size()) {
    return absl::InvalidArgumentError(absl::StrCat("GeluTanhBackward: x has ", x.size(),
                                                   " values, dy ", dy.size(), ", dx ",
                                                   dx.size()));
  }
  HWY_DYNAMIC_DISPATCH(vmi::GeluBackwardKernel)(x.data(), dy.data(), dx.data(), x.size());
  return absl::OkStatus();
}

float MaxValue(absl::Span<const float> x) {
  return HWY_DYNAMIC_DISPATCH(vmi::MaxKernel)(x.data(), x.size());
}

float ExpShiftInPlace(absl::Span<float> x, float shift) {
  return HWY_DYNAMIC_DISPATCH(vmi::ExpShiftKernel)(x.data(), x.size(), shift);
}

void ScaleInPlace(absl::Span<float> x, float factor) {
  HWY_DYNAMIC_DISPATCH(vmi::ScaleKernel)(x.data(), x.size(), factor);
}

void SoftmaxInPlace(absl::Span<float> row) {
  if (row.empty()) return;
  const float sum = ExpShiftInPlace(row, MaxValue(row));
  ScaleInPlace(row, 1.0f / sum);
}

double SumAsDouble(absl::Span<const float> x) {
  return HWY_DYNAMIC_DISPATCH(vmi::SumKernel)(x.data(), x.size());
}

double SquaredDeviationSum(absl::Span<const float> x, float mean) {
  return HWY_DYNAMIC_DISPATCH(vmi::SquaredDeviationKernel)(x.data(), x.size(), mean);
}

absl::StatusOr<NormGradientSums> LayerNormGradientSums(absl::Span<const float> x,
                                                       absl::Span<const float> dy,
                                                       absl::Span<const float> gamma,
                                                       float mean, float rstd) {
  if (dy.size() != x.size() || gamma.size() != x.size()) {
    return absl::InvalidArgumentError(absl::StrCat("LayerNormGradientSums: x has ", x.size(),
                                                   " values, dy ", dy.size(), ", gamma ",
                                                   gamma.size()));
  }
  NormGradientSums sums;
  HWY_DYNAMIC_DISPATCH(vmi::NormGradientSumsKernel)(x.data(), dy.data(), gamma.data(), x.size(),
                                                    mean, rstd, &sums.g, &sums.g_xhat);
  return sums;
}

absl::Status NormalizeRow(absl::Span<const float> x, float mean, float rstd,
                          absl::Span<const float> gamma, absl::Span<const float> beta,
                          absl::Span<float> y) {
  if (gamma.size() != x.size() || beta.size() != x.size() || y.size() != x.size()) {
    return absl::InvalidArgumentError(absl::StrCat("NormalizeRow: x has ", x.size(),
                                                   " values, gamma ", gamma.size(), ", beta ",
                                                   beta.size(), ", y ", y.size()));
  }
  HWY_DYNAMIC_DISPATCH(vmi::NormalizeRowKernel)(x.data(), gamma.data(), beta.data(), x.size(),
                                                mean, rstd, y.data());
  return absl::OkStatus();
}

absl::Status NormRowBackward(absl::Span<const float> x, absl::Span<const float> dy,
                             absl::Span<const float> gamma, float mean, float rstd, float mean_g,
                             float mean_g_xhat, absl::Span<float> dx) {
  if (dy.size() != x.size() || gamma.size() != x.size() || dx.size() != x.size()) {
    return absl::InvalidArgumentError(absl::StrCat("NormRowBackward: x has ", x.size(),
                                                   " values, dy ", dy.size(), ", gamma ",
                                                   gamma.size(), ", dx ", dx.size()));
  }
  HWY_DYNAMIC_DISPATCH(vmi::NormRowBackwardKernel)(x.data(), dy.data(), gamma.data(), x.size(),
                                                   mean, rstd, mean_g, mean_g_xhat, dx.data());
  return absl::OkStatus();
}

absl::Status AccumulateNormParamGrads(absl::Span<const float> x, absl::Span<const float> dy,
                                      float mean, float rstd, absl::Span<double> dgamma,
                                      absl::Span<double> dbeta) {
  if (dy.size() != x.size() || dgamma.size() != x.size() || dbeta.size() != x.size()) {
    return absl::InvalidArgumentError(absl::StrCat("AccumulateNormParamGrads: x has ", x.size(),
                                                   " values, dy ", dy.size(), ", dgamma ",
                                                   dgamma.size(), ", dbeta ", dbeta.size()));
  }
  HWY_DYNAMIC_DISPATCH(vmi::AccumulateNormParamGradsKernel)(x.data(), dy.data(), x.size(), mean,
                                                            rstd, dgamma.data(), dbeta.data());
  return absl::OkStatus();
}

absl::Status AddRowsInto(absl::Span<const float> g, size_t stride, size_t column,
                         absl::Span<float> out) {
  if (stride == 0 || g.size() % stride != 0 || column > stride || out.size() > stride - column) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AddRowsInto: ", g.size(), " values in rows of ", stride, " have no columns ", column,
        "..", column + out.size(), " (", out.size(), " sums)"));
  }
  if (out.empty() || g.empty()) return absl::OkStatus();
  HWY_DYNAMIC_DISPATCH(vmi::AddRowsIntoKernel)(g.data() + column, g.size() / stride, stride,
                                               out.data(), out.size());
  return absl::OkStatus();
}

absl::string_view VectorMathTarget() { return HWY_DYNAMIC_DISPATCH(vmi::TargetName)(); }

}  // namespace loom
#endif  // HWY_ONCE
