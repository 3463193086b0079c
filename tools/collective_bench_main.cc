// collective_bench: nccl-tests-style collective benchmark over Loom's transports.
//
//   collective_bench --transport=inproc --ranks=8 --op=all_reduce --algo=ring --check
//   collective_bench --transport=shm --ranks=2 --min_bytes=4K --max_bytes=64M
//
// With --transport=shm and no LOOM_RANK in the environment it starts --ranks copies
// of itself through the launcher (as //tools:launch would), each connecting to the
// shared-memory transport; rank 0 prints the table.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/auto_calibration.h"
#include "collectives/calibration.h"
#include "collectives/communicator.h"
#include "collectives/cost_model.h"
#include "collectives/node_layout.h"
#include "collectives/transport/gloo/gloo_transport.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "collectives/transport/heartbeat.h"
#include "collectives/transport/mpi/mpi_transport.h"
#include "collectives/transport/mpi/mpirun.h"
#include "collectives/transport/mpi/node_shm.h"
#include "collectives/transport/routed/routed_transport.h"
#include "collectives/transport/shm/shm_transport.h"
#include "core/status_macros.h"
#include "tools/cli.h"
#include "tools/collective_bench.h"
#include "tools/job_files.h"
#include "tools/launcher.h"

ABSL_FLAG(std::string, transport, "inproc",
          "inproc (threads), shm (processes, shared memory), mpi (the processes of an "
          "mpirun job; started as one when run by hand) or gloo (processes over Gloo's TCP "
          "pairs on loopback)");
ABSL_FLAG(int, ranks, 2, "number of ranks");
ABSL_FLAG(std::string, op, "all_reduce",
          "all_reduce, reduce_scatter, all_gather, broadcast, reduce or all_to_all");
ABSL_FLAG(std::string, algo, "auto",
          "auto, ring, tree (binomial), dbtree, halving_doubling, hierarchical, direct, pairwise");
ABSL_FLAG(std::string, dtype, "f32", "f32, f64, f16, bf16, i8, u8, i32, i64");
ABSL_FLAG(std::string, redop, "sum", "sum, prod, min, max, avg");
ABSL_FLAG(std::string, min_bytes, "4K", "smallest size (bytes; K, M, G suffixes)");
ABSL_FLAG(std::string, max_bytes, "64M", "largest size");
ABSL_FLAG(int, step_factor, 2, "size multiplier between rows");
ABSL_FLAG(int, iters, 20, "timed iterations per size");
// A string, as --timeout is (below).
ABSL_FLAG(std::string, min_time, "0s",
          "when positive (e.g. 0.2s), a size whose --iters calls take less runs more calls, sized "
          "from one timed call, so fast sizes are judged over many calls (0s: exactly --iters)");
ABSL_FLAG(int, warmup, 5, "untimed iterations per size");
ABSL_FLAG(bool, check, false, "seed inputs and count wrong result elements");
ABSL_FLAG(bool, in_place, false, "run the collectives in place");
ABSL_FLAG(bool, shared_buffers, false,
          "inputs and outputs from the transport's AllocateBuffer (shm: SharedBuffers the "
          "peers map instead of using CMA)");
ABSL_FLAG(int, root, 0, "root of broadcast and reduce");
ABSL_FLAG(int, ranks_per_node, 0, "node layout for hierarchical (0: one node)");
ABSL_FLAG(std::string, node_transport, "auto",
          "what the intra-node phases (hierarchical's, and direct's and the trees' by nodes) "
          "run over: shm (Loom's shm transport among the ranks of each node), none (the "
          "transport itself; over gloo also node-blind) or auto (mpi: none; gloo: shm among "
          "the ranks found to share a host, else none)");
ABSL_FLAG(bool, route_by_host, true,
          "gloo with the ranks' hosts found (--node_transport=auto or shm): every algorithm's "
          "messages to ranks of the same host go over Loom's shm transport, those to other "
          "hosts over gloo (a routed gloo+shm transport), not only the node-aware phases'; "
          "false: over gloo, through TCP on loopback");
