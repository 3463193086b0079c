#include "models/gpt/ops.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/parallel_for.h"
#include "core/status_macros.h"
#include "core/vector_math.h"

namespace loom {

namespace {

// Rows per thread for rows of `width` elements.
int64_t RowGrain(size_t width) {
  return std::max<int64_t>(1,
                           kElementwiseGrain / static_cast<int64_t>(std::max<size_t>(width, 1)));
}

// Element passes are split at multiples of kBlock, so every range but the last starts
// and ends on a vector boundary (the kernels' bits then do not depend on the split).
constexpr int64_t kBlock = 64;

void ForEachBlockRange(size_t n, absl::FunctionRef<void(size_t begin, size_t end)> body) {
  const int64_t blocks = (static_cast<int64_t>(n) + kBlock - 1) / kBlock;
  ParallelForEach(blocks, kElementwiseGrain / kBlock, [&](int64_t first, int64_t last) {
    body(static_cast<size_t>(first * kBlock),
         std::min(n, static_cast<size_t>(last * kBlock)));
  });
}

absl::Status CheckRows(const char* name, size_t x_size, size_t width) {
  if (width == 0 || x_size % width != 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": ", x_size,
                                                   " values are not rows of gamma's width ",
                                                   width));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LayerNormForward(absl::Span<const float> x, absl::Span<const float> gamma,
                              absl::Span<const float> beta, float eps, absl::Span<float> y,
                              absl::Span<float> mean, absl::Span<float> rstd) {
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
  if (y.size() != x.size() || mean.size() != rows || rstd.size() != rows) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": x has ", x.size(), " values (",
                                                   rows, " rows), y ", y.size(), ", mean ",
                                                   mean.size(), ", rstd ", rstd.size()));
  }
  // Rows are independent: each thread normalizes a range of them.
  ParallelForEach(static_cast<int64_t>(rows), RowGrain(n), [&](int64_t first, int64_t last) {
    for (size_t r = static_cast<size_t>(first); r < static_cast<size_t>(last); ++r) {
      const float* xr = x.data() + r * n;
      const absl::Span<const float> row(xr, n);
      const float row_mean = static_cast<float>(SumAsDouble(row) / static_cast<double>(n));
      const float var =
          static_cast<float>(SquaredDeviationSum(row, row_mean) / static_cast<double>(n));
      const float row_rstd = 1.0f / std::sqrt(var + eps);
      mean[r] = row_mean;
      rstd[r] = row_rstd;
      // The sizes match (checked above), so this cannot fail.
      NormalizeRow(row, row_mean, row_rstd, gamma, beta, y.subspan(r * n, n)).IgnoreError();
    }
  });
  return absl::OkStatus();
}

absl::StatusOr<LayerNormOutput> LayerNormForward(absl::Span<const float> x,
                                                 absl::Span<const float> gamma,
                                                 absl::Span<const float> beta, float eps) {
  LayerNormOutput out;
  const size_t rows = gamma.empty() ? 0 : x.size() / gamma.size();
  out.y.resize(x.size());
  out.mean.resize(rows);
  out.rstd.resize(rows);
  LOOM_RETURN_IF_ERROR(LayerNormForward(x, gamma, beta, eps, absl::MakeSpan(out.y),
                                        absl::MakeSpan(out.mean), absl::MakeSpan(out.rstd)));
  return out;
}

