// The device-side linear-layer math (gpu_linear.h) against the CPU layers. On every
// machine: each shape error with its values, and the empty handle. With a CUDA
// device: ColumnParallelLinear and RowParallelLinear (tp = 1, 2 as threads over
// inproc, f32 and bf16 weight storage, with bias) forward and backward, recomputed
// from the same shards with GpuLinear* and AllReduceSumThroughHost. Products are
// compared within the GEMM bound of internal/gpu_testing.h, the bias gradient
// exactly (same inputs, same summation order).
#include "tensor_parallel/gpu/gpu_linear.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectives/communicator.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "core/dtype.h"
#include "core/gpu/cuda_stream.h"
#include "core/gpu/device_buffer.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor_parallel/gpu/cublas_gemm.h"
#include "tensor_parallel/gpu/internal/gpu_testing.h"
#include "tensor_parallel/layers/column_parallel_linear.h"
#include "tensor_parallel/layers/gemm.h"
#include "tensor_parallel/layers/row_parallel_linear.h"
#include "tensor_parallel/placement.h"
#include "core/tensor.h"

namespace loom {
namespace {

using ::loom::gpu_testing::FirstOutOfBound;
using ::loom::gpu_testing::FromDevice;
using ::loom::gpu_testing::Gamma;
using ::loom::gpu_testing::HasDevice;
using ::loom::gpu_testing::RandomValues;
using ::loom::gpu_testing::ToDevice;
using ::testing::HasSubstr;

TEST(GpuLinearTest, ShapeErrorsNameTheShapes) {
  const CublasHandle none;
  const std::vector<float> x(5 * 7), w(3 * 4), b(3), dy(5 * 3);
  std::vector<float> y(5 * 3), dx(5 * 4), dw(3 * 4), db(3), db2(2);
  EXPECT_THAT(
      GpuLinearForward(none, Dense(x, 5, 7), Dense(w, 3, 4), b, Dense(absl::MakeSpan(y), 5, 3)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "GpuLinearForward: x is [5,7] but w is [3,4]: in features differ"));
  EXPECT_THAT(
      GpuLinearForward(none, Dense(x, 5, 4), Dense(w, 3, 4), b, Dense(absl::MakeSpan(y), 3, 5)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "GpuLinearForward: y is [3,5] but x [5,4] times w^T of w [3,4] is [5,3]"));
  EXPECT_THAT(GpuLinearForward(none, Dense(x, 5, 4), Dense(w, 3, 4),
                               absl::MakeConstSpan(b).first(2), Dense(absl::MakeSpan(y), 5, 3)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "GpuLinearForward: bias has 2 values for 3 out features"));
  EXPECT_THAT(
      GpuAddBias(none, absl::MakeConstSpan(b).first(2), Dense(absl::MakeSpan(y), 5, 3)),
      StatusIs(absl::StatusCode::kInvalidArgument, "GpuAddBias: bias has 2 values for y [5,3]"));
  EXPECT_THAT(GpuAddBias(none, b, MatrixView{absl::MakeSpan(y), 5, 3, 4}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("GpuAddBias: y is [5,3] with ld 4 in a span of 15")));
  EXPECT_THAT(GpuLinearBackwardInput(none, Dense(dy, 5, 3), Dense(w, 4, 3),
                                     Dense(absl::MakeSpan(dx), 5, 4)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "GpuLinearBackwardInput: dy is [5,3] but w is [4,3]: out features differ"));
  EXPECT_THAT(GpuLinearBackwardInput(none, Dense(dy, 5, 3), Dense(w, 3, 4),
                                     Dense(absl::MakeSpan(dx), 4, 5)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "GpuLinearBackwardInput: dx is [4,5] but dy [5,3] times w [3,4] is [5,4]"));
  EXPECT_THAT(GpuLinearBackwardWeight(none, Dense(dy, 5, 3), Dense(x, 7, 5),
                                      Dense(absl::MakeSpan(dw), 3, 4), absl::MakeSpan(db)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "GpuLinearBackwardWeight: dy is [5,3] but x is [7,5]: rows differ"));
  EXPECT_THAT(
      GpuLinearBackwardWeight(none, Dense(dy, 5, 3), Dense(x, 5, 4),
                              Dense(absl::MakeSpan(dw), 4, 3), absl::MakeSpan(db)),
      StatusIs(absl::StatusCode::kInvalidArgument,
               "GpuLinearBackwardWeight: dw is [4,3] but dy^T of dy [5,3] times x [5,4] is [3,4]"));
  EXPECT_THAT(GpuLinearBackwardWeight(none, Dense(dy, 5, 3), Dense(x, 5, 4),
                                      Dense(absl::MakeSpan(dw), 3, 4), absl::MakeSpan(db2)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "GpuLinearBackwardWeight: db has 2 values for 3 out features"));
  // A view too short for its shape is GpuGemm's error, with its values.
  EXPECT_THAT(GpuLinearForward(none, Dense(absl::MakeConstSpan(x).first(19), 5, 4), Dense(w, 3, 4),
                               b, Dense(absl::MakeSpan(y), 5, 3)),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "GpuGemm: A is [5,4] with ld 4, needing 20 elements, but its span has 19"));
}

TEST(GpuLinearTest, ValidShapesNeedAHandle) {
  const CublasHandle none;
  const std::vector<float> x(5 * 4), w(3 * 4), b(3), dy(5 * 3);
  std::vector<float> y(5 * 3), dx(5 * 4), dw(3 * 4), db(3);
  EXPECT_THAT(
      GpuLinearForward(none, Dense(x, 5, 4), Dense(w, 3, 4), b, Dense(absl::MakeSpan(y), 5, 3)),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               HasSubstr("GpuGemm: the cuBLAS handle is empty")));
  EXPECT_THAT(GpuAddBias(none, b, Dense(absl::MakeSpan(y), 5, 3)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("GpuAddBias: the cuBLAS handle is empty")));
  EXPECT_THAT(GpuLinearBackwardInput(none, Dense(dy, 5, 3), Dense(w, 3, 4),
                                     Dense(absl::MakeSpan(dx), 5, 4)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("GpuGemm: the cuBLAS handle is empty")));
  EXPECT_THAT(GpuLinearBackwardWeight(none, Dense(dy, 5, 3), Dense(x, 5, 4),
                                      Dense(absl::MakeSpan(dw), 3, 4), absl::MakeSpan(db)),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("GpuGemm: the cuBLAS handle is empty")));
}

