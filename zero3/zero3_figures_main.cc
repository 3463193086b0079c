// zero3_figures: trains one step of a GPT-shaped parameter list under ZeRO-3 on
// dp thread ranks and prints, per dp and precision, the model-state bytes per rank
// and the bytes each rank sent, measured (engine stats, communicator counters)
// next to the formulas 16 Psi / dp and (3 Psi - K) (dp - 1) / dp, K the padded
// elements of the forward's last window, which the backward takes over gathered.
//
//   ./bazelw run //zero3:zero3_figures
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "collectives/collective_kind.h"
#include "collectives/communicator.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "core/dtype.h"
#include "zero3/partition.h"
#include "zero3/zero3_engine.h"

namespace loom {
namespace {

// A 4-layer decoder with hidden 256, vocabulary 1024: biases and norms (256
// elements) stay whole under the 1024-element persistence threshold.
std::vector<ParamSpec> GptShapes() {
  const int64_t h = 256, v = 1024, layers = 4;
  std::vector<ParamSpec> specs = {{"wte", {v, h}}, {"wpe", {128, h}}};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = absl::StrCat("h", l, ".");
    specs.push_back({p + "ln1.g", {h}});
    specs.push_back({p + "qkv.w", {3 * h, h}});
    specs.push_back({p + "qkv.b", {3 * h}});
    specs.push_back({p + "proj.w", {h, h}});
    specs.push_back({p + "ln2.g", {h}});
    specs.push_back({p + "fc1.w", {4 * h, h}});
    specs.push_back({p + "fc2.w", {h, 4 * h}});
  }
  specs.push_back({"ln_f.g", {h}});
  return specs;
}

struct Row {
  Zero3Stats stats;
  CollectiveCounters gather, reduce, all_reduce;
};

absl::Status Measure(int dp, DType dtype, Row& row, Partition& partition_out) {
  PartitionOptions options;
  options.dp_size = dp;
  options.bucket_numel = 1 << 18;
  options.persistence_threshold = 1024;
  absl::StatusOr<Partition> partition = Partition::Create(GptShapes(), options);
  if (!partition.ok()) return partition.status();
  partition_out = *partition;
  std::vector<float> initial(static_cast<size_t>(partition->TotalNumel()), 0.01f);
  absl::StatusOr<std::shared_ptr<InprocGroup>> group = InprocGroup::Create(dp);
  if (!group.ok()) return group.status();
  std::vector<absl::Status> results(dp);
  std::vector<std::thread> threads;
  for (int r = 0; r < dp; ++r) {
    threads.emplace_back([&, r] {
      results[r] = [&]() -> absl::Status {
        absl::StatusOr<std::unique_ptr<Transport>> endpoint = (*group)->Endpoint(r);
        if (!endpoint.ok()) return endpoint.status();
        absl::StatusOr<std::unique_ptr<Communicator>> comm =
            Communicator::Create(std::shared_ptr<Transport>(std::move(*endpoint)));
        if (!comm.ok()) return comm.status();
        Zero3Options zero;
        zero.compute_dtype = dtype;
        absl::StatusOr<std::unique_ptr<Zero3Engine>> engine =
            Zero3Engine::Create(*partition, comm->get(), initial, zero);
        if (!engine.ok()) return engine.status();
        Zero3Engine& e = **engine;
        if (absl::Status s = e.BeginPass(Zero3Pass::kForward); !s.ok()) return s;
        for (int p = 0; p < partition->num_params(); ++p) {
          if (absl::Status s = e.Acquire(p).status(); !s.ok()) return s;
        }
        if (absl::Status s = e.EndPass(); !s.ok()) return s;
        if (absl::Status s = e.BeginPass(Zero3Pass::kBackward); !s.ok()) return s;
        for (int p = partition->num_params() - 1; p >= 0; --p) {
          absl::StatusOr<absl::Span<const float>> w = e.Acquire(p);
          if (!w.ok()) return w.status();
          if (absl::Status s = e.AddGrad(p, *w); !s.ok()) return s;
        }
        if (absl::Status s = e.EndPass(); !s.ok()) return s;
        if (absl::Status s = e.Step(AdamWHyper()); !s.ok()) return s;
        if (r == 0) {
          row.stats = e.Stats();
          row.gather = (*comm)->Counters(CollectiveKind::kAllGather);
          row.reduce = (*comm)->Counters(CollectiveKind::kReduceScatter);
          row.all_reduce = (*comm)->Counters(CollectiveKind::kAllReduce);
        }
        return absl::OkStatus();
      }();
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

int Main() {
  std::printf("| dtype | dp | Psi sharded | state B/rank | 16 Psi/dp | ratio | sent B/rank (AG + RS) "
              "| (3 Psi - K) (dp-1)/dp x dtype B | ratio | persistent B (all-reduce sent) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    for (const int dp : {2, 4, 8}) {
      Row row;
      Partition partition = *Partition::Create({}, PartitionOptions());
      if (absl::Status s = Measure(dp, dtype, row, partition); !s.ok()) {
        std::fprintf(stderr, "zero3_figures: %s\n", s.ToString().c_str());
        return 1;
      }
      const double psi = static_cast<double>(partition.ShardedNumel());
      const double state_formula = 16.0 * psi / dp;
      const double bytes = dtype == DType::kBF16 ? 2.0 : 4.0;
      const double sent = static_cast<double>(row.gather.bytes_sent + row.reduce.bytes_sent);
      // K: the backward takes the forward's last window over still gathered
      // (prefetch depth + 1 buckets, padded).
      const int buckets = partition.num_buckets();
      double kept = 0;
      for (int b = buckets - std::min(Zero3Options().prefetch_depth + 1, buckets); b < buckets;
           ++b) {
        kept += static_cast<double>(partition.bucket(b).padded_numel);
      }
      const double sent_formula = (3.0 * psi - kept) * (dp - 1) / dp * bytes;
      std::printf("| %s | %d | %.0f | %lld | %.0f | %.4f | %llu | %.0f | %.4f | %lld (%llu) |\n",
                  std::string(DTypeName(dtype)).c_str(), dp, psi,
                  static_cast<long long>(row.stats.model_state_bytes), state_formula,
                  static_cast<double>(row.stats.model_state_bytes) / state_formula,
                  static_cast<unsigned long long>(row.gather.bytes_sent + row.reduce.bytes_sent),
                  sent_formula, sent / sent_formula,
                  static_cast<long long>(row.stats.persistent_state_bytes),
                  static_cast<unsigned long long>(row.all_reduce.bytes_sent));
    }
  }
  return 0;
}

}  // namespace
}  // namespace loom

int main() { return loom::Main(); }
