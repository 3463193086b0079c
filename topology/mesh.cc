#include "topology/mesh.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/status_macros.h"

namespace loom {
namespace {

// World sizes beyond 2^31 ranks are not a real deployment; the bound keeps every
// product of sizes and coordinates comfortably inside int64_t.
constexpr int64_t kMaxWorldSize = int64_t{1} << 31;

bool IsValidName(absl::string_view name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string DimNames(const std::vector<MeshDim>& dims) {
  return absl::StrJoin(dims, ",", [](std::string* out, const MeshDim& d) {
    absl::StrAppend(out, d.name);
  });
}

}  // namespace

bool operator==(const MeshDim& a, const MeshDim& b) {
  return a.name == b.name && a.size == b.size;
}

Mesh::Mesh(std::vector<MeshDim> dims) : dims_(std::move(dims)), strides_(dims_.size(), 1) {
  for (int i = static_cast<int>(dims_.size()) - 2; i >= 0; --i) {
    strides_[i] = strides_[i + 1] * dims_[i + 1].size;
  }
  for (const MeshDim& dim : dims_) world_size_ *= dim.size;
}

absl::StatusOr<Mesh> Mesh::Create(std::vector<MeshDim> dims) {
  if (dims.empty() || dims.size() > kMaxDims) {
    return absl::InvalidArgumentError(absl::StrCat("a mesh has 1 to ", kMaxDims,
                                                   " dimensions, got ", dims.size()));
  }
  absl::flat_hash_set<std::string> seen;
  int64_t world_size = 1;
  for (const MeshDim& dim : dims) {
    if (!IsValidName(dim.name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "dimension name \"", dim.name, "\" must be non-empty and use only [a-z0-9_]"));
    }
    if (!seen.insert(dim.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("dimension \"", dim.name, "\" appears twice in ", DimNames(dims)));
    }
    if (dim.size < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("dimension \"", dim.name, "\" has size ", dim.size, "; sizes must be >= 1"));
    }
    if (dim.size > kMaxWorldSize || world_size * dim.size > kMaxWorldSize) {
      return absl::InvalidArgumentError(absl::StrCat("mesh ", DimNames(dims),
                                                     " has more than 2^31 ranks"));
    }
    world_size *= dim.size;
  }
  return Mesh(std::move(dims));
}

absl::StatusOr<Mesh> Mesh::FromOrder(absl::string_view order, absl::Span<const MeshDim> sizes) {
  const std::vector<std::string> names = absl::StrSplit(order, '-');
  std::vector<MeshDim> dims;
  for (auto it = names.rbegin(); it != names.rend(); ++it) {  // Slowest first.
    const auto match = std::find_if(sizes.begin(), sizes.end(),
                                    [&](const MeshDim& d) { return d.name == *it; });
    if (match == sizes.end()) {
      return absl::InvalidArgumentError(absl::StrCat("order \"", order, "\" names \"", *it,
                                                     "\", which has no size; sizes are given for ",
                                                     DimNames({sizes.begin(), sizes.end()})));
    }
    dims.push_back(*match);
  }
  if (names.size() != sizes.size()) {
    for (const MeshDim& dim : sizes) {
      if (std::find(names.begin(), names.end(), dim.name) == names.end()) {
        return absl::InvalidArgumentError(absl::StrCat("order \"", order,
                                                       "\" does not place dimension \"", dim.name,
                                                       "\" (size ", dim.size, ")"));
      }
    }
  }
  return Create(std::move(dims));
}

absl::StatusOr<std::vector<MeshDim>> Mesh::ParseShape(absl::string_view shape) {
  std::vector<MeshDim> dims;
  for (absl::string_view token : absl::StrSplit(shape, ',')) {
    token = absl::StripAsciiWhitespace(token);
    const std::vector<absl::string_view> parts = absl::StrSplit(token, '=');
    int64_t size = 0;
    if (parts.size() != 2 || parts[0].empty() || !absl::SimpleAtoi(parts[1], &size)) {
      return absl::InvalidArgumentError(absl::StrCat("shape token \"", token, "\" in \"", shape,
                                                     "\" is not name=size (e.g. dp=2)"));
    }
    dims.push_back(MeshDim{std::string(parts[0]), size});
  }
  return dims;
}

absl::StatusOr<int> Mesh::DimIndex(absl::string_view name) const {
  for (int i = 0; i < num_dims(); ++i) {
    if (dims_[i].name == name) return i;
  }
  return absl::NotFoundError(
      absl::StrCat("mesh ", ToString(), " has no dimension \"", name, "\""));
}

absl::StatusOr<int64_t> Mesh::DimSize(absl::string_view name) const {
  LOOM_ASSIGN_OR_RETURN(const int index, DimIndex(name));
  return dims_[index].size;
}

