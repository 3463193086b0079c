#include "tools/mesh_report.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace loom {
namespace {

struct RankRow {
  int64_t rank;
  int64_t node;
  int64_t local_rank;
  std::vector<int64_t> coords;
  std::vector<std::vector<int64_t>> groups;  // One per dimension, dims() order.
};

absl::StatusOr<std::vector<RankRow>> CollectRows(const Mesh& mesh, const NodeLayout& nodes,
                                                 std::optional<int64_t> only_rank) {
  if (nodes.world_size() != mesh.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("node layout covers ", nodes.world_size(),
                                                   " ranks, mesh ", mesh.ToString(), " has ",
                                                   mesh.world_size()));
  }
  int64_t first = 0;
  int64_t last = mesh.world_size() - 1;
  if (only_rank.has_value()) {
    LOOM_RETURN_IF_ERROR(mesh.Coordinates(*only_rank).status());
    first = last = *only_rank;
  }
  std::vector<RankRow> rows;
  for (int64_t rank = first; rank <= last; ++rank) {
    RankRow row;
    row.rank = rank;
    LOOM_ASSIGN_OR_RETURN(row.node, nodes.NodeOf(rank));
    LOOM_ASSIGN_OR_RETURN(row.local_rank, nodes.LocalRank(rank));
    LOOM_ASSIGN_OR_RETURN(row.coords, mesh.Coordinates(rank));
    for (const MeshDim& dim : mesh.dims()) {
      LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> group, mesh.Group(rank, dim.name));
      row.groups.push_back(std::move(group));
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string JsonList(const std::vector<int64_t>& values) {
  return absl::StrCat("[", absl::StrJoin(values, ", "), "]");
}

}  // namespace

absl::StatusOr<std::string> MeshReportJson(const Mesh& mesh, const NodeLayout& nodes,
                                           std::optional<int64_t> rank) {
  LOOM_ASSIGN_OR_RETURN(const std::vector<RankRow> rows, CollectRows(mesh, nodes, rank));
  // Dimension names are restricted to [a-z0-9_], so they need no JSON escaping.
  std::string out = absl::StrCat("{\"world_size\": ", mesh.world_size(), ", \"dims\": [");
  out += absl::StrJoin(mesh.dims(), ", ", [](std::string* s, const MeshDim& d) {
    absl::StrAppend(s, "{\"name\": \"", d.name, "\", \"size\": ", d.size, "}");
  });
  out += "], \"ranks\": [";
  for (size_t r = 0; r < rows.size(); ++r) {
    const RankRow& row = rows[r];
    absl::StrAppend(&out, r == 0 ? "" : ", ", "{\"rank\": ", row.rank, ", \"node\": ", row.node,
                    ", \"local_rank\": ", row.local_rank, ", \"coords\": {");
    for (int d = 0; d < mesh.num_dims(); ++d) {
      absl::StrAppend(&out, d == 0 ? "" : ", ", "\"", mesh.dims()[d].name, "\": ", row.coords[d]);
    }
    out += "}, \"groups\": {";
    for (int d = 0; d < mesh.num_dims(); ++d) {
      absl::StrAppend(&out, d == 0 ? "" : ", ", "\"", mesh.dims()[d].name,
                      "\": ", JsonList(row.groups[d]));
    }
    out += "}}";
  }
  out += "]}\n";
  return out;
}

absl::StatusOr<std::string> MeshReportTable(const Mesh& mesh, const NodeLayout& nodes,
                                            std::optional<int64_t> rank) {
  LOOM_ASSIGN_OR_RETURN(const std::vector<RankRow> rows, CollectRows(mesh, nodes, rank));
  std::vector<std::string> header = {"rank", "node", "local"};
  for (const MeshDim& dim : mesh.dims()) header.push_back(dim.name);
  for (const MeshDim& dim : mesh.dims()) header.push_back(dim.name + " group");
  std::vector<std::vector<std::string>> cells = {header};
  for (const RankRow& row : rows) {
    std::vector<std::string> line = {absl::StrCat(row.rank), absl::StrCat(row.node),
                                     absl::StrCat(row.local_rank)};
    for (int64_t c : row.coords) line.push_back(absl::StrCat(c));
    for (const auto& group : row.groups) {
      LOOM_ASSIGN_OR_RETURN(const bool crosses, nodes.CrossesNodes(group));
      line.push_back(absl::StrCat("[", absl::StrJoin(group, ","), "]", crosses ? "*" : ""));
    }
    cells.push_back(std::move(line));
  }
  std::vector<size_t> width(header.size(), 0);
  for (const auto& line : cells) {
    for (size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], line[i].size());
  }
  std::string out = absl::StrCat("mesh ", mesh.ToString(), ": ", mesh.world_size(), " ranks on ",
                                 nodes.num_nodes(), " node(s) of ", nodes.ranks_per_node(),
                                 "; * marks a group that spans nodes\n");
  for (const auto& line : cells) {
    std::string text;
    for (size_t i = 0; i < line.size(); ++i) {
      absl::StrAppend(&text, line[i], std::string(width[i] - line[i].size() + 2, ' '));
    }
    text.erase(text.find_last_not_of(' ') + 1);
    absl::StrAppend(&out, text, "\n");
  }
  return out;
}

}  // namespace loom
