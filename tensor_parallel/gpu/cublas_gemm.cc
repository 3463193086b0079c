#include "tensor_parallel/gpu/cublas_gemm.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/gpu/cuda_status.h"
#include "core/status_macros.h"

namespace loom {
namespace {

constexpr char kName[] = "GpuGemm";

std::string Shape(int64_t rows, int64_t cols) { return absl::StrCat("[", rows, ",", cols, "]"); }

// Gemm's view checks (gemm.cc), with the same texts, so both entry points refuse the
// same arguments in the same words.
template <typename View>
absl::Status CheckView(const View& v, const char* name) {
  if (v.rows < 0 || v.cols < 0 || v.ld < v.cols || (v.rows > 0 && v.cols > 0 && v.ld < 1)) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": ", name, " is ", Shape(v.rows, v.cols),
                                                   " with ld ", v.ld, "; need ld >= cols"));
  }
  const int64_t needed = v.rows == 0 || v.cols == 0 ? 0 : (v.rows - 1) * v.ld + v.cols;
  if (static_cast<int64_t>(v.data.size()) < needed) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": ", name, " is ", Shape(v.rows, v.cols),
                                                   " with ld ", v.ld, ", needing ", needed,
                                                   " elements, but its span has ", v.data.size()));
  }
  return absl::OkStatus();
}

template <typename View>
size_t ViewBytes(const View& v) {
  if (v.rows == 0 || v.cols == 0) return 0;
  return static_cast<size_t>((v.rows - 1) * v.ld + v.cols) * sizeof(float);
}

const char* MemoryTypeName(cudaMemoryType type) {
  switch (type) {
    case cudaMemoryTypeUnregistered: return "unregistered host memory";
    case cudaMemoryTypeHost: return "pinned host memory";
    case cudaMemoryTypeDevice: return "device memory";
    case cudaMemoryTypeManaged: return "managed memory";
  }
  return "memory of unknown type";
}

}  // namespace

absl::Status CublasStatus(cublasStatus_t status, absl::string_view call) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const std::string message =
      absl::StrCat(call, " failed: ", cublasGetStatusName(status), " (", static_cast<int>(status),
                   "): ", cublasGetStatusString(status));
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED: return absl::ResourceExhaustedError(message);
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ARCH_MISMATCH: return absl::FailedPreconditionError(message);
    case CUBLAS_STATUS_INVALID_VALUE: return absl::InvalidArgumentError(message);
    case CUBLAS_STATUS_NOT_SUPPORTED: return absl::UnimplementedError(message);
    default: return absl::InternalError(message);
  }
}

absl::StatusOr<CublasHandle> CublasHandle::Create(const CudaStream& stream, CublasMath math) {
  LOOM_ASSIGN_OR_RETURN(const int devices, CudaDeviceCountOrZero());
  if (devices == 0) return absl::FailedPreconditionError("no CUDA device on this machine");
  const int device = stream.device();
  if (device < 0 || device >= devices) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device, " is outside [0, ", devices, ")"));
  }
  LOOM_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  cublasHandle_t raw = nullptr;
  LOOM_CUBLAS_RETURN_IF_ERROR(cublasCreate(&raw));
  // Owned from here, so an error below destroys it.
  CublasHandle handle(raw, stream.get(), device);
  LOOM_CUBLAS_RETURN_IF_ERROR(cublasSetStream(raw, stream.get()));
  const cublasMath_t mode =
      math == CublasMath::kPedantic ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH;
  LOOM_CUBLAS_RETURN_IF_ERROR(cublasSetMathMode(raw, mode));
  // alpha and beta are host values.
  LOOM_CUBLAS_RETURN_IF_ERROR(cublasSetPointerMode(raw, CUBLAS_POINTER_MODE_HOST));
  return handle;
}

CublasHandle::CublasHandle(CublasHandle&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)),
      stream_(std::exchange(other.stream_, nullptr)),
      device_(other.device_) {}

CublasHandle& CublasHandle::operator=(CublasHandle&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) cublasDestroy(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    stream_ = std::exchange(other.stream_, nullptr);
    device_ = other.device_;
  }
  return *this;
}

CublasHandle::~CublasHandle() {
  if (handle_ != nullptr) cublasDestroy(handle_);
}

absl::Span<float> AsDeviceFloats(DeviceBuffer& buffer) {
  return absl::MakeSpan(reinterpret_cast<float*>(buffer.data()), buffer.size() / sizeof(float));
}