ABSL_FLAG(std::string, chunk_bytes, "256K", "pipelining chunk of the ring and trees");
ABSL_FLAG(bool, deterministic, false, "rank-order (bitwise reproducible) reductions");
ABSL_FLAG(std::string, cost_model, "",
          "cost model file: --algo=auto chooses by it, and the binomial tree sizes its window "
          "from its link (default constants otherwise)");
ABSL_FLAG(bool, calibrate, false,
          "measure the cost model on this job's communicator first (each level's link, and "
          "every algorithm's time, the engine's own too where the transport has them, at "
          "--min_bytes..--max_bytes in steps of 4) and let --algo=auto use it; rank 0 prints it");
ABSL_FLAG(std::string, save_cost_model, "",
          "with --calibrate: rank 0 also writes the measured model here (for --cost_model)");
ABSL_FLAG(bool, auto_calibrate, true,
          "with --algo=auto and neither --cost_model nor --calibrate: a communicator across "
          "hosts measures the cost model once per set of hosts (about 2 s) and reads it from "
          "--cost_model_cache after that (collectives/auto_calibration.h); one host keeps the "
          "formulas");
ABSL_FLAG(std::string, cost_model_cache, "",
          "the directory of --auto_calibrate's cache files; empty: $LOOM_CACHE_DIR, else "
          "$XDG_CACHE_HOME/loom, else $HOME/.cache/loom");
ABSL_FLAG(int, cost_model_calibrations, 3,
          "how many runs' calibrations --auto_calibrate's cache merges (their median) "
          "before later runs only read it; 1: the first run's is kept");
ABSL_FLAG(bool, json, false, "print JSON instead of the table");
// A string, parsed with absl::ParseDuration: absl's Duration flags read through a
// sequence lock whose fences ThreadSanitizer builds reject.
ABSL_FLAG(std::string, shm_copy, "auto",
          "shm: how messages above the eager size travel: auto, cma or staged");
ABSL_FLAG(std::string, shm_staging_bytes, "1M", "shm: staging ring bytes per ordered pair of ranks");
ABSL_FLAG(std::string, timeout, "2m", "per-call timeout (e.g. 30s, 2m)");
ABSL_FLAG(std::string, gloo_store_dir, "",
          "gloo: the rendezvous directory; empty: gloo/ in the job directory the launcher "
          "made for the processes it starts (removed with the job)");
ABSL_FLAG(std::string, gloo_interface, "",
          "gloo: the network interface whose address the other ranks reach this one at "
          "(e.g. eth0, across hosts); empty: 127.0.0.1 (one host)");
ABSL_FLAG(std::string, heartbeat_timeout, "10s",
          "shm, mpi and gloo: a rank that has not run for this long (stopped, frozen) is "
          "reported by its peers, which end the job naming it; at least 200ms, or inf (off)");