// --- With a device: the GPU math against the CPU layers. ---------------------------

// RunTp runs body(rank's communicator) on `tp` threads over a fresh inproc group and
// returns every rank's status.
std::vector<absl::Status> RunTp(int tp, const std::function<absl::Status(Communicator&)>& body) {
  std::vector<absl::Status> results(static_cast<size_t>(tp));
  absl::StatusOr<std::shared_ptr<InprocGroup>> group = InprocGroup::Create(tp);
  if (!group.ok()) return std::vector<absl::Status>(static_cast<size_t>(tp), group.status());
  std::vector<std::thread> threads;
  for (int rank = 0; rank < tp; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<Transport>> endpoint = (*group)->Endpoint(rank);
      if (!endpoint.ok()) {
        results[static_cast<size_t>(rank)] = endpoint.status();
        return;
      }
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          Communicator::Create(std::move(*endpoint));
      results[static_cast<size_t>(rank)] = comm.ok() ? body(**comm) : comm.status();
    });
  }
  for (std::thread& thread : threads) thread.join();
  return results;
}

absl::StatusOr<std::vector<float>> F32(const Tensor& t) {
  LOOM_ASSIGN_OR_RETURN(const Tensor f32, t.ConvertTo(DType::kF32));
  LOOM_ASSIGN_OR_RETURN(absl::Span<const float> v, f32.As<float>());
  return std::vector<float>(v.begin(), v.end());
}

