// collective_bench: nccl-tests-style collective benchmark over Loom's transports.
//
//   collective_bench --transport=inproc --ranks=8 --op=all_reduce --algo=ring --check
//   collective_bench --transport=shm --ranks=2 --min_bytes=4K --max_bytes=64M
//
// With --transport=shm and no LOOM_RANK in the environment it starts --ranks copies
// of itself through the launcher (as //tools:launch would), each connecting to the
// shared-memory transport; rank 0 prints the table.
#include <cerrno>
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
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "collectives/communicator.h"
#include "collectives/cost_model.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "collectives/transport/gloo/gloo_transport.h"
#include "collectives/transport/mpi/mpi_transport.h"
#include "collectives/transport/mpi/mpirun.h"
#include "collectives/transport/mpi/node_shm.h"
#include "collectives/transport/shm/shm_transport.h"
#include "core/status_macros.h"
#include "tools/collective_bench.h"
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
ABSL_FLAG(int, warmup, 5, "untimed iterations per size");
ABSL_FLAG(bool, check, false, "seed inputs and count wrong result elements");
ABSL_FLAG(bool, in_place, false, "run the collectives in place");
ABSL_FLAG(bool, shared_buffers, false,
          "inputs and outputs in SharedBuffers (shm peers map them instead of using CMA)");
ABSL_FLAG(int, root, 0, "root of broadcast and reduce");
ABSL_FLAG(int, ranks_per_node, 0, "node layout for hierarchical (0: one node)");
ABSL_FLAG(std::string, node_transport, "none",
          "mpi: what hierarchical's intra-node phases run over: none (MPI, like the rest) or "
          "shm (Loom's shm transport among the ranks of each node)");
ABSL_FLAG(std::string, chunk_bytes, "256K", "pipelining chunk of the ring and trees");
ABSL_FLAG(bool, deterministic, false, "rank-order (bitwise reproducible) reductions");
ABSL_FLAG(std::string, cost_model, "", "cost model file for --algo=auto (default constants otherwise)");
ABSL_FLAG(bool, json, false, "print JSON instead of the table");
// A string, parsed with absl::ParseDuration: absl's Duration flags read through a
// sequence lock whose fences ThreadSanitizer builds reject.
ABSL_FLAG(std::string, shm_copy, "auto",
          "shm: how messages above the eager size travel: auto, cma or staged");
ABSL_FLAG(std::string, shm_staging_bytes, "1M", "shm: staging ring bytes per ordered pair of ranks");
ABSL_FLAG(std::string, timeout, "2m", "per-call timeout (e.g. 30s, 2m)");
ABSL_FLAG(std::string, gloo_store_dir, "",
          "gloo: the rendezvous directory (set by the bench for the processes it starts)");

