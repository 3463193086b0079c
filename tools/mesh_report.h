// MeshReport: what //tools:mesh prints — every rank's node, local rank, coordinates
// and its group along every dimension — as JSON (a stable schema other tools reuse)
// or as a human-readable table.
//
// JSON schema:
//   {"world_size": 8,
//    "dims": [{"name": "dp", "size": 2}, ...],            // slowest first (row-major)
//    "ranks": [{"rank": 0, "node": 0, "local_rank": 0,
//               "coords": {"dp": 0, ...},
//               "groups": {"dp": [0, 4], "tp": [0, 1], ...}}, ...]}
// Each group is listed in order of its members' coordinate along that dimension.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(Mesh mesh, Mesh::Create({{"dp", 2}, {"tp", 2}}));
//   LOOM_ASSIGN_OR_RETURN(NodeLayout nodes, NodeLayout::Create(4, 2));
//   MeshReportJson(mesh, nodes, std::nullopt);
//   // {"world_size": 4, "dims": [{"name": "dp", "size": 2}, {"name": "tp", "size": 2}],
//   //  "ranks": [{"rank": 0, "node": 0, "local_rank": 0, "coords": {"dp": 0, "tp": 0},
//   //             "groups": {"dp": [0, 2], "tp": [0, 1]}}, ...]}
#ifndef LOOM_TOOLS_MESH_REPORT_H_
#define LOOM_TOOLS_MESH_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "topology/mesh.h"
#include "topology/node_layout.h"

namespace loom {

// MeshReportJson returns the report for every rank, or only `rank` when given, as
// one line of JSON. OutOfRange if `rank` is outside the mesh; InvalidArgument if the
// layout's world size differs from the mesh's.
absl::StatusOr<std::string> MeshReportJson(const Mesh& mesh, const NodeLayout& nodes,
                                           std::optional<int64_t> rank);

// MeshReportTable returns the same content as an aligned text table; a group that
// spans more than one node is marked with '*'. Errors as MeshReportJson.
absl::StatusOr<std::string> MeshReportTable(const Mesh& mesh, const NodeLayout& nodes,
                                            std::optional<int64_t> rank);

}  // namespace loom

#endif  // LOOM_TOOLS_MESH_REPORT_H_
