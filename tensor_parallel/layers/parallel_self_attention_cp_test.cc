// ParallelSelfAttention under context parallelism against the same layer on the
// whole sequence (cp = 1, itself checked against a double-precision reference by
// parallel_self_attention_test): cp = 2..4, tp = 1 and 2, zigzag and contiguous, a
// sequence that divides into the chunks and one that does not (37 on 2 cp = 8
// chunks). Each rank's output and input gradient are compared at its global
// positions; the projections' weight and bias gradients, summed over the cp group,
// with the whole sequence's. Bound: 2e-5 (output) and 5e-5 (gradients) of the largest
// magnitude, as ring_attention_test, since the ring merges blocks in another order.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/communicator.h"
#include "core/mutex.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor_parallel/layers/internal/tp_testing.h"
#include "tensor_parallel/layers/parallel_self_attention.h"
#include "tensor_parallel/layers/ring_attention.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using tp_layers_testing::ExpectAllOk;
using tp_layers_testing::ExpectClose;
using tp_layers_testing::RandomTensor;
using tp_layers_testing::RunTp;
using tp_layers_testing::RunTpCp;
using tp_layers_testing::TpCpRank;
using tp_layers_testing::Values;

constexpr int64_t kBatch = 2, kHidden = 16, kHeads = 4;

using Case = tp_layers_testing::TpCpCase;
using tp_layers_testing::TpCpCaseName;

// The layer's results on one rank, at global positions where they are per position.
struct Results {
  std::vector<double> y, dx;               // [seq, b, h]
  std::vector<std::vector<double>> grads;  // by tp rank: qkv w, qkv b, out w, out b
};

struct Weights {
  Tensor wqkv, bqkv, wo, bo;
};

Weights MakeWeights() {
  Weights w;
  w.wqkv = RandomTensor({3 * kHidden, kHidden}, 11);
  w.bqkv = RandomTensor({3 * kHidden}, 12);
  w.wo = RandomTensor({kHidden, kHidden}, 13);
  w.bo = RandomTensor({kHidden}, 14);
  return w;
}

// Rows of a [seq, b, h] tensor at `chunks`' positions, as a [rows, b, h] tensor.
absl::StatusOr<Tensor> RowsAt(const Tensor& t, const std::vector<PositionRange>& chunks) {
  std::vector<Tensor> parts;
  for (const PositionRange& c : chunks) {
    if (c.length == 0) continue;
    LOOM_ASSIGN_OR_RETURN(Tensor part, t.Slice(0, c.offset, c.length));
    parts.push_back(std::move(part));
  }
  return Tensor::Concat(parts, 0);
}

// Writes a [rows, b, h] tensor's rows back at `chunks`' positions of a [seq, b, h] array.
void ScatterRows(const Tensor& t, const std::vector<PositionRange>& chunks,
                 std::vector<double>& whole) {
  const std::vector<double> v = Values(t);
  const int64_t row = kBatch * kHidden;
  int64_t r = 0;
  for (const PositionRange& c : chunks) {
    for (int64_t i = 0; i < c.length; ++i, ++r) {
      for (int64_t e = 0; e < row; ++e) whole[(c.offset + i) * row + e] = v[r * row + e];
    }
  }
}

