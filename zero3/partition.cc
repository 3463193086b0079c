#include "zero3/partition.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/shape.h"

namespace loom {
namespace {

constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

absl::Status CheckOptions(const PartitionOptions& options) {
  if (options.dp_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("PartitionOptions.dp_size ", options.dp_size, " is below 1"));
  }
  if (options.bucket_numel < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("PartitionOptions.bucket_numel ", options.bucket_numel, " is below 1"));
  }
  if (options.persistence_threshold < 0) {
    return absl::InvalidArgumentError(absl::StrCat("PartitionOptions.persistence_threshold ",
                                                   options.persistence_threshold,
                                                   " is negative"));
  }
  if (options.align_numel < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("PartitionOptions.align_numel ", options.align_numel, " is below 1"));
  }
  return absl::OkStatus();
}

// Numel multiplies the extents, refusing negative ones and overflow.
absl::StatusOr<int64_t> Numel(const ParamSpec& spec, size_t index) {
  int64_t numel = 1;
  for (const int64_t extent : spec.shape) {
    if (extent < 0 || (extent > 0 && numel > kMaxInt64 / extent)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Partition: parameter ", index, " (\"", spec.name, "\") has shape ",
          ShapeString(spec.shape),
          extent < 0 ? ": extents must be >= 0" : ": its element count overflows int64"));
    }
    numel *= extent;
  }
  return numel;
}

// CeilDiv for positive divisors and non-negative numerators.
int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

}  // namespace

absl::StatusOr<Partition> Partition::Create(std::vector<ParamSpec> params,
                                            const PartitionOptions& options) {
  if (absl::Status status = CheckOptions(options); !status.ok()) return status;
  Partition partition;
  partition.options_ = options;
  partition.slots_.reserve(params.size());
  partition.flat_offsets_.reserve(params.size());
  int64_t flat = 0;
  std::vector<int> units;
  for (const ParamSpec& p : params) units.push_back(p.unit < 0 ? -1 : p.unit);
  for (size_t i = 0; i < params.size(); ++i) {
    absl::StatusOr<int64_t> numel = Numel(params[i], i);
    if (!numel.ok()) return numel.status();
    if (flat > kMaxInt64 - *numel) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Partition: the parameters up to ", i, " (\"", params[i].name,
          "\") have more than 2^63 elements in all"));
    }
    ParamSlot slot;
    slot.name = std::move(params[i].name);
    slot.shape = std::move(params[i].shape);
    slot.numel = *numel;
    partition.flat_offsets_.push_back(flat);
    flat += *numel;
    partition.slots_.push_back(std::move(slot));
  }
  // Persistence: a unit is kept whole or sharded as one, by its total size; a
  // parameter outside units by its own.
  for (size_t i = 0; i < partition.slots_.size();) {
    size_t end = i + 1;
    int64_t numel = partition.slots_[i].numel;
    if (units[i] >= 0) {
      while (end < units.size() && units[end] == units[i]) {
        numel += partition.slots_[end].numel;
        ++end;
      }
    }
    for (size_t j = i; j < end; ++j) {
      partition.slots_[j].persistent = numel <= options.persistence_threshold;
    }
    i = end;
  }

  // Pack sharded parameters into buckets in order; persistent ones into their block.
  for (size_t i = 0; i < partition.slots_.size(); ++i) {
    ParamSlot& slot = partition.slots_[i];
    if (slot.persistent) {
      slot.offset = partition.persistent_numel_;
      partition.persistent_numel_ += slot.numel;
      continue;
    }
    const int unit = units[i];
    const bool new_bucket =
        partition.buckets_.empty() || partition.buckets_.back().unit != unit ||
        (unit < 0 && partition.buckets_.back().numel > 0 &&
         partition.buckets_.back().numel > options.bucket_numel - slot.numel);
    if (new_bucket) {
      partition.buckets_.emplace_back();
      partition.buckets_.back().unit = unit;
    }
    Bucket& bucket = partition.buckets_.back();
    slot.bucket = partition.num_buckets() - 1;
    slot.offset = bucket.numel;
    bucket.params.push_back(static_cast<int>(i));
    bucket.numel += slot.numel;
    partition.sharded_numel_ += slot.numel;
  }

  // Pad each bucket to dp equal, aligned shards.
  const int64_t dp = options.dp_size;
  for (Bucket& bucket : partition.buckets_) {
    const int64_t per_rank = CeilDiv(bucket.numel, dp);
    bucket.shard_numel = std::max<int64_t>(CeilDiv(per_rank, options.align_numel), 1) *
                         options.align_numel;
    if (bucket.shard_numel > kMaxInt64 / dp) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Partition: a bucket of ", bucket.numel, " elements padded for dp_size ", dp,
          " overflows int64"));
    }
    bucket.padded_numel = bucket.shard_numel * dp;
    partition.shard_offsets_.push_back(partition.shard_numel_);
    partition.shard_numel_ += bucket.shard_numel;
    partition.max_bucket_numel_ = std::max(partition.max_bucket_numel_, bucket.padded_numel);
  }
  return partition;
}

Partition::Range Partition::OwnedRange(int param, int rank) const {
  const ParamSlot& slot = slots_[param];
  if (slot.persistent) return {0, slot.numel};
  const Bucket& b = buckets_[slot.bucket];
  const int64_t shard_begin = static_cast<int64_t>(rank) * b.shard_numel;
  const int64_t shard_end = shard_begin + b.shard_numel;
  const int64_t begin = std::clamp(shard_begin - slot.offset, int64_t{0}, slot.numel);
  const int64_t end = std::clamp(shard_end - slot.offset, int64_t{0}, slot.numel);
  return {begin, std::max(begin, end)};
}

std::string Partition::Describe() const {
  std::string out;
  for (int b = 0; b < num_buckets(); ++b) {
    const Bucket& bucket = buckets_[b];
    std::vector<std::string> names;
    for (const int p : bucket.params) {
      names.push_back(absl::StrCat(slots_[p].name, " ", ShapeString(slots_[p].shape)));
    }
    absl::StrAppend(&out, "bucket ", b, ": ", absl::StrJoin(names, ", "), " | ", bucket.numel,
                    " -> ", bucket.padded_numel, ", shard ", bucket.shard_numel, "\n");
  }
  if (persistent_numel_ > 0) {
    std::vector<std::string> names;
    for (const ParamSlot& slot : slots_) {
      if (slot.persistent) names.push_back(absl::StrCat(slot.name, " ", ShapeString(slot.shape)));
    }
    absl::StrAppend(&out, "persistent: ", absl::StrJoin(names, ", "), " | ", persistent_numel_,
                    "\n");
  }
  return out;
}

}  // namespace loom
