#include "integrations/torch/rendezvous.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/types/span.h"
#include "collectives/auto_calibration.h"
#include "collectives/cost_model.h"
#include "collectives/transport/gloo/gloo_transport.h"
#include "collectives/transport/mpi/mpi_transport.h"
#include "collectives/transport/routed/routed_transport.h"
#include "collectives/transport/shm/shm_transport.h"
#include "core/status_macros.h"
#include "integrations/torch/internal/gloo_store.h"
#include "integrations/torch/internal/mpi_group.h"

namespace loom {
namespace pytorch {
namespace {

// A rank of a PyTorch job keeps two threads busy while a call is under way: the
// group's progress thread, which waits in the transport, and the Python (or
// autograd) thread, which computes meanwhile (DDP's backward overlaps its
// all-reduces). The shm transport spins while it waits unless the busy threads
// outnumber the CPUs; counting both makes it yield the CPU instead where they do (2
// ranks on 2 cores), so the spinning does not take the core from the backward it
// overlaps.
constexpr int kBusyThreadsPerRank = 2;

std::string Hostname() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

// A job id no other live job on this host has: the creating process's pid, the
// clock and a count of the groups this process made.
std::string MakeJobId() {
  static std::atomic<uint64_t> groups{0};
  const uint64_t nanos = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  return absl::StrCat("pt", absl::Hex(getpid()), "-", absl::Hex(nanos & 0xffffffffffULL), "-",
                      groups.fetch_add(1));
}

// Prefixes every error of the rendezvous with the group and rank it concerns.
absl::Status InGroup(const GroupSpec& spec, absl::string_view step, const absl::Status& status) {
  return absl::Status(status.code(),
                      absl::StrCat("loom: group \"", spec.name, "\" rank ", spec.rank, " of ",
                                   spec.size, ": ", step, ": ", status.message()));
}

absl::StatusOr<std::vector<RankIdentity>> ExchangeIdentities(RendezvousStore& store,
                                                             const std::string& prefix,
                                                             const GroupSpec& spec,
                                                             const RankIdentity& mine,
                                                             absl::Time deadline) {
  LOOM_RETURN_IF_ERROR(
      store.Set(absl::StrCat(prefix, "rank/", spec.rank), FormatRankIdentity(mine)));
  std::vector<RankIdentity> ranks(spec.size);
  std::vector<int> missing;
  absl::Status first_error;
  for (int r = 0; r < spec.size; ++r) {
    // Once one rank is late, the others get a moment each, so the error names
    // every rank that never came rather than the first.
    const absl::Time until = missing.empty() ? deadline : absl::Now() + absl::Milliseconds(10);
    absl::StatusOr<std::string> text = store.Get(absl::StrCat(prefix, "rank/", r), until);
    if (!text.ok()) {
      if (!absl::IsDeadlineExceeded(text.status())) return text.status();
      missing.push_back(r);
      if (first_error.ok()) first_error = text.status();
      continue;
    }
    LOOM_ASSIGN_OR_RETURN(ranks[r], ParseRankIdentity(*text));
  }
  if (!missing.empty()) {
    return absl::DeadlineExceededError(
        absl::StrCat("rank", missing.size() == 1 ? " " : "s ", absl::StrJoin(missing, ", "),
                     " of the group never arrived (", first_error.message(), ")"));
  }
  return ranks;
}

absl::StatusOr<std::unique_ptr<Transport>> ConnectShm(const std::string& job_id, int rank,
                                                      int size, const GroupSpec& spec,
                                                      const BackendOptions& options,
                                                      absl::Time deadline) {
  ShmOptions shm;
  shm.job_id = job_id;
  shm.rank = rank;
  shm.size = size;
  shm.world_rank = spec.world_rank;
  shm.heartbeat_timeout = options.heartbeat_timeout;
  shm.copy_mode = options.shm_copy;
  shm.connect_timeout = std::max(deadline - absl::Now(), absl::Milliseconds(1));
  shm.host_ranks = std::max(spec.host_ranks, size) * kBusyThreadsPerRank;
  absl::StatusOr<std::unique_ptr<Transport>> transport = ConnectShmTransport(shm);
  if (!transport.ok()) {
    // A rank that failed while connecting may leave segments; every rank of the
    // job fails with it, so whichever gets here removes them.
    RemoveShmSegments(job_id).IgnoreError();
  }
  return transport;
}

absl::StatusOr<std::unique_ptr<Transport>> ConnectMpi(absl::Span<const RankIdentity> ranks,
                                                      const BackendOptions& options) {
  absl::StatusOr<int> started = pytorch_internal::StartMpi();
  if (!started.ok()) return started.status();
  std::vector<int> world_ranks;
  for (const RankIdentity& rank : ranks) world_ranks.push_back(rank.mpi_rank);
  MpiTransportOptions mpi;
  mpi.heartbeat_timeout = options.heartbeat_timeout;
  return pytorch_internal::ConnectMpiGroup(world_ranks, mpi);
}

absl::StatusOr<std::unique_ptr<Transport>> ConnectGloo(RendezvousStore& store,
                                                       const std::string& prefix,
                                                       const GroupSpec& spec,
                                                       const BackendOptions& options,
                                                       absl::Time deadline) {
  pytorch_internal::GlooStore gloo_store(store, deadline);
  GlooOptions gloo;
  gloo.rank = spec.rank;
  gloo.size = spec.size;
  gloo.world_rank = spec.world_rank;
  gloo.heartbeat_timeout = options.heartbeat_timeout;
  gloo.store = &gloo_store;
  gloo.prefix = absl::StrCat(prefix, "gloo");
  gloo.hostname = options.gloo_hostname.empty() ? Hostname() : options.gloo_hostname;
  gloo.interface = options.gloo_interface;
  gloo.connect_timeout = std::max(deadline - absl::Now(), absl::Milliseconds(1));
  return ConnectGlooTransport(gloo);
}

}  // namespace

std::string DefaultHostId() {
  std::string boot_id;
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::getline(file, boot_id);
  return absl::StrCat(Hostname(), ":", absl::StripAsciiWhitespace(boot_id));
}

absl::StatusOr<GroupConnection> ConnectGroup(RendezvousStore& store, const GroupSpec& in_spec,
                                             const BackendOptions& options) {
  GroupSpec spec = in_spec;
  if (spec.world_rank < 0) spec.world_rank = spec.rank;
  if (spec.size < 1 || spec.rank < 0 || spec.rank >= spec.size) {
    return absl::InvalidArgumentError(absl::StrCat("loom: group \"", spec.name, "\": rank ",
                                                   spec.rank, " is outside [0, ", spec.size, ")"));
  }
  if (spec.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("loom: group \"", spec.name, "\": timeout ",
                                                   absl::FormatDuration(spec.timeout),
                                                   " must be positive"));
  }
  if (absl::Status valid = ValidateBackendOptions(options); !valid.ok()) {
    return InGroup(spec, "options", valid);
  }
  const absl::Time deadline = absl::Now() + spec.timeout;
  // The cost model file is read before the store is touched: a rank that cannot read
  // it fails alone and at once, and a peer is not left waiting in the rendezvous for
  // it (nor cut off from the store, when the failing rank is the one hosting it).
  std::optional<CostModel> cost_model;
  if (!options.cost_model.empty()) {
    absl::StatusOr<CostModel> model = CostModel::Load(options.cost_model);
    if (!model.ok()) return InGroup(spec, "cost_model", model.status());
    cost_model = *std::move(model);
  }