absl::Status LayerNormBackward(absl::Span<const float> x, absl::Span<const float> gamma,
                               absl::Span<const float> mean, absl::Span<const float> rstd,
                               absl::Span<const float> dy, absl::Span<float> dx,
                               absl::Span<float> dgamma_out, absl::Span<float> dbeta_out) {
  constexpr char kName[] = "LayerNormBackward";
  const size_t n = gamma.size();
  if (absl::Status s = CheckRows(kName, x.size(), n); !s.ok()) return s;
  const size_t rows = x.size() / n;
  if (dy.size() != x.size() || mean.size() != rows || rstd.size() != rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        kName, ": x has ", x.size(), " values (", rows, " rows of ", n, "), dy ", dy.size(),
        ", mean ", mean.size(), ", rstd ", rstd.size()));
  }
  if (dx.size() != x.size() || dgamma_out.size() != n || dbeta_out.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": x has ", x.size(), " values, dx ",
                                                   dx.size(), "; gamma ", n, ", dgamma ",
                                                   dgamma_out.size(), ", dbeta ",
                                                   dbeta_out.size()));
  }
  // dx: rows are independent, each thread takes a range of them.
  ParallelForEach(static_cast<int64_t>(rows), RowGrain(n), [&](int64_t first, int64_t last) {
    for (size_t r = static_cast<size_t>(first); r < static_cast<size_t>(last); ++r) {
      const float* xr = x.data() + r * n;
      const float* dyr = dy.data() + r * n;
      // The sizes match (checked above), so this cannot fail.
      const NormGradientSums sums =
          LayerNormGradientSums(absl::MakeConstSpan(xr, n), absl::MakeConstSpan(dyr, n), gamma,
                                mean[r], rstd[r])
              .value_or(NormGradientSums{});
      const float mean_g = static_cast<float>(sums.g / static_cast<double>(n));
      const float mean_gx = static_cast<float>(sums.g_xhat / static_cast<double>(n));
      NormRowBackward(absl::MakeConstSpan(xr, n), absl::MakeConstSpan(dyr, n), gamma, mean[r],
                      rstd[r], mean_g, mean_gx, dx.subspan(r * n, n))
          .IgnoreError();
    }
  });
  // dgamma and dbeta: sums over rows, split by columns, so each column is summed in
  // row order by one thread (the same bits at every thread count).
  ParallelForEach(static_cast<int64_t>(n), std::max<int64_t>(1, RowGrain(rows)),
                  [&](int64_t first, int64_t last) {
    const size_t j0 = static_cast<size_t>(first), j1 = static_cast<size_t>(last);
    std::vector<double> dgamma(j1 - j0, 0.0), dbeta(j1 - j0, 0.0);
    for (size_t r = 0; r < rows; ++r) {
      const float* xr = x.data() + r * n;
      const float* dyr = dy.data() + r * n;
      AccumulateNormParamGrads(absl::MakeConstSpan(xr + j0, j1 - j0),
                               absl::MakeConstSpan(dyr + j0, j1 - j0), mean[r], rstd[r],
                               absl::MakeSpan(dgamma), absl::MakeSpan(dbeta))
          .IgnoreError();
    }
    for (size_t j = j0; j < j1; ++j) {
      dgamma_out[j] = static_cast<float>(dgamma[j - j0]);
      dbeta_out[j] = static_cast<float>(dbeta[j - j0]);
    }
  });
  return absl::OkStatus();
}

absl::StatusOr<LayerNormGrads> LayerNormBackward(absl::Span<const float> x,
                                                 absl::Span<const float> gamma,
                                                 absl::Span<const float> mean,
                                                 absl::Span<const float> rstd,
                                                 absl::Span<const float> dy) {
  LayerNormGrads grads;
  // Sized only when they fit together; the checks are the other overload's.
  if (dy.size() == x.size()) grads.dx.resize(x.size());
  grads.dgamma.resize(gamma.size());
  grads.dbeta.resize(gamma.size());
  LOOM_RETURN_IF_ERROR(LayerNormBackward(x, gamma, mean, rstd, dy, absl::MakeSpan(grads.dx),
                                         absl::MakeSpan(grads.dgamma),
                                         absl::MakeSpan(grads.dbeta)));
  return grads;
}

absl::Status GeluForward(absl::Span<const float> x, absl::Span<float> y) {
  if (x.size() != y.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GeluForward: x has ", x.size(), " values, y ", y.size()));
  }
  ForEachBlockRange(x.size(), [&](size_t begin, size_t end) {
    // The sizes match, checked above.
    GeluTanh(x.subspan(begin, end - begin), y.subspan(begin, end - begin)).IgnoreError();
  });
  return absl::OkStatus();
}

std::vector<float> GeluForward(absl::Span<const float> x) {
  std::vector<float> y(x.size());
  // The sizes match by construction.
  GeluForward(x, absl::MakeSpan(y)).IgnoreError();
  return y;
}

absl::Status GeluBackward(absl::Span<const float> x, absl::Span<const float> dy,
                          absl::Span<float> dx) {
  if (x.size() != dy.size() || dx.size() != x.size()) {
    return absl::InvalidArgumentError(absl::StrCat("GeluBackward: x has ", x.size(),
                                                   " values, dy ", dy.size(), ", dx ", dx.size()));
  }
  ForEachBlockRange(x.size(), [&](size_t begin, size_t end) {
    const size_t len = end - begin;
    // The sizes match, checked above.
    GeluTanhBackward(x.subspan(begin, len), dy.subspan(begin, len), dx.subspan(begin, len))
        .IgnoreError();
  });
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> GeluBackward(absl::Span<const float> x,
                                                absl::Span<const float> dy) {
  if (x.size() != dy.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("GeluBackward: x has ", x.size(), " values, dy ", dy.size()));
  }
  std::vector<float> dx(x.size());
  LOOM_RETURN_IF_ERROR(GeluBackward(x, dy, absl::MakeSpan(dx)));
  return dx;
}

}  // namespace loom