// Bound returns, per element of y = a op(b) (+ c) with a [rows, k], the bound
// 2 gamma(k + 4) (sum_p |a_ip||op(b)_pj| + |c_j|): two f32 products of k terms, plus
// the roundings of the ranks' sum (tp <= 2) and of the bias add. a and b are the full
// (unsharded) operands, so a sum over ranks is covered.
// operand_rounding: the relative error of the CPU layer's operands beyond f32 (a
// bf16-stored layer multiplies in bf16, its activations rounded too: 2^-8 for each
// of the two operands), added to the f32 bound.
std::vector<double> Bound(const std::vector<float>& a, int64_t rows, int64_t k,
                          const std::vector<float>& b, bool b_transposed, int64_t cols,
                          const std::vector<float>& c, double operand_rounding) {
  std::vector<double> bound(static_cast<size_t>(rows * cols));
  const double gamma2 = 2 * Gamma(k + 4) + operand_rounding;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      double s = c.empty() ? 0.0 : std::fabs(double{c[static_cast<size_t>(j)]});
      for (int64_t p = 0; p < k; ++p) {
        const float bv =
            b_transposed ? b[static_cast<size_t>(j * k + p)] : b[static_cast<size_t>(p * cols + j)];
        s += std::fabs(double{a[static_cast<size_t>(i * k + p)]} * double{bv});
      }
      bound[static_cast<size_t>(i * cols + j)] = gamma2 * s;
    }
  }
  return bound;
}

// Transposed returns the [cols, rows] transpose of m [rows, cols].
std::vector<float> Transposed(const std::vector<float>& m, int64_t rows, int64_t cols) {
  std::vector<float> t(m.size());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j)
      t[static_cast<size_t>(j * rows + i)] = m[static_cast<size_t>(i * cols + j)];
  }
  return t;
}

// Columns returns columns [offset, offset + length) of m [rows, width].
std::vector<float> Columns(const std::vector<float>& m, int64_t width, int64_t offset,
                           int64_t length) {
  std::vector<float> out;
  for (size_t i = 0; i < m.size(); i += static_cast<size_t>(width)) {
    out.insert(out.end(), m.begin() + static_cast<int64_t>(i) + offset,
               m.begin() + static_cast<int64_t>(i) + offset + length);
  }
  return out;
}

absl::Status Expect(const std::string& what, const std::vector<float>& gpu,
                    const std::vector<float>& cpu, const std::vector<double>& bound) {
  const std::string failure = FirstOutOfBound(gpu, cpu, bound);
  if (failure.empty()) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", failure));
}

struct LayerCase {
  int tp;
  DType storage;
};

double Rounding(const LayerCase& c) { return c.storage == DType::kBF16 ? 2.0 / 256 : 0.0; }

std::string CaseName(const LayerCase& c) {
  return absl::StrCat("tp=", c.tp, " storage=", c.storage == DType::kF32 ? "f32" : "bf16");
}

// Sizes: seq 7 x batch 3 = 21 rows, in = 13, out = 11 (uneven over tp = 2: 6 + 5).
constexpr int64_t kSeq = 7, kBatch = 3, kRows = kSeq * kBatch, kIn = 13, kOut = 11;

// Widened returns `values` as stored in `dtype` and widened back to f32.
std::vector<float> Widened(const std::vector<float>& values, std::vector<int64_t> shape,
                           DType dtype) {
  const Tensor t = *Tensor::FromValues(std::move(shape), values);
  return *F32(*t.ConvertTo(dtype));
}

class GpuLinearLayerTest : public ::testing::TestWithParam<LayerCase> {
 protected:
  void SetUp() override {
    if (!HasDevice()) GTEST_SKIP() << "no CUDA device on this machine";
  }
};

