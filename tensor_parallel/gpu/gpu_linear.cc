#include "tensor_parallel/gpu/gpu_linear.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/gpu/cuda_status.h"
#include "core/reduce_op.h"
#include "core/status_macros.h"
#include "tensor_parallel/gpu/internal/linear_kernels.h"

namespace loom {
namespace {

template <typename View>
std::string Shape(const View& v) {
  return absl::StrCat("[", v.rows, ",", v.cols, "]");
}

template <typename View>
size_t ViewBytes(const View& v) {
  if (v.rows <= 0 || v.cols <= 0) return 0;
  return static_cast<size_t>((v.rows - 1) * v.ld + v.cols) * sizeof(float);
}

absl::Status EmptyHandle(const char* who) {
  return absl::FailedPreconditionError(
      absl::StrCat(who, ": the cuBLAS handle is empty (default-constructed or moved from)"));
}

// CheckBiasShape: OK for an empty bias (none) or one of `features` values.
absl::Status CheckBiasShape(const char* who, const char* name, size_t size, int64_t features) {
  if (size != 0 && static_cast<int64_t>(size) != features) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": ", name, " has ", size, " values for ", features, " out features"));
  }
  return absl::OkStatus();
}

absl::Status Launched(int error, const char* call) {
  return CudaStatus(static_cast<cudaError_t>(error), call);
}

}  // namespace

absl::Status GpuLinearForward(const CublasHandle& cublas, ConstMatrixView x, ConstMatrixView w,
                              absl::Span<const float> bias, MatrixView y) {
  constexpr char kWho[] = "GpuLinearForward";
  if (x.cols != w.cols) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWho, ": x is ", Shape(x), " but w is ", Shape(w), ": in features differ"));
  }
  if (y.rows != x.rows || y.cols != w.rows) {
    return absl::InvalidArgumentError(absl::StrCat(kWho, ": y is ", Shape(y), " but x ", Shape(x),
                                                   " times w^T of w ", Shape(w), " is [", x.rows,
                                                   ",", w.rows, "]"));
  }
  LOOM_RETURN_IF_ERROR(CheckBiasShape(kWho, "bias", bias.size(), w.rows));
  if (!bias.empty() && !cublas.empty()) {
    LOOM_RETURN_IF_ERROR(CheckDeviceMemory(bias.data(), bias.size() * sizeof(float),
                                           cublas.device(), "GpuLinearForward: bias"));
  }
  LOOM_RETURN_IF_ERROR(GpuGemm(cublas, x, Transpose::kNo, w, Transpose::kYes, y));
  if (bias.empty()) return absl::OkStatus();
  return GpuAddBias(cublas, bias, y);
}

absl::Status GpuAddBias(const CublasHandle& cublas, absl::Span<const float> bias, MatrixView y) {
  constexpr char kWho[] = "GpuAddBias";
  const int64_t needed = y.rows <= 0 || y.cols <= 0 ? 0 : (y.rows - 1) * y.ld + y.cols;
  if (y.rows < 0 || y.cols < 0 || y.ld < y.cols || static_cast<int64_t>(y.data.size()) < needed) {
    return absl::InvalidArgumentError(absl::StrCat(kWho, ": y is ", Shape(y), " with ld ", y.ld,
                                                   " in a span of ", y.data.size(),
                                                   "; need ld >= cols and ", needed, " elements"));
  }
  if (static_cast<int64_t>(bias.size()) != y.cols) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWho, ": bias has ", bias.size(), " values for y ", Shape(y)));
  }
  if (cublas.empty()) return EmptyHandle(kWho);
  if (y.rows == 0 || y.cols == 0) return absl::OkStatus();
  LOOM_RETURN_IF_ERROR(CheckDeviceMemory(bias.data(), bias.size() * sizeof(float), cublas.device(),
                                         "GpuAddBias: bias"));
  LOOM_RETURN_IF_ERROR(
      CheckDeviceMemory(y.data.data(), ViewBytes(y), cublas.device(), "GpuAddBias: y"));
  return Launched(gpu_linear_internal::LaunchAddBias(y.data.data(), y.rows, y.cols, y.ld,
                                                     bias.data(), cublas.stream()),
                  "LaunchAddBias(y, rows, cols, ld, bias, stream)");
}

