// mesh_report: prints every rank of an N-D mesh with its coordinates and its groups
// along each dimension, and checks them against row-major arithmetic of its own.
//
//   mesh_report                  # dp=2,pp=2,tp=2
//   mesh_report dp=4,tp=2
// Exit status: 0 when every group matches, 1 on a mismatch, 2 on a bad shape.
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "topology/mesh.h"

namespace {

// The ranks sharing every coordinate with `rank` except along `dim`, computed
// directly: in a row-major mesh, dimension d has stride prod(sizes[d+1..]).
std::vector<int64_t> ReferenceGroup(const std::vector<loom::MeshDim>& dims, int64_t rank,
                                    size_t dim) {
  int64_t stride = 1;
  for (size_t d = dim + 1; d < dims.size(); ++d) stride *= dims[d].size;
  const int64_t coordinate = (rank / stride) % dims[dim].size;
  std::vector<int64_t> group;
  for (int64_t c = 0; c < dims[dim].size; ++c) group.push_back(rank + (c - coordinate) * stride);
  return group;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string shape = argc > 1 ? argv[1] : "dp=2,pp=2,tp=2";
  std::vector<loom::MeshDim> dims;
  for (absl::string_view part : absl::StrSplit(shape, ',')) {
    std::vector<std::string> name_size = absl::StrSplit(part, '=');
    int64_t size = 0;
    if (name_size.size() != 2 || !absl::SimpleAtoi(name_size[1], &size)) {
      std::cerr << "mesh_report: bad dimension \"" << part << "\" in \"" << shape
                << "\"; want name=size,name=size,...\n";
      return 2;
    }
    dims.push_back({name_size[0], size});
  }
  absl::StatusOr<loom::Mesh> mesh = loom::Mesh::Create(dims);
  if (!mesh.ok()) {
    std::cerr << "mesh_report: " << mesh.status() << "\n";
    return 2;
  }

  std::cout << "mesh " << shape << ": " << mesh->world_size() << " ranks\n";
  int mismatches = 0;
  for (int64_t rank = 0; rank < mesh->world_size(); ++rank) {
    std::vector<std::string> coordinates;
    std::vector<std::string> groups;
    const std::vector<int64_t> coords = *mesh->Coordinates(rank);
    for (size_t d = 0; d < dims.size(); ++d) {
      coordinates.push_back(absl::StrCat(dims[d].name, "=", coords[d]));
      const std::vector<int64_t> group = *mesh->Group(rank, dims[d].name);
      if (group != ReferenceGroup(dims, rank, d)) {
        std::cerr << "mesh_report: rank " << rank << "'s " << dims[d].name << " group {"
                  << absl::StrJoin(group, ", ") << "} differs from the row-major reference {"
                  << absl::StrJoin(ReferenceGroup(dims, rank, d), ", ") << "}\n";
        ++mismatches;
      }
      groups.push_back(absl::StrCat(dims[d].name, " {", absl::StrJoin(group, ", "), "}"));
    }
    std::cout << "rank " << rank << ": " << absl::StrJoin(coordinates, " ") << "  groups "
              << absl::StrJoin(groups, " ") << "\n";
  }
  if (mismatches > 0) return 1;
  std::cout << "every group matches the row-major reference\n";
  return 0;
}
