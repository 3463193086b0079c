#include "tensor_parallel/distributed_tensor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"
#include "tensor_parallel/internal/shard_ops.h"
#include "tensor_parallel/internal/transition_planner.h"

namespace loom {
namespace {

namespace tpi = tensor_parallel_internal;

int MeshDimSize(const Mesh& mesh, int m) {
  return static_cast<int>(mesh.dims()[static_cast<size_t>(m)].size);
}

std::string MeshString(const Mesh& mesh) {
  return absl::StrCat("[", absl::StrJoin(mesh.dims(), ", ",
                                         [](std::string* out, const MeshDim& d) {
                                           absl::StrAppend(out, d.name, "=", d.size);
                                         }),
                      "]");
}

TensorSpec WithPlacements(const TensorSpec& spec, std::vector<Placement> placements) {
  TensorSpec out = spec;
  out.placements = std::move(placements);
  return out;
}

std::vector<int> Coordinates(const DeviceMesh& mesh) {
  std::vector<int> coords;
  for (int m = 0; m < mesh.ndim(); ++m) coords.push_back(mesh.coordinate(m));
  return coords;
}

const char* CollectiveOf(const tpi::Transition& t) {
  if (t.from.is_shard()) return t.to.is_shard() ? "all-to-all" : "all-gather";
  if (t.from.is_partial()) return t.to.is_shard() ? "reduce-scatter" : "all-reduce";
  return t.to.is_shard() ? "local slice" : "local partial";
}

// StepBytes: the input of a step at coordinate 0 of every mesh dimension, whose
// shard is the largest under both rules (the first piece is never shorter), so it
// is also what the padded collectives send.
int64_t StepBytes(const TensorSpec& before, const tpi::Transition& t) {
  const std::vector<int> zeros(before.placements.size(), 0);
  std::vector<int64_t> shape = before.LocalShape(zeros);
  int64_t elements = NumElements(shape);
  if (t.from.is_partial() && t.to.is_shard()) {
    const size_t d = static_cast<size_t>(t.to.dim());
    const int k = MeshDimSize(before.mesh, t.mesh_dim);
    shape[d] = ShardExtentOf(shape[d], k, 0, before.rule).length;
    elements = k * NumElements(shape);
  }
  return elements * static_cast<int64_t>(DTypeSize(before.dtype));
}

// StepString: "mesh dim 1 (tp): S(0) -> S(1)  all-to-all  48 bytes/rank".
std::string StepString(const TensorSpec& spec, const RedistributeStep& step) {
  return absl::StrCat("mesh dim ", step.mesh_dim, " (",
                      spec.mesh.dims()[static_cast<size_t>(step.mesh_dim)].name,
                      "): ", step.from.ToString(), " -> ", step.to.ToString(), "  ",
                      step.collective, "  ", step.bytes_per_rank, " bytes/rank");
}

// RunStep applies one transition to this rank's shard of a tensor laid out as
// `before`.
absl::StatusOr<Tensor> RunStep(const Tensor& local, const TensorSpec& before,
                               const RedistributeStep& step, const DeviceMesh& mesh) {
  const int m = step.mesh_dim;
  const std::vector<int> coords = Coordinates(mesh);
  std::vector<Placement> after_placements = before.placements;
  after_placements[static_cast<size_t>(m)] = step.to;
  const std::vector<int64_t> after_shape =
      WithPlacements(before, after_placements).LocalShape(coords);
  Communicator& comm = mesh.comm(m);
  const Placement& from = step.from;
  const Placement& to = step.to;
  if (from.is_shard() && to.is_replicate()) {
    return tpi::AllGatherAlongDim(local, from.dim(), after_shape[static_cast<size_t>(from.dim())],
                                  before.rule, comm);
  }
  if (from.is_shard() && to.is_shard()) {
    return tpi::AllToAllDims(local, from.dim(), after_shape[static_cast<size_t>(from.dim())],
                             to.dim(), before.rule, comm);
  }
  if (from.is_partial() && to.is_replicate()) return tpi::AllReduceTensor(local, from.op(), comm);
  if (from.is_partial() && to.is_shard()) {
    return tpi::ReduceScatterAlongDim(local, to.dim(), before.rule, from.op(), comm);
  }
  if (from.is_replicate() && to.is_shard()) {
    return tpi::SliceAlongDim(local, to.dim(),
                              ShardExtentOf(local.dim(to.dim()), mesh.size(m), mesh.coordinate(m),
                                            before.rule));
  }
  if (from.is_replicate() && to.is_partial()) {
    return tpi::ToPartial(local, to.op(), mesh.coordinate(m));
  }
  return absl::InternalError(absl::StrCat("no step from ", from.ToString(), " to ", to.ToString()));
}

}  // namespace

absl::Status TensorSpec::Validate() const {
  for (int64_t d : global_shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("TensorSpec: global shape ", ShapeString(global_shape),
                       " has a negative dimension"));
    }
  }
  if (!Tensor::SupportsDType(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("TensorSpec: dtype ", DTypeName(dtype),
                                                   " is not supported (f32 or bf16)"));
  }
  LOOM_RETURN_IF_ERROR(ValidatePlacements(placements, static_cast<int>(global_shape.size()),
                                          mesh.num_dims()));
  // With two ops pending, the order of the reductions would change the value.
  const Placement* first_partial = nullptr;
  for (const Placement& p : placements) {
    if (!p.is_partial()) continue;
    if (first_partial != nullptr && p.op() != first_partial->op()) {
      return absl::InvalidArgumentError(
          absl::StrCat("TensorSpec: placements ", PlacementsString(placements), " mix ",
                       first_partial->ToString(), " and ", p.ToString(),
                       "; all Partial placements of a tensor must share one op"));
    }
    first_partial = &p;
  }
  return absl::OkStatus();
}

