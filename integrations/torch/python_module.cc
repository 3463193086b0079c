// loom_torch._C: the Python extension module of Loom's torch.distributed backend. It
// holds the backend's constructor; the Python package (python/loom_torch) registers it
// with torch.distributed.Backend.register_backend("loom", ...) and turns
// loom_torch.Options and LOOM_TORCH_* environment variables into its arguments.
//
// Example (Python; what loom_torch does for every group torch creates):
//   pg = _C.create_process_group(prefix_store, rank, size, timedelta(minutes=30),
//                                world_rank=rank, group_name="0")
//   _C.layout(pg)    # "shm among 2 ranks on one host"
//   _C.describe(pg)  # "shm among 2 ranks on one host; deterministic" (with options)
//   _C.BUILD_MODE    # "optimized" (./bazelw build --config=opt) or "unoptimized"
// Errors (a rank that never arrives, bad options) raise RuntimeError with Loom's
// message.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "collectives/collective_kind.h"
#include "core/build_info.h"
#include "integrations/torch/backend_options.h"
#include "integrations/torch/c10d_store.h"
#include "integrations/torch/internal/mpi_group.h"
#include "integrations/torch/internal/raise.h"
#include "integrations/torch/process_group.h"
#include "integrations/torch/rendezvous.h"
#include "integrations/torch/shared_tensor.h"

namespace loom {
namespace pytorch {
namespace {

using pytorch_internal::RaiseIfError;
using pytorch_internal::ValueOrRaise;

// The most ranks of one group this process has seen on its host: the world's, once
// the default group exists. Subgroups pass it on, so their shm waits know how many
// processes share the CPUs (ShmOptions::host_ranks).
std::atomic<int> host_ranks_seen{0};

c10::intrusive_ptr<c10d::ProcessGroup> CreateProcessGroup(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout, int world_rank, const std::string& group_name,
    bool deterministic, const std::string& check, const std::string& transport,
    const std::string& host_id, const std::string& gloo_hostname,
    const std::string& gloo_interface, double heartbeat_timeout_seconds, int64_t chunk_bytes,
    const std::string& shm_copy, const std::string& cost_model, int cost_model_calibrations) {
  BackendOptions options;
  options.deterministic = deterministic;
  if (check == "full") {
    options.check = CommunicatorOptions::Check::kFull;
  } else if (check != "sequence") {
    throw std::runtime_error(
        absl::StrCat("loom: unknown check \"", check, "\"; expected sequence or full"));
  }
  options.transport = ValueOrRaise(ParseTransportChoice(transport));
  options.host_id = host_id;
  options.gloo_hostname = gloo_hostname;
  options.gloo_interface = gloo_interface;
  options.heartbeat_timeout = heartbeat_timeout_seconds > 0
                                  ? absl::Seconds(heartbeat_timeout_seconds)
                                  : absl::InfiniteDuration();
  if (chunk_bytes < 0) {
    throw std::runtime_error(absl::StrCat("loom: chunk_bytes ", chunk_bytes, " is negative"));
  }
  options.chunk_bytes = static_cast<size_t>(chunk_bytes);
  options.shm_copy = ValueOrRaise(ParseShmCopy(shm_copy));
  options.cost_model = cost_model;
  options.cost_model_calibrations = cost_model_calibrations;
  GroupSpec spec;
  spec.rank = rank;
  spec.size = size;
  spec.world_rank = world_rank;
  spec.name = group_name;
  spec.timeout = absl::FromChrono(timeout);
  spec.host_ranks = host_ranks_seen.load();
  C10dStore rendezvous(store);
  c10::intrusive_ptr<LoomProcessGroup> group =
      ValueOrRaise(LoomProcessGroup::Create(rendezvous, spec, options));
  const int local = group->layout().local_size;
  int seen = host_ranks_seen.load();
  while (local > seen && !host_ranks_seen.compare_exchange_weak(seen, local)) {
  }
  return group;
}

LoomProcessGroup& AsLoom(const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  auto* loom_group = dynamic_cast<LoomProcessGroup*>(group.get());
  if (loom_group == nullptr) {
    throw std::runtime_error(absl::StrCat("loom: process group of backend \"",
                                          group->getBackendName(), "\" is not Loom's"));
  }
  return *loom_group;
}

at::Tensor SharedTensorBytes(int64_t bytes) { return ValueOrRaise(SharedBytes(bytes)); }

std::string Layout(const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  return AsLoom(group).layout().Describe();
}

void Abort(const c10::intrusive_ptr<c10d::ProcessGroup>& group, const std::string& reason) {
  AsLoom(group).Abort(reason);
}

void Shutdown(const c10::intrusive_ptr<c10d::ProcessGroup>& group) { AsLoom(group).Shutdown(); }

// Describe: the layout and the options that change results or checks.
std::string Describe(const c10::intrusive_ptr<c10d::ProcessGroup>& group) {
  const LoomProcessGroup& loom_group = AsLoom(group);
  const BackendOptions& options = loom_group.options();
  const std::string& cost_model = loom_group.cost_model_source();
  return absl::StrCat(loom_group.layout().Describe(),
                      options.deterministic ? "; deterministic" : "",
                      options.check == CommunicatorOptions::Check::kFull ? "; check full" : "",
                      cost_model.empty() ? "" : "; ", cost_model);
}

// Explain: what `auto` picks for a call of `kind` ("all_reduce", ...) of `bytes`.
std::string Explain(const c10::intrusive_ptr<c10d::ProcessGroup>& group, const std::string& kind,
                    int64_t bytes) {
  if (bytes < 0) throw std::runtime_error(absl::StrCat("loom: bytes ", bytes, " is negative"));
  const CollectiveKind parsed = ValueOrRaise(ParseCollectiveKind(kind));
  return ValueOrRaise(AsLoom(group).Explain(parsed, static_cast<size_t>(bytes)));
}

}  // namespace
}  // namespace pytorch
}  // namespace loom

