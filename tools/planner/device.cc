#include "tools/planner/device.h"

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace loom {
namespace planner {
namespace {

// Published figures: NVIDIA's data sheets (dense bf16 tensor-core peak, HBM bandwidth,
// NVLink per GPU per direction), and the network of the clusters the published runs
// used (8 x 200 Gb/s HDR InfiniBand per 8-GPU A100 node: 25 GB/s per GPU; 400 Gb/s NDR
// per H100 or H200). The GEMM and element-wise constants of the A100 were fitted on
// rows of the Megatron-LM paper's Table 1 (tools/docs/plan.md), whose software stored
// the attention scores; the H100 and H200 reuse them with FlashAttention, as the
// runs published on them (Llama 3) used.
DeviceSpec Make(const char* name, double bf16, double f32, double memory, double hbm,
                double nvlink, double network) {
  DeviceSpec d;
  d.name = name;
  d.peak_bf16_flops = bf16;
  d.peak_f32_flops = f32;
  d.memory_bytes = memory;
  d.memory_bandwidth = hbm;
  d.intra_node_bandwidth = nvlink;
  d.intra_node_latency = 3e-6;
  d.inter_node_bandwidth = network;
  d.inter_node_latency = 5e-6;
  d.gemm_max_efficiency = 0.62;
  d.gemm_half_width = 100;
  d.elementwise_passes = 3;
  return d;
}

// The software of the runs published on H100s and H200s: FlashAttention and
// sequence parallelism.
DeviceSpec WithCurrentSoftware(DeviceSpec d) {
  d.flash_attention = true;
  d.sequence_parallel = true;
  return d;
}

}  // namespace

const std::vector<DeviceSpec>& KnownDevices() {
  static const std::vector<DeviceSpec>* const devices = new std::vector<DeviceSpec>{
      Make("a100-80gb", 312e12, 19.5e12, 80e9, 2.039e12, 300e9, 25e9),
      WithCurrentSoftware(Make("h100-80gb", 989e12, 67e12, 80e9, 3.35e12, 450e9, 50e9)),
      WithCurrentSoftware(Make("h200", 989e12, 67e12, 141e9, 4.8e12, 450e9, 50e9)),
  };
  return *devices;
}

absl::StatusOr<DeviceSpec> FindDevice(absl::string_view name) {
  std::vector<std::string> names;
  for (const DeviceSpec& d : KnownDevices()) {
    if (d.name == name) return d;
    names.push_back(d.name);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown device \"", name, "\"; known: ",
                                                 absl::StrJoin(names, ", "), ", this-cpu"));
}

}  // namespace planner
}  // namespace loom
