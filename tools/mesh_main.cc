// mesh: prints the rank layout of an N-D device mesh — coordinates, node, local rank
// and every dimension's group for each rank — as a table or as JSON.
//
//   ./bazelw run //tools:mesh -- --shape=dp=2,pp=2,cp=1,tp=2 --ranks_per_node=4
//   ./bazelw run //tools:mesh -- --shape=dp=2,pp=2,tp=2 --order=tp-pp-dp --format=json
//   ./bazelw run //tools:mesh -- --shape=dp=4,tp=2 --rank=5
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/status_macros.h"
#include "tools/cli.h"
#include "tools/mesh_report.h"
#include "topology/mesh.h"
#include "topology/node_layout.h"

ABSL_FLAG(std::string, shape, "",
          "Mesh dimensions and sizes, slowest first unless --order is given, e.g. "
          "dp=2,pp=2,cp=1,tp=2. Required.");
ABSL_FLAG(std::string, order, "",
          "Optional Megatron-style layout, first name fastest, e.g. tp-cp-pp-dp. It must "
          "name exactly the dimensions of --shape.");
ABSL_FLAG(int64_t, ranks_per_node, 0,
          "Ranks per node (host); must divide the world size. 0 puts all ranks on one node.");
ABSL_FLAG(int64_t, rank, -1, "Print only this rank; -1 prints every rank.");
ABSL_FLAG(std::string, format, "table", "Output format: table or json.");

namespace loom {
namespace {

absl::StatusOr<std::string> Run() {
  const std::string shape = absl::GetFlag(FLAGS_shape);
  if (shape.empty()) {
    return absl::InvalidArgumentError("--shape is required, e.g. --shape=dp=2,pp=2,cp=1,tp=2");
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<MeshDim> dims, Mesh::ParseShape(shape));
  const std::string order = absl::GetFlag(FLAGS_order);
  LOOM_ASSIGN_OR_RETURN(Mesh mesh, order.empty() ? Mesh::Create(dims) : Mesh::FromOrder(order, dims));
  const int64_t per_node = absl::GetFlag(FLAGS_ranks_per_node);
  LOOM_ASSIGN_OR_RETURN(NodeLayout nodes,
                        NodeLayout::Create(mesh.world_size(), per_node == 0 ? mesh.world_size() : per_node));
  const int64_t rank_flag = absl::GetFlag(FLAGS_rank);
  const std::optional<int64_t> rank = rank_flag == -1 ? std::nullopt : std::optional<int64_t>(rank_flag);
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format == "json") return MeshReportJson(mesh, nodes, rank);
  if (format == "table") return MeshReportTable(mesh, nodes, rank);
  return absl::InvalidArgumentError("--format=" + format + " is not table or json");
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Prints the rank layout of an N-D device mesh.\n"
      "  mesh --shape=dp=2,pp=2,cp=1,tp=2 [--order=tp-cp-pp-dp] [--ranks_per_node=4]\n"
      "       [--rank=R] [--format=table|json]");
  const absl::StatusOr<std::vector<char*>> args = loom::cli::ParseFlags(argc, argv);
  if (!args.ok()) return loom::cli::Fail("mesh", args.status());
  if (absl::Status s = loom::cli::CheckNoArguments(*args); !s.ok()) {
    return loom::cli::Fail("mesh", s);
  }
  const absl::StatusOr<std::string> report = loom::Run();
  // Every failure of mesh is its input's (it only computes a layout): exit 2.
  if (!report.ok()) return loom::cli::Fail("mesh", report.status(), loom::cli::kExitUsage);
  std::cout << *report;
  return 0;
}
