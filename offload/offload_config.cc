#include "offload/offload_config.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/byte_size.h"
#include "core/status_macros.h"
#include "offload/internal/pinned_memory.h"

namespace loom {
namespace {

// A name <-> value table per enum, so parsing, printing and error messages agree.
template <typename E>
struct Named {
  const char* name;
  E value;
};

constexpr Named<OffloadDevice> kDevices[] = {
    {"none", OffloadDevice::kNone}, {"cpu", OffloadDevice::kCpu}, {"nvme", OffloadDevice::kNvme}};
constexpr Named<OffloadCompression> kCompressions[] = {
    {"none", OffloadCompression::kNone}, {"fp16", OffloadCompression::kFp16},
    {"bf16", OffloadCompression::kBf16}, {"int8", OffloadCompression::kInt8},
    {"lz4", OffloadCompression::kLz4},   {"zstd", OffloadCompression::kZstd}};
constexpr Named<OptimizerStateFormat> kStateFormats[] = {
    {"f32", OptimizerStateFormat::kF32},
    {"bf16", OptimizerStateFormat::kBf16},
    {"blockwise8", OptimizerStateFormat::kBlockwise8}};
constexpr Named<HostMemoryKind> kMemoryKinds[] = {{"auto", HostMemoryKind::kAuto},
                                                  {"pageable", HostMemoryKind::kPageable},
                                                  {"pinned", HostMemoryKind::kPinned}};

template <typename E, size_t N>
const char* NameOf(const Named<E> (&table)[N], E value) {
  for (const Named<E>& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return "unknown";
}

template <typename E, size_t N>
absl::StatusOr<E> ValueOf(const Named<E> (&table)[N], absl::string_view key,
                          absl::string_view text) {
  std::vector<std::string> names;
  for (const Named<E>& entry : table) {
    if (text == entry.name) return entry.value;
    names.push_back(entry.name);
  }
  return absl::InvalidArgumentError(absl::StrCat("offload: ", key, "=", text, " is not one of ",
                                                 absl::StrJoin(names, "|")));
}

std::string Size(size_t bytes) {
  constexpr const char* kUnits[] = {"", "K", "M", "G", "T"};
  int unit = 0;
  while (unit < 4 && bytes != 0 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return absl::StrCat(bytes, kUnits[unit]);
}

bool Offloads(const OffloadConfig& config, OffloadDevice device) {
  return config.parameters == device || config.gradients == device ||
         config.optimizer_state == device;
}

// What is offloaded to `device`, for messages: "parameters, optimizer state".
std::string WhatGoesTo(const OffloadConfig& config, OffloadDevice device) {
  std::vector<std::string> what;
  if (config.parameters == device) what.push_back("parameters");
  if (config.gradients == device) what.push_back("gradients");
  if (config.optimizer_state == device) what.push_back("optimizer state");
  return absl::StrJoin(what, ", ");
}

// Everything offloaded, with where it goes: "parameters (nvme), optimizer state (cpu)".
std::string OffloadedList(const OffloadConfig& config) {
  std::vector<std::string> what;
  const std::pair<const char*, OffloadDevice> kinds[] = {{"parameters", config.parameters},
                                                         {"gradients", config.gradients},
                                                         {"optimizer state", config.optimizer_state}};
  for (const auto& [name, device] : kinds) {
    if (device != OffloadDevice::kNone) what.push_back(absl::StrCat(name, " (", NameOf(kDevices, device), ")"));
  }
  return absl::StrJoin(what, ", ");
}

void CheckNvme(const OffloadConfig& config, std::vector<std::string>& problems) {
  if (!Offloads(config, OffloadDevice::kNvme)) {
    if (!config.nvme_directories.empty() || config.nvme_budget_bytes != 0) {
      problems.push_back(absl::StrCat("nvme_dirs/nvme_budget are set but nothing is offloaded to ",
                                      "nvme (params, grads and optimizer are cpu or none)"));
    }
    return;
  }
  const std::string what = WhatGoesTo(config, OffloadDevice::kNvme);
  if (config.nvme_directories.empty()) {
    problems.push_back(absl::StrCat("nvme_dirs is empty, but ", what, " go to nvme"));
  }
  if (config.nvme_budget_bytes == 0) {
    problems.push_back(absl::StrCat("nvme_budget is 0, but ", what, " go to nvme"));
  }
  size_t free_bytes = 0;
  std::set<std::string> seen;
  for (const std::string& directory : config.nvme_directories) {
    if (!seen.insert(directory).second) {
      problems.push_back(absl::StrCat("nvme_dirs lists ", directory, " twice"));
      continue;
    }
    struct statvfs fs;
    if (statvfs(directory.c_str(), &fs) != 0) {
      problems.push_back(absl::StrCat("nvme_dirs: ", directory, ": ", strerror(errno)));
      continue;
    }
    if (access(directory.c_str(), W_OK | X_OK) != 0) {
      problems.push_back(absl::StrCat("nvme_dirs: ", directory, " is not writable: ",
                                      strerror(errno)));
      continue;
    }
    free_bytes += static_cast<size_t>(fs.f_bavail) * static_cast<size_t>(fs.f_frsize);
  }
  if (config.nvme_budget_bytes > 0 && seen.size() == config.nvme_directories.size() &&
      free_bytes > 0 && config.nvme_budget_bytes > free_bytes) {
    problems.push_back(absl::StrCat("nvme_budget ", Size(config.nvme_budget_bytes), " (",
                                    config.nvme_budget_bytes, " bytes) is more than the ",
                                    free_bytes, " bytes free in nvme_dirs ",
                                    absl::StrJoin(config.nvme_directories, ":")));
  }
}

}  // namespace

const char* OffloadDeviceName(OffloadDevice device) { return NameOf(kDevices, device); }
const char* OffloadCompressionName(OffloadCompression compression) {
  return NameOf(kCompressions, compression);
}
const char* OptimizerStateFormatName(OptimizerStateFormat format) {
  return NameOf(kStateFormats, format);
}

absl::Status ValidateOffloadConfig(const OffloadConfig& config) {
  std::vector<std::string> problems;
  const bool offloads = Offloads(config, OffloadDevice::kCpu) || Offloads(config, OffloadDevice::kNvme);
  if (offloads && config.host_budget_bytes == 0) {
    problems.push_back(absl::StrCat("host_budget is 0, but ", OffloadedList(config),
                                    " are offloaded; the host holds them or stages their ",
                                    "transfers"));
  }
  const size_t physical = PhysicalMemoryBytes();
  if (physical != 0 && config.host_budget_bytes > physical) {
    problems.push_back(absl::StrCat("host_budget ", Size(config.host_budget_bytes), " (",
                                    config.host_budget_bytes,
                                    " bytes) is more than this machine's physical memory, ",
                                    physical, " bytes"));
  }
  CheckNvme(config, problems);
  if (config.prefetch_depth < 1 || config.prefetch_depth > 64) {
    problems.push_back(absl::StrCat("prefetch depth ", config.prefetch_depth,
                                    " must be at least 1 and at most 64 (tensors fetched ahead ",
                                    "of use)"));
  }
  const int block = config.state_block_size;
  if (config.state_format == OptimizerStateFormat::kBlockwise8 &&
      (block < 256 || block > 2048 || (block & (block - 1)) != 0)) {
    problems.push_back(absl::StrCat("state_block ", block,
                                    " must be a power of two in [256, 2048] for state=blockwise8"));
  }
  if (config.state_format != OptimizerStateFormat::kF32 &&
      config.optimizer_state == OffloadDevice::kNone) {
    problems.push_back(absl::StrCat("state=", OptimizerStateFormatName(config.state_format),
                                    " applies to the CPU optimizer, but optimizer=none"));
  }
  if (config.compression != OffloadCompression::kNone &&
      config.parameters == OffloadDevice::kNone && config.gradients == OffloadDevice::kNone) {
    problems.push_back(absl::StrCat("compression=", OffloadCompressionName(config.compression),
                                    " applies to offloaded parameters and gradients, and ",
                                    "neither is offloaded"));
  }
  if (config.cpu_threads < 0 || config.cpu_threads > 256) {
    problems.push_back(absl::StrCat("threads ", config.cpu_threads,
                                    " must be in [0, 256] (0: one per core)"));
  }
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("offload: ", absl::StrJoin(problems, "\noffload: ")));
  }
  if (offloads && config.host_memory == HostMemoryKind::kPinned) {
    const absl::Status pinning = offload_internal::PinningAvailable();
    if (!pinning.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("offload: pinned=pinned asked for, but ", pinning.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<OffloadConfig> ParseOffloadConfig(absl::string_view spec) {
  OffloadConfig config;
  std::set<std::string> seen;
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipWhitespace())) {
    item = absl::StripAsciiWhitespace(item);
    const std::pair<absl::string_view, absl::string_view> kv = absl::StrSplit(item, '=');
    const absl::string_view key = absl::StripAsciiWhitespace(kv.first);
    const absl::string_view value = absl::StripAsciiWhitespace(kv.second);
    if (item.find('=') == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("offload: '", item, "' is not key=value in spec '", spec, "'"));
    }
    if (!seen.insert(std::string(key)).second) {
      return absl::InvalidArgumentError(absl::StrCat("offload: key ", key, " given twice"));
    }
    auto integer = [&](int& out) -> absl::Status {
      if (!absl::SimpleAtoi(value, &out)) {
        return absl::InvalidArgumentError(
            absl::StrCat("offload: ", key, "=", value, " is not an integer"));
      }
      return absl::OkStatus();
    };
    auto bytes = [&](size_t& out) -> absl::Status {
      absl::StatusOr<size_t> parsed = ParseByteSize(value);
      if (!parsed.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("offload: ", key, ": ", parsed.status().message()));
      }
      out = *parsed;
      return absl::OkStatus();
    };
    if (key == "params") {
      LOOM_ASSIGN_OR_RETURN(config.parameters, ValueOf(kDevices, key, value));
    } else if (key == "grads") {
      LOOM_ASSIGN_OR_RETURN(config.gradients, ValueOf(kDevices, key, value));
    } else if (key == "optimizer") {
      LOOM_ASSIGN_OR_RETURN(config.optimizer_state, ValueOf(kDevices, key, value));
    } else if (key == "host_budget") {
      LOOM_RETURN_IF_ERROR(bytes(config.host_budget_bytes));
    } else if (key == "nvme_budget") {
      LOOM_RETURN_IF_ERROR(bytes(config.nvme_budget_bytes));
    } else if (key == "nvme_dirs") {
      config.nvme_directories = absl::StrSplit(value, ':', absl::SkipEmpty());
    } else if (key == "prefetch") {
      LOOM_RETURN_IF_ERROR(integer(config.prefetch_depth));
    } else if (key == "pinned") {
      LOOM_ASSIGN_OR_RETURN(config.host_memory, ValueOf(kMemoryKinds, key, value));
    } else if (key == "compression") {
      LOOM_ASSIGN_OR_RETURN(config.compression, ValueOf(kCompressions, key, value));
    } else if (key == "state") {
      LOOM_ASSIGN_OR_RETURN(config.state_format, ValueOf(kStateFormats, key, value));
    } else if (key == "state_block") {
      LOOM_RETURN_IF_ERROR(integer(config.state_block_size));
    } else if (key == "threads") {
      LOOM_RETURN_IF_ERROR(integer(config.cpu_threads));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "offload: unknown key '", key, "'; keys are params, grads, optimizer, host_budget, ",
          "nvme_budget, nvme_dirs, prefetch, pinned, compression, state, state_block, threads"));
    }
  }
  return config;
}

std::string FormatOffloadConfig(const OffloadConfig& config) {
  return absl::StrCat(
      "params=", OffloadDeviceName(config.parameters), ",grads=", OffloadDeviceName(config.gradients),
      ",optimizer=", OffloadDeviceName(config.optimizer_state),
      ",host_budget=", Size(config.host_budget_bytes), ",nvme_budget=", Size(config.nvme_budget_bytes),
      ",nvme_dirs=", absl::StrJoin(config.nvme_directories, ":"),
      ",prefetch=", config.prefetch_depth, ",pinned=", NameOf(kMemoryKinds, config.host_memory),
      ",compression=", OffloadCompressionName(config.compression),
      ",state=", OptimizerStateFormatName(config.state_format),
      ",state_block=", config.state_block_size, ",threads=", config.cpu_threads);
}

}  // namespace loom