  // Every rank of the group adds one per connect, so the k-th connect of a prefix
  // reads k * size + 1 .. (k + 1) * size and uses round k.
  absl::StatusOr<int64_t> arrivals = store.Add("loom/arrivals", 1);
  if (!arrivals.ok()) return InGroup(spec, "store", arrivals.status());
  const std::string prefix = absl::StrCat("loom/", (*arrivals - 1) / spec.size, "/");

  RankIdentity mine;
  mine.host_id = options.host_id.empty() ? DefaultHostId() : options.host_id;
  mine.hostname = Hostname();
  mine.pid = getpid();
  mine.mpi_rank = pytorch_internal::MpiWorldRankFromEnvironment();
  if (spec.rank == 0) {
    if (absl::Status set = store.Set(absl::StrCat(prefix, "job"), MakeJobId()); !set.ok()) {
      return InGroup(spec, "store", set);
    }
  }
  absl::StatusOr<std::vector<RankIdentity>> ranks =
      ExchangeIdentities(store, prefix, spec, mine, deadline);
  if (!ranks.ok()) return InGroup(spec, "rendezvous", ranks.status());
  absl::StatusOr<std::string> job = store.Get(absl::StrCat(prefix, "job"), deadline);
  if (!job.ok()) return InGroup(spec, "rendezvous", job.status());

  GroupConnection group;
  absl::StatusOr<GroupLayout> layout = PlanGroupLayout(*ranks, spec.rank, options.transport);
  if (!layout.ok()) return InGroup(spec, "layout", layout.status());
  group.layout = *layout;