PYBIND11_MODULE(_C, m) {
  namespace py = pybind11;
  m.doc() = "Loom's torch.distributed backend (see loom_torch)";
  m.def("create_process_group", &loom::pytorch::CreateProcessGroup, py::arg("store"),
        py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("world_rank") = -1,
        py::arg("group_name") = "", py::arg("deterministic") = false,
        py::arg("check") = "sequence", py::arg("transport") = "auto", py::arg("host_id") = "",
        py::arg("gloo_hostname") = "", py::arg("gloo_interface") = "",
        py::arg("heartbeat_timeout") = 10.0, py::arg("chunk_bytes") = 0,
        py::arg("shm_copy") = "staged_or_mapped", py::arg("cost_model") = "",
        py::arg("cost_model_calibrations") = 3,
        // The rendezvous waits on the store and on the other ranks.
        py::call_guard<py::gil_scoped_release>());
  m.def("layout", &loom::pytorch::Layout, py::arg("group"));
  m.def("describe", &loom::pytorch::Describe, py::arg("group"));
  m.def("explain", &loom::pytorch::Explain, py::arg("group"), py::arg("kind"), py::arg("bytes"));
  m.def("shared_bytes", &loom::pytorch::SharedTensorBytes, py::arg("bytes"));
  m.def("abort", &loom::pytorch::Abort, py::arg("group"), py::arg("reason"));
  // Waits for the group's queued calls, which may run Python callbacks chained on
  // their futures.
  m.def("shutdown", &loom::pytorch::Shutdown, py::arg("group"),
        py::call_guard<py::gil_scoped_release>());
  // MPI, when a group between hosts started it (internal/mpi_group.h); loom_torch
  // finalizes it at exit, after the groups are gone.
  m.def("mpi_started", &loom::pytorch_internal::MpiStarted);
  m.def("finalize_mpi", &loom::pytorch_internal::FinalizeMpi,
        py::call_guard<py::gil_scoped_release>());
  m.def("abort_mpi_job", &loom::pytorch_internal::AbortMpiJob, py::arg("reason"),
        py::call_guard<py::gil_scoped_release>());
  m.attr("BUILD_MODE") = loom::BuildMode();
}