std::vector<int64_t> TensorSpec::LocalShape(absl::Span<const int> coordinates) const {
  std::vector<int64_t> shape = global_shape;
  for (size_t m = 0; m < placements.size(); ++m) {
    if (!placements[m].is_shard()) continue;
    int64_t& extent = shape[static_cast<size_t>(placements[m].dim())];
    extent = ShardExtentOf(extent, MeshDimSize(mesh, static_cast<int>(m)), coordinates[m], rule)
                 .length;
  }
  return shape;
}

std::vector<int64_t> TensorSpec::LocalOffset(absl::Span<const int> coordinates) const {
  std::vector<int64_t> shape = global_shape;
  std::vector<int64_t> offset(global_shape.size(), 0);
  for (size_t m = 0; m < placements.size(); ++m) {
    if (!placements[m].is_shard()) continue;
    const size_t d = static_cast<size_t>(placements[m].dim());
    const ShardExtent piece =
        ShardExtentOf(shape[d], MeshDimSize(mesh, static_cast<int>(m)), coordinates[m], rule);
    offset[d] += piece.offset;
    shape[d] = piece.length;
  }
  return offset;
}

absl::StatusOr<DistributedTensor> DistributedTensor::FromLocal(Tensor local, TensorSpec spec,
                                                               const DeviceMesh& mesh) {
  LOOM_RETURN_IF_ERROR(spec.Validate());
  if (spec.mesh != mesh.mesh()) {
    return absl::InvalidArgumentError(absl::StrCat("FromLocal: the spec's mesh ", MeshString(spec.mesh),
                                                   " is not the device mesh ",
                                                   MeshString(mesh.mesh())));
  }
  if (local.dtype() != spec.dtype) {
    return absl::InvalidArgumentError(absl::StrCat("FromLocal: local tensor is ",
                                                   DTypeName(local.dtype()), ", the spec says ",
                                                   DTypeName(spec.dtype)));
  }
  const std::vector<int> coords = Coordinates(mesh);
  const std::vector<int64_t> expected = spec.LocalShape(coords);
  if (local.shape() != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FromLocal: local shape ", ShapeString(local.shape()), " is not ", ShapeString(expected),
        ", the shard of global shape ", ShapeString(spec.global_shape), " under ",
        PlacementsString(spec.placements), " (", ShardRuleName(spec.rule),
        ") at mesh coordinates (", absl::StrJoin(coords, ","), ")"));
  }
  return DistributedTensor(std::move(local), std::move(spec), &mesh);
}