  CommunicatorOptions comm;
  comm.timeout = spec.timeout;
  comm.deterministic = options.deterministic;
  if (options.chunk_bytes > 0) comm.chunk_bytes = options.chunk_bytes;
  comm.check = options.check;
  if (cost_model.has_value()) {
    comm.cost_model = *std::move(cost_model);
    group.cost_model_source = absl::StrCat("cost model from ", options.cost_model);
  }
  if (!group.layout.two_level) {
    absl::StatusOr<std::unique_ptr<Transport>> shm =
        ConnectShm(*job, spec.rank, spec.size, spec, options, deadline);
    if (!shm.ok()) return InGroup(spec, absl::StrCat("shm connect (job ", *job, ")"), shm.status());
    group.transport = std::move(*shm);
  } else {
    absl::StatusOr<std::unique_ptr<Transport>> between =
        group.layout.mpi ? ConnectMpi(*ranks, options)
                         : ConnectGloo(store, prefix, spec, options, deadline);
    if (!between.ok()) {
      return InGroup(spec, group.layout.mpi ? "mpi connect" : "gloo connect", between.status());
    }
    group.transport = std::move(*between);
    // ConnectOnHost: this rank's endpoint of shm job `name`, among the ranks of its host.
    auto connect_on_host = [&](const std::string& name) -> absl::StatusOr<std::unique_ptr<Transport>> {
      GroupSpec on_host = spec;
      on_host.host_ranks = std::max(spec.host_ranks, group.layout.local_size);
      absl::StatusOr<std::unique_ptr<Transport>> shm = ConnectShm(
          name, group.layout.local_rank, group.layout.local_size, on_host, options, deadline);
      if (!shm.ok()) {
        return InGroup(spec, absl::StrCat("shm connect inside host ", group.layout.node, " (job ",
                                          name, ")"),
                       shm.status());
      }
      return shm;
    };
    if (group.layout.ranks_per_node > 0) {
      absl::StatusOr<std::unique_ptr<Transport>> node =
          connect_on_host(absl::StrCat(*job, ".n", group.layout.node));
      if (!node.ok()) return node.status();
      comm.node_transport = std::move(*node);
    }
    // Numbered host by host (ranks_per_node follows from it in Communicator::Create),
    // whatever order the launcher dealt the ranks in.
    comm.node_of_rank = group.layout.node_of_rank;
    if (group.layout.routed) {
      // Over gloo, every message between two ranks of a host goes over a shm job of
      // that host's ranks, not over TCP on loopback (routed_transport.h); MPI has
      // shared memory of its own inside a host.
      absl::StatusOr<std::unique_ptr<Transport>> near =
          connect_on_host(absl::StrCat(*job, ".n", group.layout.node, ".r"));
      if (!near.ok()) return near.status();
      absl::StatusOr<std::unique_ptr<Transport>> routed = MakeRoutedTransport(
          std::move(group.transport), std::move(*near), group.layout.host_ranks);
      if (!routed.ok()) return InGroup(spec, "routing by host", routed.status());
      group.transport = std::move(*routed);
    }
  }
  absl::StatusOr<std::unique_ptr<Communicator>> communicator =
      Communicator::Create(group.transport, std::move(comm));
  if (!communicator.ok()) return InGroup(spec, "communicator", communicator.status());
  group.communicator = std::move(*communicator);
  // Across hosts without a file: measure (or load the cached) model on these hosts,
  // collectively, so every rank chooses alike.
  if (options.cost_model.empty() && group.layout.two_level && spec.size > 1) {
    AutoCalibrationOptions calibration;
    calibration.calibrations_merged = options.cost_model_calibrations;
    // The hosts are the layout's: a rank given a host id counts as that host here too
    // (else ranks given two ids on one machine are two hosts to the layout and one
    // host, kept on the formulas, to the calibration). Unset, the hostname, which names
    // the cache alike across reboots (the default host id carries the boot id).
    if (!options.host_id.empty()) calibration.host_name = options.host_id;
    absl::StatusOr<AutoCalibration> calibrated = AutoCalibrate(*group.communicator, calibration);
    if (!calibrated.ok()) return InGroup(spec, "calibrating the cost model", calibrated.status());
    if (calibrated->source != AutoCalibration::Source::kFormula) {
      group.cost_model_source = calibrated->ToString();
    }
  }
  return group;
}

}  // namespace pytorch
}  // namespace loom
