#include "collectives/transport/shm/shm_transport.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectives/transport/heartbeat.h"
#include "collectives/transport/peer_failure.h"
#include "collectives/transport/shm/internal/endpoint.h"
#include "collectives/transport/shm/internal/layout.h"
#include "collectives/transport/shm/internal/rendezvous.h"
#include "collectives/transport/shm/internal/segment.h"
#include "core/status_macros.h"

namespace loom {
namespace {

constexpr size_t kMaxJobIdLength = 96;
constexpr size_t kMaxEagerBytes = 256 * 1024;
constexpr size_t kMinStagingBytes = 64 * 1024;
constexpr size_t kMaxStagingBytes = 256 * 1024 * 1024;
static_assert(kMaxShmRanks == shm_internal::kMaxWorldSize &&
                  kMinShmStagingBytes == kMinStagingBytes &&
                  kMaxShmStagingBytes == kMaxStagingBytes,
              "shm_transport.h states the limits ValidateOptions enforces");
constexpr char kLaunchContract[] =
    "//tools:launch sets LOOM_JOB_ID, LOOM_RANK and LOOM_WORLD_SIZE for every rank";

bool IsValidJobId(absl::string_view job_id) {
  if (job_id.empty() || job_id.size() > kMaxJobIdLength) return false;
  for (char c : job_id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      return false;
    }
  }
  return true;
}

absl::Status CheckJobId(absl::string_view job_id, absl::string_view what) {
  if (IsValidJobId(job_id)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, "='", job_id, "' must match [A-Za-z0-9_.-]{1,96} (it names /dev/shm/loom.<job_id>.*)"));
}

absl::Status ValidateOptions(const ShmOptions& options) {
  LOOM_RETURN_IF_ERROR(CheckJobId(options.job_id, "job_id"));
  if (options.size < 1 || options.size > shm_internal::kMaxWorldSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("size=", options.size, " is not in [1, ", shm_internal::kMaxWorldSize, "]"));
  }
  if (options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank=", options.rank, " is outside [0, size=", options.size, ")"));
  }
  if (options.world_rank < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world_rank=", options.world_rank, " is below -1 (-1: the group rank)"));
  }
  LOOM_RETURN_IF_ERROR(ValidateHeartbeatTimeout(options.heartbeat_timeout, "heartbeat_timeout"));
  if (options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "connect_timeout=", absl::FormatDuration(options.connect_timeout), " is not positive"));
  }
  if (options.host_ranks < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("host_ranks=", options.host_ranks, " is negative"));
  }
  if (options.spin_iterations < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spin_iterations=", options.spin_iterations, " is negative"));
  }
  if (options.eager_bytes > kMaxEagerBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("eager_bytes=", options.eager_bytes, " is not in [0, ", kMaxEagerBytes, "]"));
  }
  if (options.staging_bytes < kMinStagingBytes || options.staging_bytes > kMaxStagingBytes) {
    return absl::InvalidArgumentError(absl::StrCat("staging_bytes=", options.staging_bytes,
                                                   " is not in [", kMinStagingBytes, ", ",
                                                   kMaxStagingBytes, "]"));
  }
  switch (options.copy_mode) {
    case ShmOptions::CopyMode::kAuto:
    case ShmOptions::CopyMode::kCma:
    case ShmOptions::CopyMode::kStaged:
    case ShmOptions::CopyMode::kStagedOrMapped:
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("copy_mode=", static_cast<int>(options.copy_mode), " is not a CopyMode"));
}

absl::StatusOr<int> IntFromEnvironment(const char* variable) {
  const char* value = std::getenv(variable);
  if (value == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(variable, " is not set; ", kLaunchContract));
  }
  int parsed = 0;
  if (!absl::SimpleAtoi(value, &parsed)) {
    return absl::InvalidArgumentError(absl::StrCat(variable, "='", value, "' is not an integer"));
  }
  return parsed;
}

shm_internal::CmaPolicy CmaPolicyOf(ShmOptions::CopyMode mode) {
  switch (mode) {
    case ShmOptions::CopyMode::kCma:
      return shm_internal::CmaPolicy::kRequired;
    case ShmOptions::CopyMode::kStaged:
      return shm_internal::CmaPolicy::kNever;
    case ShmOptions::CopyMode::kAuto:
    case ShmOptions::CopyMode::kStagedOrMapped:
      break;
  }
  return shm_internal::CmaPolicy::kIfAvailable;
}

}  // namespace

absl::StatusOr<ShmOptions> ShmOptionsFromEnvironment() {
  ShmOptions options;
  const char* job_id = std::getenv("LOOM_JOB_ID");
  if (job_id == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("LOOM_JOB_ID is not set; ", kLaunchContract));
  }
  LOOM_RETURN_IF_ERROR(CheckJobId(job_id, "LOOM_JOB_ID"));
  options.job_id = job_id;
  LOOM_ASSIGN_OR_RETURN(options.size, IntFromEnvironment("LOOM_WORLD_SIZE"));
  LOOM_ASSIGN_OR_RETURN(options.rank, IntFromEnvironment("LOOM_RANK"));
  if (options.size < 1 || options.size > shm_internal::kMaxWorldSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LOOM_WORLD_SIZE=", options.size, " is not in [1, ", shm_internal::kMaxWorldSize, "]"));
  }
  if (options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LOOM_RANK=", options.rank, " is outside [0, LOOM_WORLD_SIZE=", options.size, ")"));
  }
  options.world_rank = options.rank;
  return options;
}

absl::StatusOr<std::unique_ptr<Transport>> ConnectShmTransport(const ShmOptions& options) {
  LOOM_RETURN_IF_ERROR(ValidateOptions(options));
  shm_internal::GroupConfig config;
  config.job_id = options.job_id;
  config.rank = options.rank;
  config.world_size = options.size;
  config.cma = CmaPolicyOf(options.copy_mode);
  config.copy_mode = static_cast<uint32_t>(options.copy_mode);
  config.stage_ordinary = options.copy_mode == ShmOptions::CopyMode::kStagedOrMapped;
  config.eager_bytes = options.eager_bytes;
  config.staging_bytes = options.staging_bytes;
  config.deadline = absl::Now() + options.connect_timeout;
  config.world_rank = options.world_rank >= 0 ? options.world_rank : options.rank;
  config.host = HostName();
  config.heartbeat_timeout = options.heartbeat_timeout;
  config.heartbeat_interval = HeartbeatInterval(options.heartbeat_timeout);
  LOOM_ASSIGN_OR_RETURN(shm_internal::ConnectedGroup group, shm_internal::Rendezvous(config));
  return std::unique_ptr<Transport>(
      std::make_unique<shm_internal::ShmEndpoint>(std::move(group), options.spin_iterations,
                                                  std::max(options.size, options.host_ranks)));
}

std::string ShmSegmentPrefix(absl::string_view job_id) {
  return shm_internal::SegmentPrefix(job_id);
}

absl::Status RemoveShmSegments(absl::string_view job_id) {
  LOOM_RETURN_IF_ERROR(CheckJobId(job_id, "job_id"));
  return shm_internal::RemoveSegments(job_id);
}

}  // namespace loom