namespace loom {
namespace {

constexpr int kMaxRanks = 1024;

// Flag returns what parsing flag `name` gave, its error prefixed with the flag
// and value ("--op=foo: unknown collective ...").
template <typename T>
absl::StatusOr<T> Flag(absl::string_view name, const std::string& value, absl::StatusOr<T> parsed) {
  if (parsed.ok()) return parsed;
  return absl::Status(parsed.status().code(),
                      absl::StrCat("--", name, "=", value, ": ", parsed.status().message()));
}

absl::StatusOr<BenchOptions> OptionsFromFlags() {
  BenchOptions options;
  const std::string op = absl::GetFlag(FLAGS_op), algo = absl::GetFlag(FLAGS_algo),
                    dtype = absl::GetFlag(FLAGS_dtype), redop = absl::GetFlag(FLAGS_redop),
                    min_bytes = absl::GetFlag(FLAGS_min_bytes),
                    max_bytes = absl::GetFlag(FLAGS_max_bytes);
  LOOM_ASSIGN_OR_RETURN(options.op, Flag("op", op, ParseCollectiveKind(op)));
  LOOM_ASSIGN_OR_RETURN(options.algorithm, Flag("algo", algo, ParseAlgorithm(algo)));
  LOOM_ASSIGN_OR_RETURN(options.dtype, Flag("dtype", dtype, ParseDType(dtype)));
  LOOM_ASSIGN_OR_RETURN(options.redop, Flag("redop", redop, ParseReduceOp(redop)));
  LOOM_ASSIGN_OR_RETURN(options.min_bytes, Flag("min_bytes", min_bytes, ParseByteSize(min_bytes)));
  LOOM_ASSIGN_OR_RETURN(options.max_bytes, Flag("max_bytes", max_bytes, ParseByteSize(max_bytes)));
  options.step_factor = absl::GetFlag(FLAGS_step_factor);
  options.iters = absl::GetFlag(FLAGS_iters);
  options.warmup = absl::GetFlag(FLAGS_warmup);
  absl::Duration min_time;
  if (!absl::ParseDuration(absl::GetFlag(FLAGS_min_time), &min_time)) {
    return absl::InvalidArgumentError(absl::StrCat("--min_time=", absl::GetFlag(FLAGS_min_time),
                                                   " is not a duration like 0.2s or 500ms"));
  }
  options.min_seconds = absl::ToDoubleSeconds(min_time);
  options.check = absl::GetFlag(FLAGS_check);
  options.in_place = absl::GetFlag(FLAGS_in_place);
  options.shared_buffers = absl::GetFlag(FLAGS_shared_buffers);
  options.root = absl::GetFlag(FLAGS_root);
  return options;
}

absl::StatusOr<CommunicatorOptions> CommunicatorOptionsFromFlags() {
  CommunicatorOptions options;
  if (!absl::ParseDuration(absl::GetFlag(FLAGS_timeout), &options.timeout)) {
    return absl::InvalidArgumentError(absl::StrCat("--timeout=", absl::GetFlag(FLAGS_timeout),
                                                   " is not a duration like 30s or 2m"));
  }
  if (options.timeout <= absl::ZeroDuration() || options.timeout == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout=", absl::GetFlag(FLAGS_timeout), " must be positive and finite"));
  }
  options.ranks_per_node = absl::GetFlag(FLAGS_ranks_per_node);
  if (options.ranks_per_node < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ranks_per_node=", options.ranks_per_node, " must be >= 0"));
  }
  options.deterministic = absl::GetFlag(FLAGS_deterministic);
  const std::string chunk = absl::GetFlag(FLAGS_chunk_bytes);
  LOOM_ASSIGN_OR_RETURN(options.chunk_bytes, Flag("chunk_bytes", chunk, ParseByteSize(chunk)));
  if (options.chunk_bytes == 0) {
    return absl::InvalidArgumentError("--chunk_bytes=0 must be at least 1 byte");
  }
  if (const std::string path = absl::GetFlag(FLAGS_cost_model); !path.empty()) {
    if (absl::GetFlag(FLAGS_calibrate)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--calibrate measures a cost model; --cost_model=", path, " loads one: give one of them"));
    }
    // A file the command line names that cannot be read or parsed is a usage error.
    absl::StatusOr<CostModel> model = CostModel::Load(path);
    if (!model.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--cost_model=", path, ": ", model.status().message()));
    }
    options.cost_model = *std::move(model);
  }
  return options;
}

// ApplyShmFlags sets --shm_copy, --shm_staging_bytes and --heartbeat_timeout in `shm`;
// InvalidArgument naming the flag otherwise.
absl::Status ApplyShmFlags(ShmOptions& shm) {
  const std::string copy = absl::GetFlag(FLAGS_shm_copy);
  if (copy == "auto") {
    shm.copy_mode = ShmOptions::CopyMode::kAuto;
  } else if (copy == "cma") {
    shm.copy_mode = ShmOptions::CopyMode::kCma;
  } else if (copy == "staged") {
    shm.copy_mode = ShmOptions::CopyMode::kStaged;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--shm_copy=", copy, " is not auto, cma or staged"));
  }
  const std::string staging = absl::GetFlag(FLAGS_shm_staging_bytes);
  LOOM_ASSIGN_OR_RETURN(shm.staging_bytes,
                        Flag("shm_staging_bytes", staging, ParseByteSize(staging)));
  if (shm.staging_bytes < kMinShmStagingBytes || shm.staging_bytes > kMaxShmStagingBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shm_staging_bytes=", staging, " (", shm.staging_bytes,
                     " bytes) is not in [", kMinShmStagingBytes, ", ", kMaxShmStagingBytes, "]"));
  }
  const std::string heartbeat = absl::GetFlag(FLAGS_heartbeat_timeout);
  if (!absl::ParseDuration(heartbeat, &shm.heartbeat_timeout)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--heartbeat_timeout=", heartbeat, " is not a duration"));
  }
  return ValidateHeartbeatTimeout(shm.heartbeat_timeout, "--heartbeat_timeout");
}

// ValidateFlags checks every flag of a run on `ranks` ranks over `transport`
// before any rank, process or mpirun starts.
absl::Status ValidateFlags(const std::string& transport, int ranks, const BenchOptions& bench,
                           const CommunicatorOptions& options) {
  if (transport != "inproc" && transport != "shm" && transport != "mpi" && transport != "gloo") {
    return absl::InvalidArgumentError(
        absl::StrCat("--transport=", transport, " is not inproc, shm, mpi or gloo"));
  }
  const int max_ranks = transport == "shm" ? kMaxShmRanks : kMaxRanks;
  if (ranks < 1 || ranks > max_ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ranks=", ranks, " is not in [1, ", max_ranks, "]",
                     transport == "shm" ? " (the shm transport's limit)" : ""));
  }
  const std::string inside = absl::GetFlag(FLAGS_node_transport);
  if (inside != "auto" && inside != "none" && inside != "shm") {
    return absl::InvalidArgumentError(
        absl::StrCat("--node_transport=", inside, " is not auto, none or shm"));
  }
  if (inside == "shm" && transport != "mpi" && transport != "gloo") {
    return absl::InvalidArgumentError(
        absl::StrCat("--node_transport=shm is for --transport=mpi or gloo, not ", transport));
  }
  if (!absl::GetFlag(FLAGS_route_by_host) && (transport != "gloo" || inside == "none")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--route_by_host=false is for --transport=gloo with its hosts found (--node_transport="
        "auto or shm), not --transport=", transport, " --node_transport=", inside));
  }
  // (Also the first read of these two, here on the main thread: absl fills a flag's
  // default at its first read, and RunRank's threads reading it first race.)
  if (!absl::GetFlag(FLAGS_cost_model_cache).empty() && !absl::GetFlag(FLAGS_auto_calibrate)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--cost_model_cache=", absl::GetFlag(FLAGS_cost_model_cache),
        " is where --auto_calibrate keeps its models; it is off (--noauto_calibrate)"));
  }
  if (absl::GetFlag(FLAGS_cost_model_calibrations) < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--cost_model_calibrations=",
                                                   absl::GetFlag(FLAGS_cost_model_calibrations),
                                                   ": the cache merges 1 calibration or more"));
  }
  if (!absl::GetFlag(FLAGS_save_cost_model).empty() && !absl::GetFlag(FLAGS_calibrate)) {
    return absl::InvalidArgumentError(absl::StrCat("--save_cost_model=",
                                                   absl::GetFlag(FLAGS_save_cost_model),
                                                   " saves what --calibrate measures; add --calibrate"));
  }
  ShmOptions shm;
  LOOM_RETURN_IF_ERROR(ApplyShmFlags(shm));
  // Under an mpirun the user started, MPI decides the world size and the hosts.
  const bool external_mpirun = transport == "mpi" && LaunchedByMpirun();
  const int known_ranks = external_mpirun ? 0 : ranks;
  int per_host = ranks;
  if (external_mpirun) {
    per_host = 1;
  } else if (transport == "mpi" && options.ranks_per_node > 0) {
    per_host = std::min(options.ranks_per_node, ranks);
  }
  return ValidateBenchOptions(bench, known_ranks, per_host);
}