absl::Status ColumnParallelRank(Communicator& tp, const LayerCase& c) {
  const std::vector<float> w = RandomValues(kOut * kIn, 11), b = RandomValues(kOut, 12);
  const std::vector<float> x = RandomValues(kRows * kIn, 13), dy = RandomValues(kRows * kOut, 14);
  LOOM_ASSIGN_OR_RETURN(const Tensor full_w, Tensor::FromValues({kOut, kIn}, w));
  LOOM_ASSIGN_OR_RETURN(const Tensor full_b, Tensor::FromValues({kOut}, b));
  ColumnParallelOptions options;
  options.weight_dtype = c.storage;
  LOOM_ASSIGN_OR_RETURN(ColumnParallelLinear cpu,
                        ColumnParallelLinear::Create(full_w, &full_b, tp, options));
  const ShardExtent rows_of_w = ShardExtentOf(kOut, tp.size(), tp.rank(), options.rule);
  const int64_t out = rows_of_w.length;
  const std::vector<float> dy_local = Columns(dy, kOut, rows_of_w.offset, out);

  // CPU layer.
  LOOM_ASSIGN_OR_RETURN(const Tensor input, Tensor::FromValues({kSeq, kBatch, kIn}, x));
  LOOM_ASSIGN_OR_RETURN(const Tensor y_cpu_t, cpu.Forward(input));
  LOOM_ASSIGN_OR_RETURN(const std::vector<float> y_cpu, F32(y_cpu_t));
  LOOM_ASSIGN_OR_RETURN(const Tensor g, Tensor::FromValues({kSeq, kBatch, out}, dy_local));
  LOOM_ASSIGN_OR_RETURN(const Tensor dx_cpu_t, cpu.Backward(g));
  LOOM_ASSIGN_OR_RETURN(const std::vector<float> dx_cpu, F32(dx_cpu_t));
  LOOM_ASSIGN_OR_RETURN(const std::vector<float> dw_cpu, F32(cpu.weight_grad()));
  LOOM_ASSIGN_OR_RETURN(const std::vector<float> db_cpu, F32(cpu.bias_grad()));

  // The same shard on the GPU: the stored weight widened on the host.
  LOOM_ASSIGN_OR_RETURN(const std::vector<float> w_local, F32(cpu.weight()));
  LOOM_ASSIGN_OR_RETURN(const std::vector<float> b_local, F32(cpu.bias()));
  LOOM_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(0));
  LOOM_ASSIGN_OR_RETURN(CublasHandle cublas, CublasHandle::Create(stream));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer dev_x, ToDevice(x));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer dev_w, ToDevice(w_local));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer dev_b, ToDevice(b_local));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer dev_dy, ToDevice(dy_local));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer dev_y, ToDevice(std::vector<float>(kRows * out, NAN)));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer dev_dx, ToDevice(std::vector<float>(kRows * kIn, NAN)));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer dev_dw, ToDevice(std::vector<float>(out * kIn, NAN)));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer dev_db, ToDevice(std::vector<float>(out, NAN)));
  const ConstMatrixView xv = Dense(AsDeviceFloats(std::as_const(dev_x)), kRows, kIn);
  const ConstMatrixView wv = Dense(AsDeviceFloats(std::as_const(dev_w)), out, kIn);
  const ConstMatrixView dyv = Dense(AsDeviceFloats(std::as_const(dev_dy)), kRows, out);
  LOOM_RETURN_IF_ERROR(GpuLinearForward(cublas, xv, wv, AsDeviceFloats(std::as_const(dev_b)),
                                        Dense(AsDeviceFloats(dev_y), kRows, out)));
  LOOM_RETURN_IF_ERROR(
      GpuLinearBackwardInput(cublas, dyv, wv, Dense(AsDeviceFloats(dev_dx), kRows, kIn)));
  LOOM_RETURN_IF_ERROR(AllReduceSumThroughHost(tp, cublas, AsDeviceFloats(dev_dx)));
  LOOM_RETURN_IF_ERROR(GpuLinearBackwardWeight(
      cublas, dyv, xv, Dense(AsDeviceFloats(dev_dw), out, kIn), AsDeviceFloats(dev_db)));
  LOOM_RETURN_IF_ERROR(stream.Synchronize(absl::Now() + absl::Seconds(60)));
  LOOM_ASSIGN_OR_RETURN(const std::vector<float> y, FromDevice(dev_y));
  LOOM_ASSIGN_OR_RETURN(const std::vector<float> dx, FromDevice(dev_dx));
  LOOM_ASSIGN_OR_RETURN(const std::vector<float> dw, FromDevice(dev_dw));
  LOOM_ASSIGN_OR_RETURN(const std::vector<float> db, FromDevice(dev_db));

  const std::string where = absl::StrCat(CaseName(c), " rank ", tp.rank(), " column-parallel ");
  const std::vector<float> w_all = Widened(w, {kOut, kIn}, c.storage);
  LOOM_RETURN_IF_ERROR(Expect(where + "y", y, y_cpu,
                              Bound(x, kRows, kIn, w_local, /*b_transposed=*/true, out, b_local, Rounding(c))));
  // dx sums every rank's dy_r W_r: the full dy times the full W.
  LOOM_RETURN_IF_ERROR(Expect(where + "dx", dx, dx_cpu,
                              Bound(dy, kRows, kOut, w_all, /*b_transposed=*/false, kIn, {}, Rounding(c))));
  LOOM_RETURN_IF_ERROR(
      Expect(where + "dW", dw, dw_cpu,
             Bound(Transposed(dy_local, kRows, out), out, kRows, x, false, kIn, {}, Rounding(c))));
  if (db != db_cpu) return absl::InternalError(where + "db differs from the CPU's SumRows");
  return absl::OkStatus();
}