absl::StatusOr<DistributedTensor> DistributedTensor::Distribute(const Tensor& full,
                                                                const DeviceMesh& mesh,
                                                                std::vector<Placement> placements,
                                                                ShardRule rule) {
  TensorSpec spec{full.shape(), full.dtype(), std::move(placements), rule, mesh.mesh()};
  LOOM_RETURN_IF_ERROR(spec.Validate());
  // Mesh dimensions in order, so nested shards split the previous piece.
  Tensor local = full.Clone();
  for (int m = 0; m < mesh.ndim(); ++m) {
    const Placement& p = spec.placements[static_cast<size_t>(m)];
    if (p.is_shard()) {
      LOOM_ASSIGN_OR_RETURN(local, tpi::SliceAlongDim(local, p.dim(),
                                                      ShardExtentOf(local.dim(p.dim()),
                                                                    mesh.size(m),
                                                                    mesh.coordinate(m), rule)));
    } else if (p.is_partial()) {
      LOOM_ASSIGN_OR_RETURN(local, tpi::ToPartial(local, p.op(), mesh.coordinate(m)));
    }
  }
  return DistributedTensor(std::move(local), std::move(spec), &mesh);
}

absl::StatusOr<Tensor> DistributedTensor::Gather() const {
  const std::vector<Placement> replicated(spec_.placements.size(), Placement::Replicate());
  LOOM_ASSIGN_OR_RETURN(DistributedTensor full, Redistribute(*this, replicated));
  return std::move(full.mutable_local());
}

std::string RedistributePlan::ToString() const {
  std::string out = absl::StrCat(PlacementsString(from.placements), " -> ", PlacementsString(to),
                                 " on mesh ", MeshString(from.mesh), ", tensor ",
                                 ShapeString(from.global_shape), ", ", ShardRuleName(from.rule));
  for (size_t i = 0; i < steps.size(); ++i) {
    absl::StrAppend(&out, "\nstep ", i + 1, ": ", StepString(from, steps[i]));
  }
  return out;
}

absl::StatusOr<RedistributePlan> PlanRedistribute(const TensorSpec& from,
                                                  absl::Span<const Placement> to) {
  LOOM_RETURN_IF_ERROR(from.Validate());
  TensorSpec state = WithPlacements(from, std::vector<Placement>(to.begin(), to.end()));
  absl::Status target = state.Validate();
  if (!target.ok()) {
    return absl::Status(target.code(), absl::StrCat("PlanRedistribute: target ", PlacementsString(to),
                                                    ": ", target.message()));
  }
  LOOM_ASSIGN_OR_RETURN(
      std::vector<tpi::Transition> transitions,
      tpi::PlanTransitions(from.placements, to, static_cast<int>(from.global_shape.size())));
  RedistributePlan plan{from, std::vector<Placement>(to.begin(), to.end()), {}};
  state.placements = from.placements;
  for (const tpi::Transition& t : transitions) {
    plan.steps.push_back(
        RedistributeStep{t.mesh_dim, t.from, t.to, CollectiveOf(t), StepBytes(state, t)});
    state.placements[static_cast<size_t>(t.mesh_dim)] = t.to;
  }
  return plan;
}

absl::StatusOr<DistributedTensor> Redistribute(const DistributedTensor& tensor,
                                               absl::Span<const Placement> to) {
  LOOM_ASSIGN_OR_RETURN(RedistributePlan plan, PlanRedistribute(tensor.spec(), to));
  TensorSpec state = tensor.spec();
  Tensor local = tensor.local().Clone();
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const RedistributeStep& step = plan.steps[i];
    absl::StatusOr<Tensor> next = RunStep(local, state, step, tensor.device_mesh());
    if (!next.ok()) {
      return absl::Status(next.status().code(),
                          absl::StrCat("Redistribute step ", i + 1, " of ", plan.steps.size(),
                                       " (", StepString(state, step),
                                       "): ", next.status().message()));
    }
    local = *std::move(next);
    state.placements[static_cast<size_t>(step.mesh_dim)] = step.to;
  }
  return DistributedTensor::FromLocal(std::move(local), std::move(state), tensor.device_mesh());
}

}  // namespace loom