// RunRank benchmarks on one rank's transport; rank 0 prints.
absl::Status RunRank(std::shared_ptr<Transport> shared, const BenchOptions& bench,
                     CommunicatorOptions options, const std::string& transport_name) {
  std::string calibrated;
  if (absl::GetFlag(FLAGS_calibrate)) {
    // Measured on a communicator of its own; the benchmark's then uses the model.
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> probe, Communicator::Create(shared, options));
    // Curves over the benchmark's own range, in steps of 4.
    CalibrationOptions calibration;
    for (size_t bytes = std::max<size_t>(bench.min_bytes, 1); bytes < bench.max_bytes; bytes *= 4) {
      calibration.curve_sizes.push_back(bytes);
    }
    calibration.curve_sizes.push_back(std::max<size_t>(bench.max_bytes, 1));
    LOOM_ASSIGN_OR_RETURN(options.cost_model, Calibrate(*probe, calibration));
    const std::string path = absl::GetFlag(FLAGS_save_cost_model);
    if (probe->rank() == 0 && !path.empty()) {
      LOOM_RETURN_IF_ERROR(options.cost_model.Save(path));
    }
    for (absl::string_view line : absl::StrSplit(options.cost_model.Serialize(), '\n', absl::SkipEmpty())) {
      absl::StrAppend(&calibrated, absl::StartsWith(line, "#") ? "" : "# ", line, "\n");
    }
  }
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, Communicator::Create(shared, options));
  if (bench.algorithm == Algorithm::kAuto && absl::GetFlag(FLAGS_auto_calibrate) &&
      !absl::GetFlag(FLAGS_calibrate) && absl::GetFlag(FLAGS_cost_model).empty()) {
    AutoCalibrationOptions automatic;
    automatic.cache_dir = absl::GetFlag(FLAGS_cost_model_cache);
    automatic.calibrations_merged = absl::GetFlag(FLAGS_cost_model_calibrations);
    LOOM_ASSIGN_OR_RETURN(const AutoCalibration calibration, AutoCalibrate(*comm, automatic));
    absl::StrAppend(&calibrated, "# ", calibration.ToString(), "\n");
  }
  LOOM_ASSIGN_OR_RETURN(std::vector<BenchRow> rows, RunCollectiveBench(*comm, bench));
  if (comm->rank() == 0) {
    if (!absl::GetFlag(FLAGS_json)) std::cout << calibrated;
    if (absl::GetFlag(FLAGS_json)) {
      std::cout << FormatBenchJson(rows, comm->size(), bench);
    } else {
      std::cout << "# transport " << transport_name << "\n" << FormatBenchTable(rows, comm->size(), bench);
    }
    std::cout.flush();
  }
  return absl::OkStatus();
}

