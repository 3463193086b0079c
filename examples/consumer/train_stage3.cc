// train_stage3: a model of the user's own, two layers (tanh(x W1^T + b1) W2^T + b2,
// mean squared error against a fixed teacher), trained with data parallelism at
// ZeRO stage 3 on 4 thread ranks through Loom's DataParallelOptimizer
// (zero3/data_parallel.h). The model implements core/borrowing_model.h: it lists
// its parameters, declares its two units (one per layer), and from then on leases
// each layer from the optimizer just before it computes with it, so every rank
// holds only its quarter of the weights, gradients and AdamW state between uses.
// Each rank trains on batches of its own; the program prints each rank's loss at
// the first and last step and checks that it fell, and that all ranks end with the
// same weights.
//
//   train_stage3 [steps] [stage]
// Exit status: 0 when every rank's loss fell to under half its first value and the
// ranks agree; 1 otherwise; 2 for bad arguments.
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "collectives/communicator.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "core/borrowing_model.h"
#include "core/parameter_source.h"
#include "zero3/data_parallel.h"

namespace {

constexpr int kRanks = 4;
constexpr int kIn = 16, kHidden = 64, kOut = 8, kBatch = 32;

// TwoLayerModel: parameters 0 W1 [kHidden, kIn], 1 b1, 2 W2 [kOut, kHidden], 3 b2;
// units "layer1" = {0, 1}, "layer2" = {2, 3}.
class TwoLayerModel : public loom::BorrowingModel {
 public:
  explicit TwoLayerModel(uint32_t seed) : w_(kHidden * kIn + kHidden + kOut * kHidden + kOut) {
    // Every rank starts from the same weights (the seed is shared).
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int i = 0; i < kHidden * kIn; ++i) w_[i] = normal(rng) / std::sqrt(float{kIn});
    for (int i = 0; i < kOut * kHidden; ++i) {
      w_[kHidden * kIn + kHidden + i] = normal(rng) / std::sqrt(float{kHidden});
    }
  }

  std::vector<loom::ModelParameter> ParameterViews() override {
    const absl::Span<float> all = source_ == nullptr ? absl::MakeSpan(w_) : absl::Span<float>();
    auto part = [&](size_t at, size_t n) {
      return all.empty() ? absl::Span<float>() : all.subspan(at, n);
    };
    return {{"layer1.weight", {kHidden, kIn}, part(0, kHidden * kIn), {}},
            {"layer1.bias", {kHidden}, part(kHidden * kIn, kHidden), {}},
            {"layer2.weight", {kOut, kHidden}, part(kHidden * kIn + kHidden, kOut * kHidden), {}},
            {"layer2.bias", {kOut}, part(kHidden * kIn + kHidden + kOut * kHidden, kOut), {}}};
  }
  std::vector<loom::ParameterUnit> Units() const override {
    return {{"layer1", 0, 2}, {"layer2", 2, 4}};
  }
  absl::Status UseParameterSource(loom::ParameterSource* source, loom::GradientHome grads) override {
    if (source_ != nullptr) return absl::FailedPreconditionError("UseParameterSource twice");
    if (grads != loom::GradientHome::kSource) {
      return absl::InvalidArgumentError("this model hands its gradients to the source");
    }
    source_ = source;
    w_ = std::vector<float>();  // the source holds the weights now
    return absl::OkStatus();
  }

