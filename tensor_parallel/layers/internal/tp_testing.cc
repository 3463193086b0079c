#include "tensor_parallel/layers/internal/tp_testing.h"

#include "absl/strings/str_cat.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <thread>
#include <utility>

#include "collectives/transport/inproc/inproc_transport.h"
#include "core/status_matchers.h"
#include "gtest/gtest.h"

namespace loom {
namespace tp_layers_testing {

std::vector<absl::Status> RunTp(int tp, const std::function<absl::Status(Communicator&)>& body) {
  std::vector<absl::Status> results(static_cast<size_t>(tp));
  absl::StatusOr<std::shared_ptr<InprocGroup>> group = InprocGroup::Create(tp);
  if (!group.ok()) return std::vector<absl::Status>(static_cast<size_t>(tp), group.status());
  std::vector<std::thread> threads;
  for (int rank = 0; rank < tp; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<Transport>> endpoint = (*group)->Endpoint(rank);
      if (!endpoint.ok()) {
        results[rank] = endpoint.status();
        return;
      }
      CommunicatorOptions options;
      options.timeout = absl::Seconds(60);
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          Communicator::Create(std::move(*endpoint), options);
      results[rank] = comm.ok() ? body(**comm) : comm.status();
    });
  }
  for (auto& thread : threads) thread.join();
  return results;
}

std::vector<absl::Status> RunTpCp(int tp, int cp,
                                  const std::function<absl::Status(const TpCpRank&)>& body) {
  return RunTp(tp * cp, [&](Communicator& world) -> absl::Status {
    TpCpRank rank;
    rank.world_rank = world.rank();
    rank.tp_rank = world.rank() % tp;
    rank.cp_rank = world.rank() / tp;
    std::vector<int> tp_ranks, cp_ranks;
    for (int i = 0; i < tp; ++i) tp_ranks.push_back(rank.cp_rank * tp + i);
    for (int i = 0; i < cp; ++i) cp_ranks.push_back(i * tp + rank.tp_rank);
    absl::StatusOr<std::unique_ptr<Communicator>> tp_comm = world.Split(tp_ranks);
    if (!tp_comm.ok()) return tp_comm.status();
    absl::StatusOr<std::unique_ptr<Communicator>> cp_comm = world.Split(cp_ranks);
    if (!cp_comm.ok()) return cp_comm.status();
    rank.tp = tp_comm->get();
    rank.cp = cp_comm->get();
    return body(rank);
  });
}

std::string TpCpCaseName(const TpCpCase& c) {
  return absl::StrCat("tp", c.tp, "_cp", c.cp, "_", CpLayoutName(c.layout), "_s", c.seq);
}

void ExpectAllOk(const std::vector<absl::Status>& results) {
  for (size_t r = 0; r < results.size(); ++r) EXPECT_THAT(results[r], IsOk()) << "rank " << r;
}

std::vector<float> RandomValues(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

Tensor RandomTensor(std::vector<int64_t> shape, uint32_t seed) {
  const int64_t n = NumElements(shape);
  return *Tensor::FromValues(std::move(shape), RandomValues(n, seed));
}

std::vector<double> RoundedToStorage(const Tensor& t, DType dtype) {
  return Values(*t.ConvertTo(dtype));
}

std::vector<double> Values(const Tensor& t) {
  const std::vector<float> f = t.ToF32();
  return std::vector<double>(f.begin(), f.end());
}

void ExpectClose(absl::Span<const float> actual, absl::Span<const double> expected,
                 const std::string& what, double rel) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  double scale = 1.0;
  for (double e : expected) scale = std::max(scale, std::fabs(e));
  const double bound = rel * scale;
  int reported = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(actual[i]) - expected[i]);
    if (!(diff <= bound) && reported++ < 5) {
      ADD_FAILURE() << what << "[" << i << "] = " << actual[i] << ", reference " << expected[i]
                    << " (|diff| " << diff << " > bound " << bound << ")";
    }
  }
}

void ExpectClose(const Tensor& actual, absl::Span<const double> expected, const std::string& what,
                 double rel) {
  ASSERT_EQ(actual.dtype(), DType::kF32) << what;
  ExpectClose(*actual.As<float>(), expected, what, rel);
}

std::vector<double> SliceRows(absl::Span<const double> m, int64_t width, int64_t offset,
                              int64_t length) {
  return std::vector<double>(m.begin() + offset * width, m.begin() + (offset + length) * width);
}

std::vector<double> SliceCols(absl::Span<const double> m, int64_t width, int64_t offset,
                              int64_t length) {
  const int64_t rows = width == 0 ? 0 : static_cast<int64_t>(m.size()) / width;
  std::vector<double> out;
  out.reserve(static_cast<size_t>(rows * length));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < length; ++j) out.push_back(m[i * width + offset + j]);
  }
  return out;
}

std::vector<double> MatMulNT(absl::Span<const double> a, absl::Span<const double> b, int64_t m,
                             int64_t n, int64_t k) {
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += a[i * k + p] * b[j * k + p];
      c[i * n + j] = s;
    }
  }
  return c;
}

std::vector<double> MatMulNN(absl::Span<const double> a, absl::Span<const double> b, int64_t m,
                             int64_t n, int64_t k) {
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += a[i * k + p] * b[p * n + j];
    }
  }
  return c;
}

std::vector<double> MatMulTN(absl::Span<const double> a, absl::Span<const double> b, int64_t m,
                             int64_t n, int64_t k) {
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t p = 0; p < k; ++p) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += a[p * m + i] * b[p * n + j];
    }
  }
  return c;
}

LinearReference DenseLinearReference(const Tensor& w, const Tensor& b, const Tensor& x,
                                     const Tensor& dy, DType weight_dtype) {
  const int64_t out = w.shape()[0];
  const int64_t in = w.shape()[1];
  const int64_t rows = x.numel() / in;
  const std::vector<double> wd = RoundedToStorage(w, weight_dtype);
  const std::vector<double> bd = RoundedToStorage(b, weight_dtype);
  // A bf16 layer's products round their inputs to bf16 (gemm.h's kBf16): x and dy
  // are rounded for them as the weight is; the bias gradient sums dy as it is.
  const std::vector<double> xd = RoundedToStorage(x, weight_dtype);
  const std::vector<double> dy_product = RoundedToStorage(dy, weight_dtype), dyd = Values(dy);
  LinearReference ref;
  ref.y = MatMulNT(xd, wd, rows, out, in);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < out; ++j) ref.y[i * out + j] += bd[j];
  }
  ref.dx = MatMulNN(dy_product, wd, rows, in, out);
  ref.dw = MatMulTN(dy_product, xd, out, in, rows);
  ref.db.assign(static_cast<size_t>(out), 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < out; ++j) ref.db[j] += dyd[i * out + j];
  }
  return ref;
}

std::string RuleName(ShardRule rule) { return std::string(ShardRuleName(rule)); }

}  // namespace tp_layers_testing
}  // namespace loom