absl::Status RowParallelRank(Communicator& tp, const LayerCase& c) {
  const std::vector<float> w = RandomValues(kOut * kIn, 21), b = RandomValues(kOut, 22);
  const std::vector<float> x = RandomValues(kRows * kIn, 23), dy = RandomValues(kRows * kOut, 24);
  LOOM_ASSIGN_OR_RETURN(const Tensor full_w, Tensor::FromValues({kOut, kIn}, w));
  LOOM_ASSIGN_OR_RETURN(const Tensor full_b, Tensor::FromValues({kOut}, b));
  RowParallelOptions options;
  options.weight_dtype = c.storage;
  LOOM_ASSIGN_OR_RETURN(RowParallelLinear cpu,
                        RowParallelLinear::Create(full_w, &full_b, tp, options));
  const ShardExtent cols_of_w = ShardExtentOf(kIn, tp.size(), tp.rank(), options.rule);
  const int64_t in = cols_of_w.length;
  const std::vector<float> x_local = Columns(x, kIn, cols_of_w.offset, in);

  LOOM_ASSIGN_OR_RETURN(const Tensor input, Tensor::FromValues({kSeq, kBatch, in}, x_local));
  LOOM_ASSIGN_OR_RETURN(const Tensor y_cpu_t, cpu.Forward(input));
  LOOM_ASSIGN_OR_RETURN(const std::vector<float> y_cpu, F32(y_cpu_t));
  LOOM_ASSIGN_OR_RETURN(const Tensor g, Tensor::FromValues({kSeq, kBatch, kOut}, dy));
  LOOM_ASSIGN_OR_RETURN(const Tensor dx_cpu_t, cpu.Backward(g));
  LOOM_ASSIGN_OR_RETURN(const std::vector<float> dx_cpu, F32(dx_cpu_t));
  LOOM_ASSIGN_OR_RETURN(const std::vector<float> dw_cpu, F32(cpu.weight_grad()));
  LOOM_ASSIGN_OR_RETURN(const std::vector<float> db_cpu, F32(cpu.bias_grad()));

  LOOM_ASSIGN_OR_RETURN(const std::vector<float> w_local, F32(cpu.weight()));
  LOOM_ASSIGN_OR_RETURN(const std::vector<float> b_all, F32(cpu.bias()));
  LOOM_ASSIGN_OR_RETURN(CudaStream stream, CudaStream::Create(0));
  LOOM_ASSIGN_OR_RETURN(CublasHandle cublas, CublasHandle::Create(stream));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer dev_x, ToDevice(x_local));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer dev_w, ToDevice(w_local));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer dev_b, ToDevice(b_all));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer dev_dy, ToDevice(dy));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer dev_y, ToDevice(std::vector<float>(kRows * kOut, NAN)));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer dev_dx, ToDevice(std::vector<float>(kRows * in, NAN)));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer dev_dw, ToDevice(std::vector<float>(kOut * in, NAN)));
  LOOM_ASSIGN_OR_RETURN(DeviceBuffer dev_db, ToDevice(std::vector<float>(kOut, NAN)));
  const ConstMatrixView xv = Dense(AsDeviceFloats(std::as_const(dev_x)), kRows, in);
  const ConstMatrixView wv = Dense(AsDeviceFloats(std::as_const(dev_w)), kOut, in);
  const ConstMatrixView dyv = Dense(AsDeviceFloats(std::as_const(dev_dy)), kRows, kOut);
  const MatrixView yv = Dense(AsDeviceFloats(dev_y), kRows, kOut);
  LOOM_RETURN_IF_ERROR(GpuLinearForward(cublas, xv, wv, {}, yv));
  LOOM_RETURN_IF_ERROR(AllReduceSumThroughHost(tp, cublas, AsDeviceFloats(dev_y)));
  LOOM_RETURN_IF_ERROR(GpuAddBias(cublas, AsDeviceFloats(std::as_const(dev_b)), yv));
  LOOM_RETURN_IF_ERROR(
      GpuLinearBackwardInput(cublas, dyv, wv, Dense(AsDeviceFloats(dev_dx), kRows, in)));
  LOOM_RETURN_IF_ERROR(GpuLinearBackwardWeight(
      cublas, dyv, xv, Dense(AsDeviceFloats(dev_dw), kOut, in), AsDeviceFloats(dev_db)));
  LOOM_RETURN_IF_ERROR(stream.Synchronize(absl::Now() + absl::Seconds(60)));
  LOOM_ASSIGN_OR_RETURN(const std::vector<float> y, FromDevice(dev_y));
  LOOM_ASSIGN_OR_RETURN(const std::vector<float> dx, FromDevice(dev_dx));
  LOOM_ASSIGN_OR_RETURN(const std::vector<float> dw, FromDevice(dev_dw));
  LOOM_ASSIGN_OR_RETURN(const std::vector<float> db, FromDevice(dev_db));

  const std::string where = absl::StrCat(CaseName(c), " rank ", tp.rank(), " row-parallel ");
  // y sums every rank's x_r W_r^T: the full x times the full W^T, then the bias.
  const std::vector<float> w_all = Widened(w, {kOut, kIn}, c.storage);
  LOOM_RETURN_IF_ERROR(Expect(where + "y", y, y_cpu,
                              Bound(x, kRows, kIn, w_all, /*b_transposed=*/true, kOut, b_all, Rounding(c))));
  LOOM_RETURN_IF_ERROR(Expect(where + "dx", dx, dx_cpu,
                              Bound(dy, kRows, kOut, w_local, /*b_transposed=*/false, in, {}, Rounding(c))));
  LOOM_RETURN_IF_ERROR(
      Expect(where + "dW", dw, dw_cpu,
             Bound(Transposed(dy, kRows, kOut), kOut, kRows, x_local, false, in, {}, Rounding(c))));
  if (db != db_cpu) return absl::InternalError(where + "db differs from the CPU's SumRows");
  return absl::OkStatus();
}

TEST_P(GpuLinearLayerTest, ColumnParallelMatchesTheCpuLayer) {
  const LayerCase c = GetParam();
  for (const absl::Status& s :
       RunTp(c.tp, [&](Communicator& tp) { return ColumnParallelRank(tp, c); })) {
    EXPECT_THAT(s, IsOk()) << CaseName(c);
  }
}

TEST_P(GpuLinearLayerTest, RowParallelMatchesTheCpuLayer) {
  const LayerCase c = GetParam();
  for (const absl::Status& s :
       RunTp(c.tp, [&](Communicator& tp) { return RowParallelRank(tp, c); })) {
    EXPECT_THAT(s, IsOk()) << CaseName(c);
  }
}

INSTANTIATE_TEST_SUITE_P(TpAndStorage, GpuLinearLayerTest,
                         ::testing::Values(LayerCase{1, DType::kF32}, LayerCase{2, DType::kF32},
                                           LayerCase{1, DType::kBF16}, LayerCase{2, DType::kBF16}));

}  // namespace
}  // namespace loom
