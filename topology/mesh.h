// Mesh: an N-D device mesh of named dimensions (dp, pp, cp, tp, ep, or any names),
// mapping global ranks to coordinates and to the process groups along one dimension
// or a set of dimensions.
//
// A mesh is row-major: the last dimension varies fastest, as in PyTorch's DeviceMesh
// and picotron's `arange(world).view(dp, pp, cp, tp)`. Megatron-LM instead writes the
// fastest dimension first ("tp-cp-ep-dp-pp"); FromOrder accepts that form, and the
// same physical layout described either way yields identical groups.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(Mesh mesh, Mesh::Create({{"dp", 2}, {"pp", 2}, {"tp", 2}}));
//   mesh.world_size();                   // 8
//   mesh.Coordinates(5);                 // {1, 0, 1}   (dp=1, pp=0, tp=1)
//   mesh.Group(5, "tp");                 // {4, 5}
//   mesh.Group(5, "dp");                 // {1, 5}
//   mesh.Group(5, "dp-tp");              // {0, 1, 4, 5}  (flattened, ascending rank)
//   mesh.AllGroups("pp");                // {{0, 2}, {1, 3}, {4, 6}, {5, 7}}
//   mesh.NextRank(5, "pp");              // 7;  mesh.NextRank(7, "pp") -> nullopt
//   mesh.RingPrev(5, "tp");              // 4   (wraps around)
//
//   // The same layout, Megatron style (first name fastest):
//   Mesh::FromOrder("tp-pp-dp", {{"dp", 2}, {"pp", 2}, {"tp", 2}});   // == mesh
//
//   Mesh::Create({{"dp", 0}});           // InvalidArgument: dimension "dp" has size 0 ...
#ifndef LOOM_TOPOLOGY_MESH_H_
#define LOOM_TOPOLOGY_MESH_H_

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace loom {

struct MeshDim {
  std::string name;
  int64_t size = 1;
};

bool operator==(const MeshDim& a, const MeshDim& b);

class Mesh {
 public:
  static constexpr int kMaxDims = 8;

  // Create builds a row-major mesh (last dimension fastest). Returns InvalidArgument
  // for 0 or more than kMaxDims dimensions, an empty, malformed ([a-z0-9_] only) or
  // repeated name, a size below 1, or a world size above 2^31.
  static absl::StatusOr<Mesh> Create(std::vector<MeshDim> dims);

  // FromOrder builds a mesh from a Megatron-style order string whose first name varies
  // fastest ("tp-cp-ep-dp-pp"), with sizes given by name in `sizes` (their order there
  // does not matter). Returns InvalidArgument when the order names a dimension not in
  // `sizes`, omits one, or repeats one, and for everything Create rejects.
  static absl::StatusOr<Mesh> FromOrder(absl::string_view order, absl::Span<const MeshDim> sizes);

  // ParseShape parses "dp=2,pp=2,cp=1,tp=2" into dimensions, in the order written.
  // Returns InvalidArgument naming the offending token.
  static absl::StatusOr<std::vector<MeshDim>> ParseShape(absl::string_view shape);

  int64_t world_size() const { return world_size_; }
  int num_dims() const { return static_cast<int>(dims_.size()); }
  // dims returns the dimensions slowest first (row-major order).
  const std::vector<MeshDim>& dims() const { return dims_; }
  // stride(i) is how far apart two ranks are that differ by one along dimension i.
  int64_t stride(int dim_index) const { return strides_[dim_index]; }

  // DimIndex returns the position of `name` in dims(); NotFound names the mesh's dims.
  absl::StatusOr<int> DimIndex(absl::string_view name) const;
  // DimSize returns the size of dimension `name`; NotFound if absent.
  absl::StatusOr<int64_t> DimSize(absl::string_view name) const;

  // Coordinates returns the coordinate of `rank` along every dimension (dims() order).
  // OutOfRange for a rank outside [0, world_size).
  absl::StatusOr<std::vector<int64_t>> Coordinates(int64_t rank) const;
  // Coordinate returns the coordinate of `rank` along `dim`.
  absl::StatusOr<int64_t> Coordinate(int64_t rank, absl::string_view dim) const;
  // RankAt returns the rank at `coords` (dims() order). InvalidArgument for the wrong
  // number of coordinates; OutOfRange for a coordinate outside its dimension.
  absl::StatusOr<int64_t> RankAt(absl::Span<const int64_t> coords) const;

  // Group returns the ranks that share every coordinate of `rank` except those along
  // `dims`, a dimension name ("tp") or several joined by '-' ("dp-cp"), flattened.
  // The ranks are in ascending order, which is the order of their coordinates along
  // the named dimensions (slowest named dimension first). NotFound for unknown names,
  // InvalidArgument for an empty or repeated name, OutOfRange for a bad rank.
  absl::StatusOr<std::vector<int64_t>> Group(int64_t rank, absl::string_view dims) const;

  // AllGroups returns every group along `dims`, ordered by their first rank. They are
  // disjoint and together cover all ranks.
  absl::StatusOr<std::vector<std::vector<int64_t>>> AllGroups(absl::string_view dims) const;

  // NextRank / PrevRank return the neighbour one step further / back along `dim`, or
  // nullopt at the last / first coordinate (pipeline stages do not wrap).
  absl::StatusOr<std::optional<int64_t>> NextRank(int64_t rank, absl::string_view dim) const;
  absl::StatusOr<std::optional<int64_t>> PrevRank(int64_t rank, absl::string_view dim) const;

  // RingNext / RingPrev are the neighbours along `dim` with wrap-around (context
  // parallel ring attention send / receive peers). A size-1 dimension is its own ring.
  absl::StatusOr<int64_t> RingNext(int64_t rank, absl::string_view dim) const;
  absl::StatusOr<int64_t> RingPrev(int64_t rank, absl::string_view dim) const;

  // GroupFirst / GroupLast return the first and last rank of Group(rank, dims).
  absl::StatusOr<int64_t> GroupFirst(int64_t rank, absl::string_view dims) const;
  absl::StatusOr<int64_t> GroupLast(int64_t rank, absl::string_view dims) const;

  // ToString returns the shape as ParseShape reads it, e.g. "dp=2,pp=2,tp=2".
  std::string ToString() const;

  friend bool operator==(const Mesh& a, const Mesh& b) { return a.dims_ == b.dims_; }
  friend bool operator!=(const Mesh& a, const Mesh& b) { return !(a == b); }

 private:
  explicit Mesh(std::vector<MeshDim> dims);

  absl::Status CheckRank(int64_t rank) const;
  // ParseDimSet resolves "dp-cp" into a membership mask over dims().
  absl::StatusOr<std::vector<bool>> ParseDimSet(absl::string_view dims) const;
  absl::StatusOr<std::optional<int64_t>> Step(int64_t rank, absl::string_view dim, int64_t delta,
                                              bool wrap) const;

  std::vector<MeshDim> dims_;
  std::vector<int64_t> strides_;
  int64_t world_size_ = 1;
};

std::ostream& operator<<(std::ostream& os, const Mesh& mesh);

}  // namespace loom

#endif  // LOOM_TOPOLOGY_MESH_H_