absl::Status RunInproc(int ranks, const BenchOptions& bench, const CommunicatorOptions& options) {
  LOOM_ASSIGN_OR_RETURN(std::shared_ptr<InprocGroup> group, InprocGroup::Create(ranks));
  std::vector<absl::Status> results(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<Transport>> endpoint = group->Endpoint(r);
      results[r] = endpoint.ok() ? RunRank(std::move(*endpoint), bench, options, "inproc")
                                 : endpoint.status();
    });
  }
  for (auto& thread : threads) thread.join();
  for (int r = 0; r < ranks; ++r) {
    if (!results[r].ok()) return absl::Status(results[r].code(), absl::StrCat("rank ", r, ": ", results[r].message()));
  }
  return absl::OkStatus();
}

// RunMpiRank benchmarks this process's rank of the mpirun job over MPI_COMM_WORLD;
// the node layout comes from MPI (or --ranks_per_node, which emulates nodes). Ranks
// not in blocks by host (--map-by node) are numbered host by host (node_of_rank).
absl::Status RunMpiRank(const BenchOptions& bench, CommunicatorOptions options) {
  std::string numbered;
  absl::StatusOr<int> per_node = MpiRanksPerNode(MPI_COMM_WORLD, options.ranks_per_node);
  if (per_node.ok()) {
    options.ranks_per_node = *per_node;
  } else if (absl::IsFailedPrecondition(per_node.status())) {
    LOOM_ASSIGN_OR_RETURN(options.node_of_rank, MpiNodeOfRank(MPI_COMM_WORLD));
    numbered = ", numbered by host";
  } else {
    return per_node.status();
  }
  // --heartbeat_timeout, checked before mpirun started (ValidateFlags).
  ShmOptions shm;
  LOOM_RETURN_IF_ERROR(ApplyShmFlags(shm));
  MpiTransportOptions mpi;
  mpi.heartbeat_timeout = shm.heartbeat_timeout;
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport,
                        ConnectMpiTransport(MPI_COMM_WORLD, mpi));
  const std::string inside = absl::GetFlag(FLAGS_node_transport);
  if (inside == "shm") {
    LOOM_ASSIGN_OR_RETURN(options.node_transport,
                          options.node_of_rank.empty()
                              ? ConnectNodeShmTransport(MPI_COMM_WORLD, options.ranks_per_node, shm)
                              : ConnectNodeShmTransport(MPI_COMM_WORLD, options.node_of_rank, shm));
    return RunRank(std::move(transport), bench, options,
                   absl::StrCat("mpi, shm inside nodes", numbered));
  }
  if (inside != "none" && inside != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("--node_transport=", inside, " is not auto, none or shm"));
  }
  return RunRank(std::move(transport), bench, options, absl::StrCat("mpi", numbered));
}

