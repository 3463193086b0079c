#include "tensor_parallel/placement.h"

#include <algorithm>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace loom {

absl::string_view ShardRuleName(ShardRule rule) {
  return rule == ShardRule::kChunk ? "chunk" : "balanced";
}

absl::Status ValidateShardArgs(int64_t size, int shards, int index) {
  if (size < 0 || shards < 1 || index < 0 || index >= shards) {
    return absl::InvalidArgumentError(absl::StrCat("shard ", index, " of ", shards,
                                                   " of a dimension of size ", size,
                                                   ": need size >= 0, shards >= 1, 0 <= index < shards"));
  }
  return absl::OkStatus();
}

ShardExtent ShardExtentOf(int64_t size, int shards, int index, ShardRule rule) {
  if (rule == ShardRule::kChunk) {
    const int64_t chunk = (size + shards - 1) / shards;  // ceil; 0 for an empty dim
    const int64_t begin = std::min(size, chunk * index);
    const int64_t end = std::min(size, begin + chunk);
    return {begin, end - begin};
  }
  const int64_t base = size / shards;
  const int64_t larger = size % shards;  // the first `larger` shards get one more
  const int64_t begin = index * base + std::min<int64_t>(index, larger);
  return {begin, base + (index < larger ? 1 : 0)};
}

std::string Placement::ToString() const {
  switch (kind_) {
    case Kind::kReplicate:
      return "R";
    case Kind::kShard:
      return absl::StrCat("S(", dim_, ")");
    case Kind::kPartial:
      return absl::StrCat("P(", ReduceOpName(op_), ")");
  }
  return "?";
}

std::string PlacementsString(absl::Span<const Placement> placements) {
  return absl::StrCat(
      "[",
      absl::StrJoin(placements, ", ",
                    [](std::string* out, const Placement& p) { out->append(p.ToString()); }),
      "]");
}

absl::StatusOr<std::vector<Placement>> ParsePlacements(absl::string_view text) {
  text = absl::StripAsciiWhitespace(text);
  if (absl::ConsumePrefix(&text, "[") && !absl::ConsumeSuffix(&text, "]")) {
    return absl::InvalidArgumentError(absl::StrCat("placements '[", text, "': no closing ]"));
  }
  std::vector<Placement> placements;
  if (absl::StripAsciiWhitespace(text).empty()) return placements;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    const absl::string_view original = absl::StripAsciiWhitespace(item);
    absl::string_view rest = original;
    if (rest == "R") {
      placements.push_back(Placement::Replicate());
      continue;
    }
    const bool shard = absl::ConsumePrefix(&rest, "S(");
    const bool partial = !shard && absl::ConsumePrefix(&rest, "P(");
    if ((shard || partial) && absl::ConsumeSuffix(&rest, ")")) {
      int dim = 0;
      if (shard && absl::SimpleAtoi(rest, &dim) && dim >= 0) {
        placements.push_back(Placement::Shard(dim));
        continue;
      }
      if (partial) {
        absl::StatusOr<ReduceOp> op = ParseReduceOp(rest);
        if (op.ok()) {
          placements.push_back(Placement::Partial(*op));
          continue;
        }
      }
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "placement '", original, "' is not R, S(<dim>) or P(sum|prod|min|max|avg)"));
  }
  return placements;
}

absl::Status ValidatePlacements(absl::Span<const Placement> placements, int tensor_rank,
                                int mesh_rank) {
  if (static_cast<int>(placements.size()) != mesh_rank) {
    return absl::InvalidArgumentError(absl::StrCat("placements ", PlacementsString(placements),
                                                   " have ", placements.size(),
                                                   " entries; the mesh has ", mesh_rank,
                                                   " dimensions"));
  }
  for (size_t i = 0; i < placements.size(); ++i) {
    const Placement& p = placements[i];
    if (p.is_shard() && (p.dim() < 0 || p.dim() >= tensor_rank)) {
      return absl::InvalidArgumentError(absl::StrCat("placement ", p.ToString(), " on mesh dim ", i,
                                                     " shards dim ", p.dim(), " of a tensor of rank ",
                                                     tensor_rank));
    }
  }
  return absl::OkStatus();
}

}  // namespace loom