void AddInto(const Tensor& t, std::vector<double>& sum) {
  const std::vector<double> v = Values(t);
  if (sum.empty()) sum.assign(v.size(), 0.0);
  for (size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
}

// RunLayer runs the layer on tp x cp thread ranks (tp fastest: rank = c * tp + t).
Results RunLayer(const Case& c, const Weights& w, const Tensor& x, const Tensor& dy,
                 CpComm comm = CpComm::kRing) {
  Results results;
  results.y.assign(c.seq * kBatch * kHidden, 0.0);
  results.dx.assign(results.y.size(), 0.0);
  results.grads.assign(c.tp, std::vector<double>());
  std::vector<std::vector<std::vector<double>>> grads(c.cp * c.tp);
  Mutex mu;
  ExpectAllOk(RunTpCp(c.tp, c.cp, [&](const TpCpRank& at) -> absl::Status {
    const int t = at.tp_rank, k = at.cp_rank;
    ParallelSelfAttentionOptions options;
    options.num_heads = kHeads;
    options.context_parallel = at.cp;
    options.cp_layout = c.layout;
    options.cp_comm = comm;
    options.cp_sequence_length = c.seq;
    LOOM_ASSIGN_OR_RETURN(
        ParallelSelfAttention attn,
        ParallelSelfAttention::Create(w.wqkv, &w.bqkv, w.wo, &w.bo, *at.tp, options));
    LOOM_ASSIGN_OR_RETURN(const std::vector<PositionRange> chunks,
                          CpChunks(c.seq, c.cp, k, c.layout));
    LOOM_ASSIGN_OR_RETURN(const Tensor local_x, RowsAt(x, chunks));
    LOOM_ASSIGN_OR_RETURN(const Tensor local_dy, RowsAt(dy, chunks));
    LOOM_ASSIGN_OR_RETURN(const Tensor y, attn.Forward(local_x));
    LOOM_ASSIGN_OR_RETURN(const Tensor dx, attn.Backward(local_dy));
    std::vector<std::vector<double>> mine(4);
    AddInto(attn.qkv().weight_grad(), mine[0]);
    AddInto(attn.qkv().bias_grad(), mine[1]);
    AddInto(attn.out().weight_grad(), mine[2]);
    AddInto(attn.out().bias_grad(), mine[3]);
    const MutexLock lock(&mu);
    // Every tp rank of a cp coordinate holds the whole output and input gradient.
    if (t == 0) {
      ScatterRows(y, chunks, results.y);
      ScatterRows(dx, chunks, results.dx);
    }
    grads[at.world_rank] = std::move(mine);
    return absl::OkStatus();
  }));
  // Sum each tp rank's gradients over the cp group, flattened in a fixed order.
  for (int t = 0; t < c.tp; ++t) {
    for (int part = 0; part < 4; ++part) {
      std::vector<double> sum;
      for (int k = 0; k < c.cp; ++k) {
        const std::vector<double>& g = grads[k * c.tp + t][part];
        if (sum.empty()) sum.assign(g.size(), 0.0);
        for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
      }
      results.grads[t].insert(results.grads[t].end(), sum.begin(), sum.end());
    }
  }
  return results;
}

std::vector<float> AsFloats(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

class ParallelSelfAttentionCpTest : public ::testing::TestWithParam<Case> {};

TEST_P(ParallelSelfAttentionCpTest, MatchesTheWholeSequence) {
  const Case& c = GetParam();
  const Weights w = MakeWeights();
  const Tensor x = RandomTensor({c.seq, kBatch, kHidden}, 21);
  const Tensor dy = RandomTensor({c.seq, kBatch, kHidden}, 22);
  const Results whole = RunLayer(Case{c.tp, 1, c.layout, c.seq}, w, x, dy);
  const Results split = RunLayer(c, w, x, dy);
  ExpectClose(AsFloats(split.y), whole.y, TpCpCaseName(c) + " y", 2e-5);
  ExpectClose(AsFloats(split.dx), whole.dx, TpCpCaseName(c) + " dx", 5e-5);
  for (int t = 0; t < c.tp; ++t) {
    ExpectClose(AsFloats(split.grads[t]), whole.grads[t],
                absl::StrCat(TpCpCaseName(c), " gradients of tp rank ", t), 5e-5);
  }
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (int tp : {1, 2}) {
    for (int cp : {2, 3, 4}) {
      for (CpLayout layout : {CpLayout::kZigzag, CpLayout::kContiguous}) {
        for (int64_t seq : {16, 37}) cases.push_back(Case{tp, cp, layout, seq});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, ParallelSelfAttentionCpTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& case_info) {
                           return TpCpCaseName(case_info.param);
                         });

// The all-to-all variant (heads re-sharded over cp) gives the whole sequence's results
// too, wherever cp divides a tp rank's heads (4 heads: tp 1 with cp 2 and 4, tp 2 with
// cp 2), on both layouts and a length that does not split evenly; run twice, the same
// bits.
TEST(ParallelSelfAttentionCpCallTest, AllToAllMatchesTheWholeSequence) {
  const Weights w = MakeWeights();
  for (const Case& c : {Case{1, 2, CpLayout::kZigzag, 37}, Case{1, 4, CpLayout::kZigzag, 37},
                        Case{2, 2, CpLayout::kContiguous, 37}, Case{2, 2, CpLayout::kZigzag, 16}}) {
    const Tensor x = RandomTensor({c.seq, kBatch, kHidden}, 41);
    const Tensor dy = RandomTensor({c.seq, kBatch, kHidden}, 42);
    const Results whole = RunLayer(Case{c.tp, 1, c.layout, c.seq}, w, x, dy);
    const Results split = RunLayer(c, w, x, dy, CpComm::kAllToAll);
    const std::string name = TpCpCaseName(c) + " a2a";
    ExpectClose(AsFloats(split.y), whole.y, name + " y", 2e-5);
    ExpectClose(AsFloats(split.dx), whole.dx, name + " dx", 5e-5);
    for (int t = 0; t < c.tp; ++t) {
      ExpectClose(AsFloats(split.grads[t]), whole.grads[t],
                  absl::StrCat(name, " gradients of tp rank ", t), 5e-5);
    }
    const Results again = RunLayer(c, w, x, dy, CpComm::kAllToAll);
    EXPECT_EQ(again.y, split.y) << name;
    EXPECT_EQ(again.grads, split.grads) << name;
  }
}

// Run twice, the same bits: the ring's order does not depend on timing.
TEST(ParallelSelfAttentionCpCallTest, BitwiseTheSameRunToRun) {
  const Case c{2, 3, CpLayout::kZigzag, 37};
  const Weights w = MakeWeights();
  const Tensor x = RandomTensor({c.seq, kBatch, kHidden}, 31);
  const Tensor dy = RandomTensor({c.seq, kBatch, kHidden}, 32);
  const Results a = RunLayer(c, w, x, dy), b = RunLayer(c, w, x, dy);
  EXPECT_EQ(a.y, b.y);
  EXPECT_EQ(a.dx, b.dx);
  EXPECT_EQ(a.grads, b.grads);
}

TEST(ParallelSelfAttentionCpCallTest, BadOptionsAndShapesNameTheValues) {
  const Weights w = MakeWeights();
  ExpectAllOk(RunTp(2, [&](Communicator& cp) -> absl::Status {
    ParallelSelfAttentionOptions options;
    options.num_heads = kHeads;
    options.context_parallel = &cp;
    ExpectAllOk(RunTp(1, [&](Communicator& tp) -> absl::Status {
      EXPECT_THAT(ParallelSelfAttention::Create(w.wqkv, &w.bqkv, w.wo, &w.bo, tp, options),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           HasSubstr("cp_sequence_length 0 must be >= 1")));
      return absl::OkStatus();
    }));
    options.cp_sequence_length = 10;  // 5 rows per rank
    ExpectAllOk(RunTp(1, [&](Communicator& tp) -> absl::Status {
      LOOM_ASSIGN_OR_RETURN(
          ParallelSelfAttention attn,
          ParallelSelfAttention::Create(w.wqkv, &w.bqkv, w.wo, &w.bo, tp, options));
      EXPECT_THAT(attn.Forward(RandomTensor({4, kBatch, kHidden}, 1)),
                  StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("holds [5,4]")));
      return absl::OkStatus();
    }));
    // a2a needs cp to divide each tp rank's heads: tp 4 leaves one head per rank.
    options.cp_comm = CpComm::kAllToAll;
    ExpectAllOk(RunTp(4, [&](Communicator& tp) -> absl::Status {
      EXPECT_THAT(ParallelSelfAttention::Create(w.wqkv, &w.bqkv, w.wo, &w.bo, tp, options),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           HasSubstr(absl::StrCat("cp_comm a2a: tp rank ", tp.rank(),
                                                  " holds 1 of 4 heads"))));
      return absl::OkStatus();
    }));
    return absl::OkStatus();
  }));
}

}  // namespace
}  // namespace loom