  // TrainStep: one forward and backward pass over (x [kBatch, kIn], y [kBatch,
  // kOut]); the gradients go to the source. Returns the batch's mean loss.
  absl::StatusOr<double> TrainStep(const std::vector<float>& x, const std::vector<float>& y) {
    const std::vector<loom::ParameterUnit> units = Units();
    std::vector<float> h(kBatch * kHidden), out(kBatch * kOut);
    if (absl::Status s = source_->BeginParameterPass(loom::ParameterPass::kForward); !s.ok()) {
      return s;
    }
    absl::Status status = [&]() -> absl::Status {
      {
        absl::StatusOr<loom::UnitLease> layer = source_->LeaseUnit(units[0]);
        if (!layer.ok()) return layer.status();
        absl::StatusOr<absl::Span<const float>> w1 = layer->Get(0), b1 = layer->Get(1);
        if (!w1.ok()) return w1.status();
        if (!b1.ok()) return b1.status();
        for (int n = 0; n < kBatch; ++n) {
          for (int j = 0; j < kHidden; ++j) {
            float a = (*b1)[j];
            for (int i = 0; i < kIn; ++i) a += (*w1)[j * kIn + i] * x[n * kIn + i];
            h[n * kHidden + j] = std::tanh(a);
          }
        }
      }
      absl::StatusOr<loom::UnitLease> layer = source_->LeaseUnit(units[1]);
      if (!layer.ok()) return layer.status();
      absl::StatusOr<absl::Span<const float>> w2 = layer->Get(2), b2 = layer->Get(3);
      if (!w2.ok()) return w2.status();
      if (!b2.ok()) return b2.status();
      for (int n = 0; n < kBatch; ++n) {
        for (int k = 0; k < kOut; ++k) {
          float a = (*b2)[k];
          for (int j = 0; j < kHidden; ++j) a += (*w2)[k * kHidden + j] * h[n * kHidden + j];
          out[n * kOut + k] = a;
        }
      }
      return absl::OkStatus();
    }();
    if (absl::Status ended = source_->EndPass(); status.ok()) status = ended;
    if (!status.ok()) return status;

    double loss = 0;
    std::vector<float> d_out(kBatch * kOut);
    for (int i = 0; i < kBatch * kOut; ++i) {
      const float e = out[i] - y[i];
      loss += static_cast<double>(e) * e;
      d_out[i] = 2.0f * e / (kBatch * kOut);
    }
    loss /= kBatch * kOut;

    if (absl::Status s = source_->BeginParameterPass(loom::ParameterPass::kBackward); !s.ok()) {
      return s;
    }
    status = [&]() -> absl::Status {
      std::vector<float> d_h(kBatch * kHidden, 0.0f);
      {
        absl::StatusOr<loom::UnitLease> layer = source_->LeaseUnit(units[1]);
        if (!layer.ok()) return layer.status();
        absl::StatusOr<absl::Span<const float>> w2 = layer->Get(2);
        if (!w2.ok()) return w2.status();
        std::vector<float> d_w2(kOut * kHidden, 0.0f), d_b2(kOut, 0.0f);
        for (int n = 0; n < kBatch; ++n) {
          for (int k = 0; k < kOut; ++k) {
            const float g = d_out[n * kOut + k];
            d_b2[k] += g;
            for (int j = 0; j < kHidden; ++j) {
              d_w2[k * kHidden + j] += g * h[n * kHidden + j];
              d_h[n * kHidden + j] += g * (*w2)[k * kHidden + j];
            }
          }
        }
        if (absl::Status s = source_->AddGrad(3, d_b2); !s.ok()) return s;
        if (absl::Status s = source_->AddGrad(2, d_w2); !s.ok()) return s;
      }
      absl::StatusOr<loom::UnitLease> layer = source_->LeaseUnit(units[0]);
      if (!layer.ok()) return layer.status();
      std::vector<float> d_w1(kHidden * kIn, 0.0f), d_b1(kHidden, 0.0f);
      for (int n = 0; n < kBatch; ++n) {
        for (int j = 0; j < kHidden; ++j) {
          const float t = h[n * kHidden + j];
          const float g = d_h[n * kHidden + j] * (1.0f - t * t);
          d_b1[j] += g;
          for (int i = 0; i < kIn; ++i) d_w1[j * kIn + i] += g * x[n * kIn + i];
        }
      }
      if (absl::Status s = source_->AddGrad(1, d_b1); !s.ok()) return s;
      return source_->AddGrad(0, d_w1);
    }();
    if (absl::Status ended = source_->EndPass(); status.ok()) status = ended;
    if (!status.ok()) return status;
    return loss;
  }

 private:
  std::vector<float> w_;  // the initial weights, until the source takes them
  loom::ParameterSource* source_ = nullptr;
};

