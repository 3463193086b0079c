// A short training run on one rank: the model learns the Markov chain of
// markov_data.h with AdamW (offload/adamw/cpu_adamw.h), and its loss falls from
// log(V) (uniform guessing) to well below half of it, toward the chain's entropy.
#include <chrono>
#include <cstdio>
#include <cmath>
#include <vector>

#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gtest/gtest.h"
#include "models/gpt/gpt_model.h"
#include "models/gpt/internal/train_testing.h"
#include "models/gpt/markov_data.h"
#include "offload/adamw/cpu_adamw.h"

namespace loom {
namespace {

using train_testing::ExpectAllOk;
using train_testing::RunTp;

TEST(GptTrainingTest, AdamWLearnsTheMarkovChain) {
  GptConfig config;
  config.vocab = 32;
  config.seq_len = 16;
  config.hidden = 32;
  config.heads = 2;
  config.layers = 2;
  MarkovOptions data_options;
  data_options.vocab = config.vocab;
  data_options.seq_len = config.seq_len;
  LOOM_ASSERT_OK_AND_ASSIGN(const MarkovData data, MarkovData::Create(data_options));
  BatchLayout layout;
  layout.micro_batch = 8;
  constexpr int kSteps = 150;
  std::vector<float> losses;
  const auto start = std::chrono::steady_clock::now();
  ExpectAllOk(RunTp(1, [&](Communicator& tp) -> absl::Status {
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GptModel> model, GptModel::Create(config, tp));
    std::vector<GptParameter> params = model->Parameters();
    std::vector<AdamWState> states;
    for (const GptParameter& p : params) {
      LOOM_ASSIGN_OR_RETURN(AdamWState state,
                            AdamWState::Create(static_cast<int64_t>(p.values.size())));
      states.push_back(std::move(state));
    }
    AdamWHyper hyper;
    hyper.lr = 1e-2f;
    hyper.weight_decay = 0.0f;
    for (int step = 0; step < kSteps; ++step) {
      LOOM_ASSIGN_OR_RETURN(GptBatch batch, data.Microbatch(layout, step, 0, 0));
      model->ZeroGrad();
      LOOM_ASSIGN_OR_RETURN(const float loss, model->Forward(batch.tokens, batch.targets));
      losses.push_back(loss);
      LOOM_RETURN_IF_ERROR(model->Backward());
      hyper.step = step + 1;
      for (size_t k = 0; k < params.size(); ++k) {
        LOOM_RETURN_IF_ERROR(AdamWStep(hyper, params[k].values, params[k].grad, states[k]));
      }
    }
    return absl::OkStatus();
  }));
  ASSERT_EQ(losses.size(), static_cast<size_t>(kSteps));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double last = 0;
  for (int i = kSteps - 10; i < kSteps; ++i) last += static_cast<double>(losses[i]) / 10;
  const double log_v = std::log(static_cast<double>(config.vocab));
  std::printf("loss %.3f -> %.3f (log V %.3f, entropy %.3f) in %.1f s\n",
              static_cast<double>(losses[0]), last, log_v, data.EntropyRate(), seconds);
  EXPECT_NEAR(losses[0], log_v, 0.1);
  EXPECT_LT(last, 0.5 * log_v);
  EXPECT_GT(last, data.EntropyRate() - 0.15) << "below the entropy: the data leaks";
}

}  // namespace
}  // namespace loom
