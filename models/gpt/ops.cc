#include "models/gpt/ops.h"

#include <cmath>
#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/vector_math.h"

namespace loom {

namespace {

absl::Status CheckRows(const char* name, size_t x_size, size_t width) {
  if (width == 0 || x_size % width != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", x_size,
                                                   " values are not rows of gamma's width ",
                                                   width));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LayerNormOutput> LayerNormForward(absl::Span<const float> x,
                                                 absl::Span<const float> gamma,
                                                 absl::Span<const float> beta, float eps) {
  constexpr char kName[] = "LayerNormForward";
  if (beta.size() != gamma.size()) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": beta has ", beta.size(),
                                                   " values, gamma ", gamma.size()));
  }
  if (!(eps > 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": eps ", eps, " must be > 0"));
  }
  const size_t n = gamma.size();
  if (absl::Status s = CheckRows(kName, x.size(), n); !s.ok()) return s;
  const size_t rows = x.size() / n;
  LayerNormOutput out;
  out.y.resize(x.size());
  out.mean.resize(rows);
  out.rstd.resize(rows);
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * n;
    double sum = 0.0;
    for (size_t j = 0; j < n; ++j) sum += static_cast<double>(xr[j]);
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    double sq = 0.0;
    for (size_t j = 0; j < n; ++j) {
      const double d = static_cast<double>(xr[j] - mean);
      sq += d * d;
    }
    const float var = static_cast<float>(sq / static_cast<double>(n));
    const float rstd = 1.0f / std::sqrt(var + eps);
    out.mean[r] = mean;
    out.rstd[r] = rstd;
    float* yr = out.y.data() + r * n;
    for (size_t j = 0; j < n; ++j) yr[j] = (xr[j] - mean) * rstd * gamma[j] + beta[j];
  }
  return out;
}

absl::StatusOr<LayerNormGrads> LayerNormBackward(absl::Span<const float> x,
                                                 absl::Span<const float> gamma,
                                                 absl::Span<const float> mean,
                                                 absl::Span<const float> rstd,
                                                 absl::Span<const float> dy) {
  constexpr char kName[] = "LayerNormBackward";
  const size_t n = gamma.size();
  if (absl::Status s = CheckRows(kName, x.size(), n); !s.ok()) return s;
  const size_t rows = x.size() / n;
  if (dy.size() != x.size() || mean.size() != rows || rstd.size() != rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        kName, ": x has ", x.size(), " values (", rows, " rows of ", n, "), dy ", dy.size(),
        ", mean ", mean.size(), ", rstd ", rstd.size()));
  }
  LayerNormGrads grads;
  grads.dx.resize(x.size());
  std::vector<double> dgamma(n, 0.0), dbeta(n, 0.0);
  std::vector<float> xhat(n), g(n);
  for (size_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * n;
    const float* dyr = dy.data() + r * n;
    double sum_g = 0.0, sum_gx = 0.0;
    for (size_t j = 0; j < n; ++j) {
      xhat[j] = (xr[j] - mean[r]) * rstd[r];
      g[j] = dyr[j] * gamma[j];
      sum_g += static_cast<double>(g[j]);
      sum_gx += static_cast<double>(g[j]) * static_cast<double>(xhat[j]);
      dgamma[j] += static_cast<double>(dyr[j]) * static_cast<double>(xhat[j]);
      dbeta[j] += static_cast<double>(dyr[j]);
    }
    const float mean_g = static_cast<float>(sum_g / static_cast<double>(n));
    const float mean_gx = static_cast<float>(sum_gx / static_cast<double>(n));
    float* dxr = grads.dx.data() + r * n;
    for (size_t j = 0; j < n; ++j) dxr[j] = rstd[r] * (g[j] - mean_g - xhat[j] * mean_gx);
  }
  grads.dgamma.assign(dgamma.begin(), dgamma.end());
  grads.dbeta.assign(dbeta.begin(), dbeta.end());
  return grads;
}

std::vector<float> GeluForward(absl::Span<const float> x) {
  std::vector<float> y(x.size());
  // The sizes match by construction.
  GeluTanh(x, absl::MakeSpan(y)).IgnoreError();
  return y;
}

absl::StatusOr<std::vector<float>> GeluBackward(absl::Span<const float> x,
                                                absl::Span<const float> dy) {
  if (x.size() != dy.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GeluBackward: x has ", x.size(), " values, dy ", dy.size()));
  }
  std::vector<float> dx(x.size());
  LOOM_RETURN_IF_ERROR(GeluTanhBackward(x, dy, absl::MakeSpan(dx)));
  return dx;
}

}  // namespace loom