namespace loom {
namespace {

absl::StatusOr<BenchOptions> OptionsFromFlags() {
  BenchOptions options;
  LOOM_ASSIGN_OR_RETURN(options.op, ParseCollectiveKind(absl::GetFlag(FLAGS_op)));
  LOOM_ASSIGN_OR_RETURN(options.algorithm, ParseAlgorithm(absl::GetFlag(FLAGS_algo)));
  LOOM_ASSIGN_OR_RETURN(options.dtype, ParseDType(absl::GetFlag(FLAGS_dtype)));
  LOOM_ASSIGN_OR_RETURN(options.redop, ParseReduceOp(absl::GetFlag(FLAGS_redop)));
  LOOM_ASSIGN_OR_RETURN(options.min_bytes, ParseByteSize(absl::GetFlag(FLAGS_min_bytes)));
  LOOM_ASSIGN_OR_RETURN(options.max_bytes, ParseByteSize(absl::GetFlag(FLAGS_max_bytes)));
  options.step_factor = absl::GetFlag(FLAGS_step_factor);
  options.iters = absl::GetFlag(FLAGS_iters);
  options.warmup = absl::GetFlag(FLAGS_warmup);
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
  options.ranks_per_node = absl::GetFlag(FLAGS_ranks_per_node);
  options.deterministic = absl::GetFlag(FLAGS_deterministic);
  LOOM_ASSIGN_OR_RETURN(options.chunk_bytes, ParseByteSize(absl::GetFlag(FLAGS_chunk_bytes)));
  if (!absl::GetFlag(FLAGS_cost_model).empty()) {
    LOOM_ASSIGN_OR_RETURN(options.cost_model, CostModel::Load(absl::GetFlag(FLAGS_cost_model)));
  }
  return options;
}

// RunRank benchmarks on one rank's transport; rank 0 prints.
absl::Status RunRank(std::unique_ptr<Transport> transport, const BenchOptions& bench,
                     const CommunicatorOptions& options, const std::string& transport_name) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm,
                        Communicator::Create(std::move(transport), options));
  LOOM_ASSIGN_OR_RETURN(std::vector<BenchRow> rows, RunCollectiveBench(*comm, bench));
  if (comm->rank() == 0) {
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
// the node layout comes from MPI (or --ranks_per_node, which emulates nodes).
absl::Status RunMpiRank(const BenchOptions& bench, CommunicatorOptions options) {
  LOOM_ASSIGN_OR_RETURN(options.ranks_per_node,
                        MpiRanksPerNode(MPI_COMM_WORLD, options.ranks_per_node));
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, ConnectMpiTransport(MPI_COMM_WORLD));
  const std::string inside = absl::GetFlag(FLAGS_node_transport);
  if (inside == "shm") {
    LOOM_ASSIGN_OR_RETURN(options.node_transport,
                          ConnectNodeShmTransport(MPI_COMM_WORLD, options.ranks_per_node));
    return RunRank(std::move(transport), bench, options, "mpi, shm inside nodes");
  }
  if (inside != "none") {
    return absl::InvalidArgumentError(
        absl::StrCat("--node_transport=", inside, " is not none or shm"));
  }
  return RunRank(std::move(transport), bench, options, "mpi");
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
  GlooOptions gloo;
  gloo.rank = process.rank;
  gloo.size = process.size;
  gloo.store_dir = absl::GetFlag(FLAGS_gloo_store_dir);
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport, ConnectGlooTransport(gloo));
  return RunRank(std::move(transport), bench, options, "gloo");
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

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "nccl-tests-style benchmark of Loom's collectives.\n"
      "  collective_bench --transport=shm --ranks=2 --op=all_reduce --min_bytes=4K --max_bytes=64M --check");
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<BenchOptions> bench = OptionsFromFlags();
  absl::StatusOr<CommunicatorOptions> options = CommunicatorOptionsFromFlags();
  const int ranks = absl::GetFlag(FLAGS_ranks);
  absl::Status status = bench.ok() ? options.status() : bench.status();
  if (status.ok() && (ranks < 1 || ranks > 1024)) {
    status = absl::InvalidArgumentError(absl::StrCat("--ranks=", ranks, " is not in [1, 1024]"));
  }
  if (!status.ok()) {
    std::cerr << "collective_bench: " << status << "\n";
    return 2;
  }
  const std::string transport = absl::GetFlag(FLAGS_transport);
  if (transport == "inproc") {
    status = RunInproc(ranks, *bench, *options);
  } else if (transport == "shm") {
    if (std::getenv("LOOM_RANK") == nullptr) {
      absl::StatusOr<int> code = LaunchSelf(ranks, argc, argv);
      if (!code.ok()) {
        std::cerr << "collective_bench: " << code.status() << "\n";
        return 1;
      }
      return *code;
    }
    absl::StatusOr<ShmOptions> shm = ShmOptionsFromEnvironment();
    if (shm.ok()) {
      const std::string copy = absl::GetFlag(FLAGS_shm_copy);
      absl::StatusOr<size_t> staging = ParseByteSize(absl::GetFlag(FLAGS_shm_staging_bytes));
      if (copy == "auto") {
        shm->copy_mode = ShmOptions::CopyMode::kAuto;
      } else if (copy == "cma") {
        shm->copy_mode = ShmOptions::CopyMode::kCma;
      } else if (copy == "staged") {
        shm->copy_mode = ShmOptions::CopyMode::kStaged;
      } else {
        shm = absl::InvalidArgumentError(
            absl::StrCat("--shm_copy=", copy, " is not auto, cma or staged"));
      }
      if (!staging.ok()) {
        shm = staging.status();
      } else if (shm.ok()) {
        shm->staging_bytes = *staging;
      }
    }
    absl::StatusOr<std::unique_ptr<Transport>> endpoint =
        shm.ok() ? ConnectShmTransport(*shm) : absl::StatusOr<std::unique_ptr<Transport>>(shm.status());
    status = endpoint.ok() ? RunRank(std::move(*endpoint), *bench, *options, "shm") : endpoint.status();
  } else if (transport == "mpi") {
    if (!LaunchedByMpirun()) return RunUnderMpirun(ranks, argc, argv);
    status = RunMpi(argc, argv, *bench, *options);
  } else if (transport == "gloo") {
    if (std::getenv("LOOM_RANK") == nullptr) {
      // The job's gloo FileStore lives in a directory of its own, removed afterwards.
      char dir[] = "/tmp/loom-gloo-XXXXXX";
      if (mkdtemp(dir) == nullptr) {
        std::cerr << "collective_bench: mkdtemp(/tmp/loom-gloo-XXXXXX): " << std::strerror(errno)
                  << "\n";
        return 1;
      }
      absl::StatusOr<int> code =
          LaunchSelf(ranks, argc, argv, {absl::StrCat("--gloo_store_dir=", dir)});
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
      if (!code.ok()) {
        std::cerr << "collective_bench: " << code.status() << "\n";
        return 1;
      }
      return *code;
    }
    status = RunGloo(*bench, *options);
  } else {
    status = absl::InvalidArgumentError(
        absl::StrCat("--transport=", transport, " is not inproc, shm, mpi or gloo"));
  }
  if (!status.ok()) {
    std::cerr << "collective_bench: " << status << "\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) { return loom::Main(argc, argv); }