absl::Status Mesh::CheckRank(int64_t rank) const {
  if (rank < 0 || rank >= world_size_) {
    return absl::OutOfRangeError(absl::StrCat("rank ", rank, " is outside mesh ", ToString(),
                                              " of ", world_size_, " ranks"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> Mesh::Coordinates(int64_t rank) const {
  LOOM_RETURN_IF_ERROR(CheckRank(rank));
  std::vector<int64_t> coords(dims_.size());
  for (size_t i = 0; i < dims_.size(); ++i) coords[i] = rank / strides_[i] % dims_[i].size;
  return coords;
}

absl::StatusOr<int64_t> Mesh::Coordinate(int64_t rank, absl::string_view dim) const {
  LOOM_RETURN_IF_ERROR(CheckRank(rank));
  LOOM_ASSIGN_OR_RETURN(const int index, DimIndex(dim));
  return rank / strides_[index] % dims_[index].size;
}

absl::StatusOr<int64_t> Mesh::RankAt(absl::Span<const int64_t> coords) const {
  if (coords.size() != dims_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("mesh ", ToString(), " needs ", dims_.size(),
                                                   " coordinates, got ", coords.size()));
  }
  int64_t rank = 0;
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (coords[i] < 0 || coords[i] >= dims_[i].size) {
      return absl::OutOfRangeError(absl::StrCat("coordinate ", coords[i], " along \"",
                                                dims_[i].name, "\" is outside [0, ",
                                                dims_[i].size, ")"));
    }
    rank += coords[i] * strides_[i];
  }
  return rank;
}

absl::StatusOr<std::vector<bool>> Mesh::ParseDimSet(absl::string_view dims) const {
  std::vector<bool> mask(dims_.size(), false);
  for (absl::string_view name : absl::StrSplit(dims, '-')) {
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("group \"", dims, "\" has an empty dimension name"));
    }
    LOOM_ASSIGN_OR_RETURN(const int index, DimIndex(name));
    if (mask[index]) {
      return absl::InvalidArgumentError(
          absl::StrCat("group \"", dims, "\" names \"", name, "\" twice"));
    }
    mask[index] = true;
  }
  return mask;
}

absl::StatusOr<std::vector<int64_t>> Mesh::Group(int64_t rank, absl::string_view dims) const {
  LOOM_RETURN_IF_ERROR(CheckRank(rank));
  LOOM_ASSIGN_OR_RETURN(const std::vector<bool> mask, ParseDimSet(dims));
  // Start from the member whose coordinates along the group's dimensions are all 0,
  // then enumerate those coordinates row-major: ascending rank order.
  int64_t base = rank;
  int64_t group_size = 1;
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (!mask[i]) continue;
    base -= (rank / strides_[i] % dims_[i].size) * strides_[i];
    group_size *= dims_[i].size;
  }
  std::vector<int64_t> group;
  group.reserve(group_size);
  std::vector<int64_t> coords(dims_.size(), 0);
  for (int64_t member = 0; member < group_size; ++member) {
    int64_t offset = 0;
    for (size_t i = 0; i < dims_.size(); ++i) offset += coords[i] * strides_[i];
    group.push_back(base + offset);
    for (int i = num_dims() - 1; i >= 0; --i) {  // Odometer over the masked dims.
      if (!mask[i]) continue;
      if (++coords[i] < dims_[i].size) break;
      coords[i] = 0;
    }
  }
  return group;
}

absl::StatusOr<std::vector<std::vector<int64_t>>> Mesh::AllGroups(absl::string_view dims) const {
  LOOM_ASSIGN_OR_RETURN(const std::vector<bool> mask, ParseDimSet(dims));
  std::vector<std::vector<int64_t>> groups;
  for (int64_t rank = 0; rank < world_size_; ++rank) {
    bool is_first = true;  // A group's first rank has coordinate 0 along its dims.
    for (size_t i = 0; i < dims_.size(); ++i) {
      if (mask[i] && rank / strides_[i] % dims_[i].size != 0) is_first = false;
    }
    if (!is_first) continue;
    LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> group, Group(rank, dims));
    groups.push_back(std::move(group));
  }
  return groups;
}

absl::StatusOr<std::optional<int64_t>> Mesh::Step(int64_t rank, absl::string_view dim,
                                                  int64_t delta, bool wrap) const {
  LOOM_RETURN_IF_ERROR(CheckRank(rank));
  LOOM_ASSIGN_OR_RETURN(const int index, DimIndex(dim));
  const int64_t size = dims_[index].size;
  const int64_t coord = rank / strides_[index] % size;
  int64_t next = coord + delta;
  if (next < 0 || next >= size) {
    if (!wrap) return std::optional<int64_t>();
    next = ((next % size) + size) % size;
  }
  return std::optional<int64_t>(rank + (next - coord) * strides_[index]);
}

absl::StatusOr<std::optional<int64_t>> Mesh::NextRank(int64_t rank, absl::string_view dim) const {
  return Step(rank, dim, +1, /*wrap=*/false);
}

absl::StatusOr<std::optional<int64_t>> Mesh::PrevRank(int64_t rank, absl::string_view dim) const {
  return Step(rank, dim, -1, /*wrap=*/false);
}

absl::StatusOr<int64_t> Mesh::RingNext(int64_t rank, absl::string_view dim) const {
  LOOM_ASSIGN_OR_RETURN(const std::optional<int64_t> next, Step(rank, dim, +1, /*wrap=*/true));
  return *next;
}

absl::StatusOr<int64_t> Mesh::RingPrev(int64_t rank, absl::string_view dim) const {
  LOOM_ASSIGN_OR_RETURN(const std::optional<int64_t> prev, Step(rank, dim, -1, /*wrap=*/true));
  return *prev;
}

absl::StatusOr<int64_t> Mesh::GroupFirst(int64_t rank, absl::string_view dims) const {
  LOOM_ASSIGN_OR_RETURN(const std::vector<int64_t> group, Group(rank, dims));
  return group.front();
}

absl::StatusOr<int64_t> Mesh::GroupLast(int64_t rank, absl::string_view dims) const {
  LOOM_ASSIGN_OR_RETURN(const std::vector<int64_t> group, Group(rank, dims));
  return group.back();
}

std::string Mesh::ToString() const {
  return absl::StrJoin(dims_, ",", [](std::string* out, const MeshDim& d) {
    absl::StrAppend(out, d.name, "=", d.size);
  });
}

std::ostream& operator<<(std::ostream& os, const Mesh& mesh) { return os << mesh.ToString(); }

}  // namespace loom
