// DeviceTrainer over models/gpt/gpu's DeviceGptModel (--config=cuda builds).
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status_macros.h"
#include "models/gpt/gpu/device_gpt_model.h"
#include "tools/training/device_trainer.h"

namespace loom {
namespace {

class CudaTrainer : public DeviceTrainer {
 public:
  explicit CudaTrainer(std::unique_ptr<DeviceGptModel> model) : model_(std::move(model)) {}

  absl::Status Load(const std::vector<GptParameter>& params,
                    const std::vector<StateSlice>& state) override {
    const std::vector<DeviceParameter>& mine = model_->parameters();
    if (params.size() != mine.size()) {
      return absl::InvalidArgumentError(absl::StrCat("DeviceTrainer::Load: ", params.size(),
                                                     " parameters on the host, ", mine.size(),
                                                     " in the device model"));
    }
    for (size_t p = 0; p < params.size(); ++p) {
      // The host's list carries names and shapes only (its sources hold the values).
      int64_t numel = 1;
      for (int64_t d : params[p].shape) numel *= d;
      if (params[p].name != mine[p].name || numel != mine[p].numel) {
        return absl::InvalidArgumentError(absl::StrCat(
            "DeviceTrainer::Load: parameter ", p, " is ", params[p].name, " (", numel,
            " elements) on the host, ", mine[p].name, " (", mine[p].numel,
            ") in the device model"));
      }
    }
    std::vector<int64_t> covered(params.size(), 0);
    for (const StateSlice& s : state) {
      if (s.param < 0 || s.param >= static_cast<int>(params.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("DeviceTrainer::Load: a state slice of parameter ", s.param));
      }
      LOOM_RETURN_IF_ERROR(model_->SetParameter(s.param, s.begin, s.master, s.exp_avg,
                                                s.exp_avg_sq));
      covered[s.param] += s.end - s.begin;
    }
    for (size_t p = 0; p < params.size(); ++p) {
      if (covered[p] != mine[p].numel) {
        return absl::InvalidArgumentError(absl::StrCat(
            "DeviceTrainer::Load: the host state covers ", covered[p], " of ", params[p].name,
            "'s ", mine[p].numel, " elements (one rank holds every element)"));
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<double> ForwardBackward(const DeviceBatchFn& batch_of,
                                         int64_t microbatches) override {
    LOOM_RETURN_IF_ERROR(model_->ZeroGrad());
    const float weight = 1.0f / static_cast<float>(microbatches);
    for (int64_t mb = 0; mb < microbatches; ++mb) {
      LOOM_ASSIGN_OR_RETURN(const GptBatch batch, batch_of(mb));
      LOOM_RETURN_IF_ERROR(model_->ForwardBackward(batch, weight));
    }
    return model_->TakeLoss();
  }

  absl::StatusOr<double> GradSquaredNorm() override { return model_->GradSquaredNorm(); }

  absl::Status Step(const AdamWHyper& hyper) override {
    LOOM_RETURN_IF_ERROR(model_->Step(hyper));
    return model_->Synchronize();
  }

  absl::StatusOr<double> Evaluate(const DeviceBatchFn& batch_of, int64_t microbatches) override {
    double sum = 0;
    for (int64_t mb = 0; mb < microbatches; ++mb) {
      LOOM_ASSIGN_OR_RETURN(const GptBatch batch, batch_of(mb));
      LOOM_ASSIGN_OR_RETURN(const double loss, model_->ForwardLoss(batch));
      sum += loss;
    }
    return sum / static_cast<double>(microbatches);
  }

  absl::Status MirrorInto(DataParallelOptimizer& optimizer) override {
    const std::vector<DeviceParameter>& params = model_->parameters();
    std::vector<std::vector<float>> values(params.size()), m(params.size()), v(params.size());
    for (size_t p = 0; p < params.size(); ++p) {
      const size_t n = static_cast<size_t>(params[p].numel);
      values[p].resize(n);
      m[p].resize(n);
      v[p].resize(n);
      LOOM_RETURN_IF_ERROR(model_->GetParameter(static_cast<int>(p), absl::MakeSpan(values[p]),
                                                absl::MakeSpan(m[p]), absl::MakeSpan(v[p])));
    }
    return optimizer.WriteState([&](int param, int64_t begin, int64_t end,
                                     absl::Span<float> master, absl::Span<float> exp_avg,
                                     absl::Span<float> exp_avg_sq) -> absl::Status {
      if (param < 0 || param >= static_cast<int>(params.size()) || begin < 0 ||
          end > params[param].numel || end - begin != static_cast<int64_t>(master.size())) {
        return absl::InvalidArgumentError(absl::StrCat("DeviceTrainer::MirrorInto: elements [",
                                                       begin, ", ", end, ") of parameter ", param));
      }
      std::copy(values[param].begin() + begin, values[param].begin() + end, master.begin());
      std::copy(m[param].begin() + begin, m[param].begin() + end, exp_avg.begin());
      std::copy(v[param].begin() + begin, v[param].begin() + end, exp_avg_sq.begin());
      return absl::OkStatus();
    });
  }

  absl::StatusOr<std::vector<std::vector<float>>> Weights() override {
    std::vector<std::vector<float>> out;
    for (size_t p = 0; p < model_->parameters().size(); ++p) {
      out.emplace_back(static_cast<size_t>(model_->parameters()[p].numel));
      LOOM_RETURN_IF_ERROR(model_->GetParameter(static_cast<int>(p), absl::MakeSpan(out.back()),
                                                {}, {}));
    }
    return out;
  }

  int64_t state_bytes() const override { return model_->bytes().state; }
  int64_t activation_bytes() const override { return model_->bytes().activations; }

  std::string Describe() const override {
    cudaDeviceProp prop{};
    int driver = 0, runtime = 0;
    const int device = model_->options().device;
    std::string name = "CUDA device";
    if (cudaGetDeviceProperties(&prop, device) == cudaSuccess) name = prop.name;
    (void)cudaDriverGetVersion(&driver);
    (void)cudaRuntimeGetVersion(&runtime);
    return absl::StrFormat(
        "%s (device %d, %d SMs, %.1f GiB; CUDA driver API %d.%d, runtime %d.%d), the whole model "
        "resident, %s products on cuBLAS, %s attention",
        name, device, prop.multiProcessorCount,
        static_cast<double>(prop.totalGlobalMem) / (1 << 30), driver / 1000, driver % 1000 / 10,
        runtime / 1000, runtime % 1000 / 10, model_->options().bf16 ? "bf16" : "f32",
        model_->flash() ? "flash" : "materialized");
  }

 private:
  std::unique_ptr<DeviceGptModel> model_;
};

}  // namespace

bool DeviceTrainingAvailable() { return true; }

absl::StatusOr<std::unique_ptr<DeviceTrainer>> MakeDeviceTrainer(const GptConfig& config,
                                                                 int64_t micro_batch, bool bf16,
                                                                 const std::string& attention) {
  DeviceGptOptions options{.micro_batch = micro_batch, .bf16 = bf16};
  if (attention == "materialized") {
    options.attention = DeviceAttention::kMaterialized;
  } else if (attention == "flash") {
    options.attention = DeviceAttention::kFlash;
  } else if (attention != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("device attention ", attention, " is not auto, materialized or flash"));
  }
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<DeviceGptModel> model,
                        DeviceGptModel::Create(config, options));
  return std::unique_ptr<DeviceTrainer>(new CudaTrainer(std::move(model)));
}

}  // namespace loom