// RunMpi runs this rank inside an MPI session. Only a clean run finalizes: a rank that
// failed names itself and its cause and aborts the job (MPI_Finalize would wait for
// peers that still wait on it).
absl::Status RunMpi(int argc, char** argv, const BenchOptions& bench, CommunicatorOptions options) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<MpiSession> session, MpiSession::Start(&argc, &argv));
  const absl::Status status = RunMpiRank(bench, std::move(options));
  if (!status.ok()) session->AbortJob("collective_bench", status, 1);
  return status;
}

// RunGloo benchmarks this process's rank (from the launcher's environment) over the
// gloo transport, meeting the other ranks in --gloo_store_dir.
absl::Status RunGloo(const BenchOptions& bench, const CommunicatorOptions& options) {
  LOOM_ASSIGN_OR_RETURN(ShmOptions process, ShmOptionsFromEnvironment());
  // --heartbeat_timeout, checked before the ranks started (ValidateFlags).
  LOOM_RETURN_IF_ERROR(ApplyShmFlags(process));
  GlooOptions gloo;
  gloo.rank = process.rank;
  gloo.size = process.size;
  gloo.world_rank = process.rank;
  gloo.heartbeat_timeout = process.heartbeat_timeout;
  gloo.interface = absl::GetFlag(FLAGS_gloo_interface);
  gloo.store_dir = absl::GetFlag(FLAGS_gloo_store_dir);
  if (gloo.store_dir.empty()) {
    const char* job_dir = std::getenv("LOOM_JOB_DIR");
    if (job_dir == nullptr) {
      return absl::InvalidArgumentError("--gloo_store_dir is empty and LOOM_JOB_DIR is not set");
    }
    gloo.store_dir = absl::StrCat(job_dir, "/gloo");
    if (mkdir(gloo.store_dir.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::ErrnoToStatus(errno, absl::StrCat("mkdir ", gloo.store_dir));
    }
  }
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, ConnectGlooTransport(gloo));
  const std::string inside = absl::GetFlag(FLAGS_node_transport);
  if (options.ranks_per_node > 0 || inside == "none") {
    return RunRank(std::move(transport), bench, options, "gloo");
  }
  // Gloo knows nothing of hosts: the ranks find which of them share one by their host
  // names, and the Communicator numbers them host by host (node_of_rank, whatever
  // order they were launched in). Where each host holds the same number k > 1 of
  // ranks, those connect Loom's shm transport among themselves, so that direct, the
  // trees and hierarchical run by hosts with their intra-host phases in shared
  // memory (as over MPI, RunMpiRank). Messages between two ranks of one host take
  // shm for every other algorithm too (a routed transport, unless
  // --route_by_host=false), whatever the layout.
  std::shared_ptr<Transport> shared = std::move(transport);
  CommunicatorOptions with_nodes = options;
  std::string name = "gloo";
  {
    LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> probe, Communicator::Create(shared, options));
    LOOM_ASSIGN_OR_RETURN(const NodeLayout layout, FindNodeLayout(*probe));
    const bool nodes = layout.ranks_per_host > 1 && layout.ranks_per_host <= kMaxShmRanks;
    if (!nodes && inside == "shm") {
      return absl::FailedPreconditionError(absl::StrCat(
          "--node_transport=shm: the ranks' hosts (", absl::StrJoin(layout.host_names, ","),
          ") are not 2 or more hosts of the same number (2..", kMaxShmRanks, ") of ranks"));
    }
    // The ranks of this host, in rank order, and whether any host holds two or more
    // (decided from every host's count, so that every rank decides alike).
    std::vector<int> on_host;
    std::map<std::string, int> per_host;
    for (int r = 0; r < process.size; ++r) {
      if (layout.host_names[r] == layout.host_names[process.rank]) on_host.push_back(r);
      ++per_host[layout.host_names[r]];
    }
    int most_on_a_host = 0;
    for (const auto& [host_name, count] : per_host) most_on_a_host = std::max(most_on_a_host, count);
    // Numbered host by host where a host holds two or more: the ring then crosses each
    // host's link once each way (one rank a host leaves nothing to number).
    if (layout.hosts > 1 && most_on_a_host > 1) with_nodes.node_of_rank = layout.node_of_rank;
    const bool renumbered =
        !std::is_sorted(layout.node_of_rank.begin(), layout.node_of_rank.end());
    const std::string numbered = renumbered ? ", numbered by host" : "";
    const bool shared_hosts =
        layout.hosts > 1 && most_on_a_host > 1 && most_on_a_host <= kMaxShmRanks;
    const bool route = absl::GetFlag(FLAGS_route_by_host) && shared_hosts;
    if (!nodes && !route) {
      return RunRank(std::move(shared), bench, with_nodes, absl::StrCat("gloo", numbered));
    }
    // One shm job per host and run: rank 0's pid and clock, shared, name it (with the
    // host's first rank).
    int64_t nonce[1] = {probe->rank() == 0
                            ? (static_cast<int64_t>(getpid()) << 32) ^ absl::ToUnixNanos(absl::Now())
                            : 0};
    LOOM_RETURN_IF_ERROR(probe->Broadcast(absl::MakeSpan(nonce), /*root=*/0));
    ShmOptions host = process;
    host.job_id = absl::StrCat(process.job_id.substr(0, 64), ".h", on_host[0], ".",
                               absl::Hex(static_cast<uint64_t>(nonce[0])));
    host.rank = static_cast<int>(std::find(on_host.begin(), on_host.end(), process.rank) -
                                 on_host.begin());
    host.size = static_cast<int>(on_host.size());
    host.world_rank = process.rank;
    host.host_ranks = host.size;
    // Ranks with one host name may still not share /dev/shm (containers on one machine
    // with the host's name): with auto, every rank falls back to plain gloo unless all
    // of them connected.
    if (inside == "auto") host.connect_timeout = std::min(host.connect_timeout, absl::Seconds(10));
    // ConnectOnHost: this host's shm job `suffix`, or its error.
    auto connect_on_host = [&](const char* suffix) {
      ShmOptions job = host;
      absl::StrAppend(&job.job_id, suffix);
      return ConnectShmTransport(job);
    };
    // The node transport's ranks: each host's in rank order, the place the
    // Communicator gives them among their node's (CommunicatorOptions::node_transport).
    absl::StatusOr<std::unique_ptr<Transport>> node = nodes
        ? connect_on_host(".n") : absl::StatusOr<std::unique_ptr<Transport>>(nullptr);
    absl::StatusOr<std::unique_ptr<Transport>> near = route && node.ok()
        ? connect_on_host(".r") : absl::StatusOr<std::unique_ptr<Transport>>(nullptr);
    const absl::Status connected = node.ok() ? near.status() : node.status();
    if (inside == "shm" && !connected.ok()) return connected;
    int32_t all_connected[1] = {connected.ok() ? 1 : 0};
    LOOM_RETURN_IF_ERROR(probe->AllReduce(absl::MakeSpan(all_connected), ReduceOp::kMin));
    if (all_connected[0] == 0) {
      // Host names that do not share /dev/shm may not share a host either: node-blind.
      with_nodes.node_of_rank.clear();
      name = absl::StrCat("gloo (node-blind: shm inside a host did not connect",
                          connected.ok() ? " on every rank" : absl::StrCat(": ", connected.message()),
                          ")");
    } else {
      if (nodes) {
        with_nodes.node_transport = *std::move(node);
        name = absl::StrCat("gloo between ", layout.hosts, " hosts, shm inside each (",
                            layout.ranks_per_host, " ranks a host", numbered, ")");
      } else {
        name = absl::StrCat("gloo between ", layout.hosts,
                            " hosts (of unequal sizes", numbered, "), shm inside each");
      }
      if (route) {
        // The node transport above belongs to the Communicator's node-aware phases;
        // this second job carries every other message between two ranks of a host.
        LOOM_ASSIGN_OR_RETURN(shared, MakeRoutedTransport(shared, *std::move(near), on_host));
        absl::StrAppend(&name, ", routed");
      }
    }
  }
  return RunRank(std::move(shared), bench, std::move(with_nodes), name);
}