absl::Status GpuLinearBackwardInput(const CublasHandle& cublas, ConstMatrixView dy,
                                    ConstMatrixView w, MatrixView dx) {
  constexpr char kWho[] = "GpuLinearBackwardInput";
  if (dy.cols != w.rows) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWho, ": dy is ", Shape(dy), " but w is ", Shape(w), ": out features differ"));
  }
  if (dx.rows != dy.rows || dx.cols != w.cols) {
    return absl::InvalidArgumentError(absl::StrCat(kWho, ": dx is ", Shape(dx), " but dy ",
                                                   Shape(dy), " times w ", Shape(w), " is [",
                                                   dy.rows, ",", w.cols, "]"));
  }
  return GpuGemm(cublas, dy, Transpose::kNo, w, Transpose::kNo, dx);
}

absl::Status GpuLinearBackwardWeight(const CublasHandle& cublas, ConstMatrixView dy,
                                     ConstMatrixView x, MatrixView dw, absl::Span<float> db) {
  constexpr char kWho[] = "GpuLinearBackwardWeight";
  if (dy.rows != x.rows) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWho, ": dy is ", Shape(dy), " but x is ", Shape(x), ": rows differ"));
  }
  if (dw.rows != dy.cols || dw.cols != x.cols) {
    return absl::InvalidArgumentError(absl::StrCat(kWho, ": dw is ", Shape(dw), " but dy^T of dy ",
                                                   Shape(dy), " times x ", Shape(x), " is [",
                                                   dy.cols, ",", x.cols, "]"));
  }
  LOOM_RETURN_IF_ERROR(CheckBiasShape(kWho, "db", db.size(), dy.cols));
  if (!db.empty() && !cublas.empty()) {
    LOOM_RETURN_IF_ERROR(CheckDeviceMemory(db.data(), db.size() * sizeof(float), cublas.device(),
                                           "GpuLinearBackwardWeight: db"));
  }
  LOOM_RETURN_IF_ERROR(GpuGemm(cublas, dy, Transpose::kYes, x, Transpose::kNo, dw));
  if (db.empty()) return absl::OkStatus();
  // GpuGemm has checked dy's view; its data is device memory whenever it has rows.
  if (dy.rows > 0) {
    LOOM_RETURN_IF_ERROR(CheckDeviceMemory(dy.data.data(), ViewBytes(dy), cublas.device(),
                                           "GpuLinearBackwardWeight: dy"));
  }
  return Launched(gpu_linear_internal::LaunchSumRows(dy.data.data(), dy.rows, dy.cols, dy.ld,
                                                     db.data(), cublas.stream()),
                  "LaunchSumRows(dy, rows, cols, ld, db, stream)");
}

absl::Status AllReduceSumThroughHost(Communicator& tp, const CublasHandle& cublas,
                                     absl::Span<float> values) {
  if (cublas.empty()) return EmptyHandle("AllReduceSumThroughHost");
  if (tp.size() == 1) return absl::OkStatus();
  const size_t bytes = values.size() * sizeof(float);
  LOOM_RETURN_IF_ERROR(
      CheckDeviceMemory(values.data(), bytes, cublas.device(), "AllReduceSumThroughHost: values"));
  std::vector<float> host(values.size());
  // Every rank joins the collective even with nothing to send, as the CPU layers do.
  if (bytes > 0) {
    LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.data(), values.data(), bytes,
                                              cudaMemcpyDeviceToHost, cublas.stream()));
    LOOM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cublas.stream()));
  }
  LOOM_RETURN_IF_ERROR(tp.AllReduce(absl::MakeSpan(host), ReduceOp::kSum));
  if (bytes > 0) {
    LOOM_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(values.data(), host.data(), bytes,
                                              cudaMemcpyHostToDevice, cublas.stream()));
    LOOM_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(cublas.stream()));
  }
  return absl::OkStatus();
}

}  // namespace loom