absl::Span<const float> AsDeviceFloats(const DeviceBuffer& buffer) {
  return absl::MakeConstSpan(reinterpret_cast<const float*>(buffer.data()),
                             buffer.size() / sizeof(float));
}

absl::Status CheckDeviceMemory(const void* data, size_t bytes, int device, absl::string_view what) {
  if (bytes == 0) return absl::OkStatus();
  cudaPointerAttributes attributes{};
  LOOM_CUDA_RETURN_IF_ERROR(cudaPointerGetAttributes(&attributes, data));
  if (attributes.type != cudaMemoryTypeDevice) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is ", MemoryTypeName(attributes.type),
                                                   "; need device memory of device ", device));
  }
  if (attributes.device != device) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is memory of device ", attributes.device, "; need device ", device));
  }
  return absl::OkStatus();
}

absl::Status GpuGemm(const CublasHandle& cublas, ConstMatrixView a, Transpose trans_a,
                     ConstMatrixView b, Transpose trans_b, MatrixView c, float alpha, float beta) {
  LOOM_RETURN_IF_ERROR(CheckView(a, "A"));
  LOOM_RETURN_IF_ERROR(CheckView(b, "B"));
  LOOM_RETURN_IF_ERROR(CheckView(c, "C"));
  const bool ta = trans_a == Transpose::kYes;
  const bool tb = trans_b == Transpose::kYes;
  const int64_t m = ta ? a.cols : a.rows;
  const int64_t k = ta ? a.rows : a.cols;
  const int64_t kb = tb ? b.cols : b.rows;
  const int64_t n = tb ? b.rows : b.cols;
  if (k != kb) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": op(A) is ", Shape(m, k),
                                                   " but op(B) is ", Shape(kb, n),
                                                   ": inner dimensions differ"));
  }
  if (c.rows != m || c.cols != n) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": op(A) ", Shape(m, k), " x op(B) ",
                                                   Shape(kb, n), " is ", Shape(m, n), " but C is ",
                                                   Shape(c.rows, c.cols)));
  }
  constexpr int64_t kMaxBlasInt = (int64_t{1} << 31) - 1;
  for (int64_t v : {m, n, k, a.ld, b.ld, c.ld}) {
    if (v > kMaxBlasInt) {
      return absl::InvalidArgumentError(absl::StrCat(kName, ": dimension or ld ", v,
                                                     " exceeds the 32-bit BLAS interface (m=", m,
                                                     " n=", n, " k=", k, ")"));
    }
  }
  if (cublas.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(kName, ": the cuBLAS handle is empty (default-constructed or moved from)"));
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  const int device = cublas.device();
  LOOM_RETURN_IF_ERROR(CheckDeviceMemory(c.data.data(), ViewBytes(c), device, "GpuGemm: C"));
  // Row-major C [m,n] with ld is column-major C^T [n,m] with the same ld.
  const int cm = static_cast<int>(n), cn = static_cast<int>(m), ldc = static_cast<int>(c.ld);
  if (k == 0) {
    // The product is zero, so only the beta scaling remains (as in Gemm): zeros for
    // beta == 0 (C is not read, so NaNs in it do not survive), else C = beta * C.
    if (beta == 0.0f) {
      LOOM_CUDA_RETURN_IF_ERROR(cudaMemset2DAsync(c.data.data(), c.ld * sizeof(float), 0,
                                                  n * sizeof(float), m, cublas.stream()));
    } else {
      const float zero = 0.0f;
      LOOM_CUBLAS_RETURN_IF_ERROR(cublasSgeam(cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, cm, cn, &beta,
                                              c.data.data(), ldc, &zero, c.data.data(), ldc,
                                              c.data.data(), ldc));
    }
    return absl::OkStatus();
  }
  LOOM_RETURN_IF_ERROR(CheckDeviceMemory(a.data.data(), ViewBytes(a), device, "GpuGemm: A"));
  LOOM_RETURN_IF_ERROR(CheckDeviceMemory(b.data.data(), ViewBytes(b), device, "GpuGemm: B"));
  // C^T = op(B)^T op(A)^T. Row-major B with ld is column-major B^T, so op(B)^T is that
  // stored matrix as is when B is not transposed, and its transpose when it is.
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  LOOM_CUBLAS_RETURN_IF_ERROR(cublasSgemm(
      cublas.get(), op_b, op_a, cm, cn, static_cast<int>(k), &alpha, b.data.data(),
      static_cast<int>(b.ld), a.data.data(), static_cast<int>(a.ld), &beta, c.data.data(), ldc));
  return absl::OkStatus();
}

}  // namespace loom