// A batch of rank `rank` at step `step`: random inputs, targets from a fixed
// teacher (a sine of a fixed projection), so the loss can fall.
void Batch(int rank, int step, std::vector<float>& x, std::vector<float>& y) {
  std::mt19937 rng(static_cast<uint32_t>(1000 * step + rank));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  x.resize(kBatch * kIn);
  y.resize(kBatch * kOut);
  for (float& v : x) v = uniform(rng);
  for (int n = 0; n < kBatch; ++n) {
    for (int k = 0; k < kOut; ++k) {
      float a = 0;
      for (int i = 0; i < kIn; ++i) a += x[n * kIn + i] * static_cast<float>((i * 7 + k * 3) % 5 - 2);
      y[n * kOut + k] = std::sin(0.3f * a);
    }
  }
}

struct RankResult {
  absl::Status status;
  double first_loss = 0, last_loss = 0;
  std::vector<std::vector<float>> weights;
};

}  // namespace

int main(int argc, char** argv) {
  int steps = 60, stage = 3;
  if ((argc > 1 && (!absl::SimpleAtoi(argv[1], &steps) || steps < 2)) ||
      (argc > 2 && !absl::SimpleAtoi(argv[2], &stage))) {
    std::cerr << "usage: train_stage3 [steps >= 2] [stage 0..3]\n";
    return 2;
  }
  absl::StatusOr<std::shared_ptr<loom::InprocGroup>> group = loom::InprocGroup::Create(kRanks);
  if (!group.ok()) {
    std::cerr << "train_stage3: " << group.status() << "\n";
    return 1;
  }
  std::vector<RankResult> results(kRanks);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kRanks; ++rank) {
    threads.emplace_back([&, rank] {
      RankResult& result = results[rank];
      result.status = [&]() -> absl::Status {
        absl::StatusOr<std::unique_ptr<loom::Transport>> endpoint = (*group)->Endpoint(rank);
        if (!endpoint.ok()) return endpoint.status();
        absl::StatusOr<std::unique_ptr<loom::Communicator>> dp =
            loom::Communicator::Create(std::move(*endpoint));
        if (!dp.ok()) return dp.status();
        TwoLayerModel model(/*seed=*/7);
        loom::DataParallelOptions options;
        options.stage = stage;
        std::vector<loom::BorrowingModel*> models = {&model};
        absl::StatusOr<std::unique_ptr<loom::DataParallelOptimizer>> optimizer =
            loom::MakeDataParallelOptimizer(models, dp->get(), options);
        if (!optimizer.ok()) return optimizer.status();
        std::vector<float> x, y;
        for (int step = 1; step <= steps; ++step) {
          Batch(rank, step, x, y);
          absl::StatusOr<double> loss = model.TrainStep(x, y);
          if (!loss.ok()) return loss.status();
          if (step == 1) result.first_loss = *loss;
          if (step == steps) result.last_loss = *loss;
          if (absl::Status s = (*optimizer)->ReduceGradients(); !s.ok()) return s;
          loom::AdamWHyper hyper;
          hyper.lr = 1e-2f;
          hyper.weight_decay = 0.0f;
          hyper.step = step;
          if (absl::Status s = (*optimizer)->Step(hyper); !s.ok()) return s;
        }
        absl::StatusOr<std::vector<std::vector<float>>> weights = (*optimizer)->GatherWeights();
        if (!weights.ok()) return weights.status();
        result.weights = std::move(*weights);
        return absl::OkStatus();
      }();
    });
  }
  for (std::thread& thread : threads) thread.join();

  bool ok = true;
  for (int rank = 0; rank < kRanks; ++rank) {
    const RankResult& r = results[rank];
    if (!r.status.ok()) {
      std::cout << "rank " << rank << ": " << r.status << "\n";
      ok = false;
      continue;
    }
    const bool fell = r.last_loss < 0.5 * r.first_loss;
    std::cout << "rank " << rank << ": loss " << r.first_loss << " at step 1, " << r.last_loss
              << " at step " << steps << (fell ? ": fell" : ": did not fall") << "\n";
    ok = ok && fell;
  }
  if (ok) {
    const bool agree = results[1].weights == results[0].weights &&
                       results[2].weights == results[0].weights &&
                       results[3].weights == results[0].weights;
    std::cout << (agree ? "every rank holds the same weights" : "the ranks' weights differ")
              << "\n";
    ok = agree;
  }
  std::cout << "stage " << stage << " on " << kRanks << " thread ranks: " << (ok ? "PASS" : "FAIL")
            << "\n";
  return ok ? 0 : 1;
}
