// A model under context parallelism (cp = 2..4 ranks as threads over inproc, each
// holding its rows of every sequence; with tp = 2 too) against the cp = 1 model: the
// cp ranks' loss shares add up to the cp = 1 loss, and their gradients, summed over the
// cp group, equal the cp = 1 gradients within 1e-5 of each tensor's largest magnitude
// (ring attention merges blocks in another order: a few f32 roundings). Zigzag and
// contiguous layouts, a sequence length that divides into the chunks (32) and one that
// does not (30 on cp 4 = 8 chunks of 3 or 4).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/mutex.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/gpt/gpt_model.h"
#include "models/gpt/internal/train_testing.h"
#include "tensor_parallel/layers/ring_attention.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using tp_layers_testing::RunTpCp;
using tp_layers_testing::TpCpRank;
using train_testing::ExpectAllOk;
using train_testing::ExpectClose;
using train_testing::RunTp;
using train_testing::SeededIds;

constexpr double kRel = 1e-5;
constexpr int64_t kBatch = 2;

using Case = tp_layers_testing::TpCpCase;
using tp_layers_testing::TpCpCaseName;

// What the cp group of each tp rank computed: the loss shares' sum and the
// gradients summed over cp.
struct Result {
  std::vector<double> loss;                             // by tp rank
  std::vector<std::vector<std::vector<double>>> grads;  // by tp rank, parameter
  std::vector<std::string> names;
};

// Columns [offset, offset + length) of each row of a [rows, width] sequence-major
// id array [batch, seq]: this cp rank's positions of every sequence.
std::vector<int64_t> LocalIds(const std::vector<int64_t>& ids, int64_t seq,
                              const std::vector<int64_t>& positions) {
  std::vector<int64_t> out;
  for (int64_t j = 0; j < kBatch; ++j) {
    for (const int64_t p : positions) out.push_back(ids[j * seq + p]);
  }
  return out;
}

Result RunModel(const Case& c) {
  GptConfig config;  // V=64, seq=32, hidden=64, heads=4, layers=4
  config.seq_len = c.seq;
  config.layers = 2;
  const std::vector<int64_t> tokens = SeededIds(kBatch * c.seq, config.vocab, 41);
  const std::vector<int64_t> targets = SeededIds(kBatch * c.seq, config.vocab, 42);
  Result result;
  result.loss.assign(c.tp, 0.0);
  result.grads.assign(c.tp, {});
  Mutex mu;
  ExpectAllOk(RunTpCp(c.tp, c.cp, [&](const TpCpRank& at) -> absl::Status {
    const int t = at.tp_rank;
    GptModelOptions options;
    options.context_parallel.group = at.cp;
    options.context_parallel.layout = c.layout;
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model,
                          GptModel::Create(config, *at.tp, options));
    const std::vector<int64_t>& positions = model->local_positions();
    LOOM_ASSIGN_OR_RETURN(const float loss, model->Forward(LocalIds(tokens, c.seq, positions),
                                                           LocalIds(targets, c.seq, positions)));
    LOOM_RETURN_IF_ERROR(model->Backward());
    const MutexLock lock(&mu);
    result.loss[t] += static_cast<double>(loss);
    std::vector<std::vector<double>>& sums = result.grads[t];
    const std::vector<GptParameter> params = model->Parameters();
    sums.resize(params.size());
    result.names.clear();
    for (size_t p = 0; p < params.size(); ++p) {
      result.names.push_back(params[p].name);
      if (sums[p].empty()) sums[p].assign(params[p].grad.size(), 0.0);
      for (size_t i = 0; i < params[p].grad.size(); ++i) {
        sums[p][i] += static_cast<double>(params[p].grad[i]);
      }
    }
    return absl::OkStatus();
  }));
  return result;
}

std::vector<float> AsFloats(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

class GptContextParallelTest : public ::testing::TestWithParam<Case> {};

TEST_P(GptContextParallelTest, SharesAddUpToTheWholeSequence) {
  const Case& c = GetParam();
  const Result whole = RunModel(Case{c.tp, 1, c.layout, c.seq});
  const Result split = RunModel(c);
  for (int t = 0; t < c.tp; ++t) {
    SCOPED_TRACE(absl::StrCat(TpCpCaseName(c), " tp rank ", t));
    EXPECT_NEAR(split.loss[t], whole.loss[t], kRel * std::fabs(whole.loss[t]));
    ASSERT_EQ(split.grads[t].size(), whole.grads[t].size());
    for (size_t p = 0; p < whole.grads[t].size(); ++p) {
      ExpectClose(AsFloats(split.grads[t][p]), AsFloats(whole.grads[t][p]), whole.names[p], kRel);
    }
  }
}

std::vector<Case> AllCases() {
  return {Case{1, 2, CpLayout::kZigzag, 32}, Case{1, 3, CpLayout::kZigzag, 32},
          Case{1, 4, CpLayout::kZigzag, 30}, Case{1, 4, CpLayout::kContiguous, 30},
          Case{2, 2, CpLayout::kZigzag, 32}, Case{2, 2, CpLayout::kContiguous, 30}};
}

INSTANTIATE_TEST_SUITE_P(Cases, GptContextParallelTest, ::testing::ValuesIn(AllCases()),
                         [](const ::testing::TestParamInfo<Case>& case_info) {
                           return TpCpCaseName(case_info.param);
                         });

TEST(GptContextParallelCallTest, LocalPositionsAndWrongTokenCountsAreNamed) {
  GptConfig config;
  config.seq_len = 10;
  config.layers = 1;
  ExpectAllOk(RunTp(2, [&](Communicator& cp) -> absl::Status {
    ExpectAllOk(RunTp(1, [&](Communicator& tp) -> absl::Status {
      GptModelOptions options;
      options.context_parallel.group = &cp;
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model, GptModel::Create(config, tp, options));
      // Zigzag on 2 ranks: chunks of 10 / 4 = 3, 3, 2, 2; rank 0 holds 0-2 and 8-9.
      const std::vector<int64_t> expected = cp.rank() == 0 ? std::vector<int64_t>{0, 1, 2, 8, 9}
                                                           : std::vector<int64_t>{3, 4, 5, 6, 7};
      EXPECT_EQ(model->local_positions(), expected);
      const std::vector<int64_t> ids(7, 1);
      EXPECT_THAT(model->Forward(ids, ids),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           HasSubstr("7 tokens are not a positive multiple of this cp rank's "
                                     "positions 5")));
      return absl::OkStatus();
    }));
    return absl::OkStatus();
  }));
}

}  // namespace
}  // namespace loom