// LaunchSelf re-runs this binary as `ranks` processes with the launcher's rendezvous
// environment (and `extra` arguments) and returns the job's exit code.
absl::StatusOr<int> LaunchSelf(int ranks, int argc, char** argv,
                               const std::vector<std::string>& extra = {}) {
  LaunchOptions launch;
  launch.num_ranks = ranks;
  launch.argv.push_back("/proc/self/exe");
  for (int i = 1; i < argc; ++i) launch.argv.push_back(argv[i]);
  for (const std::string& arg : extra) launch.argv.push_back(arg);
  launch.timeout = absl::Minutes(30);
  LOOM_ASSIGN_OR_RETURN(LaunchResult result, Launch(launch));
  if (result.ExitCode() != 0) std::cerr << Describe(result);
  return result.ExitCode();
}

constexpr char kTool[] = "collective_bench";

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "nccl-tests-style benchmark of Loom's collectives.\n"
      "  collective_bench --transport=shm --ranks=2 --op=all_reduce --min_bytes=4K --max_bytes=64M --check");
  const absl::StatusOr<std::vector<char*>> args = cli::ParseFlags(argc, argv);
  if (!args.ok()) return cli::Fail(kTool, args.status());
  if (absl::Status s = cli::CheckNoArguments(*args); !s.ok()) return cli::Fail(kTool, s);
  ReportPeerFailuresAsTheyHappen();
  absl::StatusOr<BenchOptions> bench = OptionsFromFlags();
  if (!bench.ok()) return cli::Fail(kTool, bench.status());
  absl::StatusOr<CommunicatorOptions> options = CommunicatorOptionsFromFlags();
  if (!options.ok()) return cli::Fail(kTool, options.status());
  const int ranks = absl::GetFlag(FLAGS_ranks);
  const std::string transport = absl::GetFlag(FLAGS_transport);
  if (absl::Status s = ValidateFlags(transport, ranks, *bench, *options); !s.ok()) {
    return cli::Fail(kTool, s);
  }
  absl::Status status;
  if (transport == "inproc") {
    status = RunInproc(ranks, *bench, *options);
  } else if (transport == "shm") {
    if (std::getenv("LOOM_RANK") == nullptr) {
      absl::StatusOr<int> code = LaunchSelf(ranks, argc, argv);
      if (!code.ok()) return cli::Fail(kTool, code.status());
      return *code;
    }
    absl::StatusOr<ShmOptions> shm = ShmOptionsFromEnvironment();
    if (shm.ok()) {
      if (absl::Status s = ApplyShmFlags(*shm); !s.ok()) shm = s;
    }
    absl::StatusOr<std::unique_ptr<Transport>> endpoint =
        shm.ok() ? ConnectShmTransport(*shm) : absl::StatusOr<std::unique_ptr<Transport>>(shm.status());
    status = endpoint.ok() ? RunRank(std::move(*endpoint), *bench, *options, "shm") : endpoint.status();
  } else if (transport == "mpi") {
    if (!LaunchedByMpirun()) return RunUnderMpirun(ranks, argc, argv);
    status = RunMpi(argc, argv, *bench, *options);
  } else if (transport == "gloo") {
    if (std::getenv("LOOM_RANK") == nullptr) {
      // The ranks meet in gloo/ of the job directory the launcher makes and removes.
      absl::StatusOr<int> code = LaunchSelf(ranks, argc, argv);
      if (!code.ok()) return cli::Fail(kTool, code.status());
      return *code;
    }
    status = RunGloo(*bench, *options);
  }
  if (!status.ok()) {
    // A rank of a launched job tells the launcher why, and whether a peer caused it.
    ReportRankFailure(status).IgnoreError();
    return cli::Fail(kTool, status);
  }
  return 0;
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) { return loom::Main(argc, argv); }
