// train: Loom's end-to-end training job (tools/training/train_job.h). Trains a small GPT
// decoder on a seeded Markov chain over dp x pp x tp thread ranks with ZeRO-3 and
// CPU-offloaded AdamW by default, prints one line per step and a summary, and
// compares the result with the same training on one rank.
//
//   ./bazelw run //tools:train
//   ./bazelw run //tools:train -- --dp=4 --tp=1 --pp=2 --zero=0 --steps=20
//   ./bazelw run //tools:train -- --transport=shm    # 8 processes, shared memory
//   ./bazelw run //tools:train -- --transport=mpi    # 8 processes of an mpirun job
//
// With --transport=shm the ranks are processes: run directly, train starts them
// itself (through tools/launcher, as //tools:launch does) as copies of this binary
// with the same flags; a process that finds LOOM_JOB_ID in its environment is one
// rank. World rank 0 prints; a failing rank stops the job and is named.
// With --transport=mpi the ranks are the processes of an Open MPI job: under mpirun
// (`mpirun -np 8 train --transport=mpi`, across hosts too) each process is one rank,
// numbered host by host (tools/training/job_hosts.h: MPI's order when mpirun placed
// the ranks in blocks); run directly, train re-runs itself under a one-host mpirun.
//
// The steps, each in tools/training: flags -> TrainCommand (train_flags.h, which
// validates all of it), paths checked (train_paths.h), ranks launched or joined
// (train_launch.h), the run (train_job.h), its lines and files (step_log.h,
// train_report.h, summary_json.h).
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "collectives/transport/heartbeat.h"
#include "collectives/transport/mpi/mpi_transport.h"
#include "collectives/transport/mpi/mpirun.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/fma_peak.h"
#include "core/status_macros.h"
#include "tensor_parallel/layers/gemm.h"
#include "tools/cli.h"
#include "tools/internal/janitor.h"
#include "tools/job_files.h"
#include "tools/launcher.h"
#include "tools/training/malloc_policy.h"
#include "tools/training/compute_report.h"
#include "tools/training/reference.h"
#include "tools/training/step_log.h"
#include "tools/training/train_flags.h"
#include "tools/training/train_job.h"
#include "tools/training/train_launch.h"
#include "tools/training/train_paths.h"
#include "tools/training/train_report.h"

namespace loom {
namespace {

// RanksOnHost: the ranks sharing this host's CPUs: all of them, except under an
// mpirun the user started across hosts, which says how many it placed here.
int RanksOnHost(const TrainCommand& command) {
  int ranks = JobWorldSize(command.options);
  if (command.launch.transport == RankTransport::kMpi && LaunchedByMpirun()) {
    if (const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"); local != nullptr) {
      int parsed = 0;
      if (absl::SimpleAtoi(local, &parsed) && parsed >= 1) ranks = parsed;
    }
  }
  return ranks;
}

// RunThreads trains on thread ranks; with state on disk, a job directory of this
// process's own and a janitor that removes it (and the offload directories) even
// if this process is killed.
absl::StatusOr<TrainSummary> RunThreads(const TrainCommand& command, StepLog& log) {
  auto record = [&](const StepReport& r) { log.Record(r); };
  if (!UsesDisk(command.options)) return RunTrainJob(command.options, record);
  const std::string job_id = GenerateJobId();
  LOOM_ASSIGN_OR_RETURN(const std::string job_dir, CreateJobDirectory(job_id));
  absl::StatusOr<Janitor> janitor = StartJanitor(job_dir, "");
  if (!janitor.ok()) {
    RemoveJobFiles(job_id).IgnoreError();
    return janitor.status();
  }
  setenv("LOOM_JOB_DIR", job_dir.c_str(), 1);
  absl::StatusOr<TrainSummary> summary = RunTrainJob(command.options, record);
  janitor->Finish();  // removes the job directory and what was registered in it
  unsetenv("LOOM_JOB_DIR");
  return summary;
}

// Run holds an MPI rank's session in `*mpi` so that main can end the job on a
// failure: MPI_Finalize would wait for peers that still wait on this rank.
absl::Status Run(int argc, char** argv, int* exit_code, std::unique_ptr<MpiSession>* mpi) {
  // Every flag is checked here, before any rank, process or mpirun starts.
  LOOM_ASSIGN_OR_RETURN(const TrainCommand command, TrainCommandFromFlags(argc, argv));
  if (!command.plan_line.empty()) std::cout << command.plan_line << std::endl;
  const TrainJobOptions& o = command.options;
  const RankTransport transport = command.launch.transport;
  const int world = JobWorldSize(o);
  const int ranks_on_host = RanksOnHost(command);
  LOOM_ASSIGN_OR_RETURN(const int threads_per_rank,
                        ResolveThreadsPerRank(o.threads_per_rank, ranks_on_host, UsableCpus()));
  const bool shm_launcher =
      transport == RankTransport::kShm && std::getenv("LOOM_JOB_ID") == nullptr;
  const bool mpi_launcher = transport == RankTransport::kMpi && !LaunchedByMpirun();
  if (transport == RankTransport::kThreads || shm_launcher || mpi_launcher) {
    LOOM_RETURN_IF_ERROR(CheckTrainPaths(command));
  }
  if (shm_launcher) {
    *exit_code = LaunchTrainRanks(command, argc, argv);
    return absl::OkStatus();
  }
  if (mpi_launcher) {
    *exit_code = RunUnderMpirun(world, argc, argv);  // the job's exit code
    return absl::OkStatus();
  }
  // A process that is one rank: its place in the job.
  ProcessRank me{0, JobHosts::OneHost(world), nullptr};
  if (transport == RankTransport::kShm) {
    LOOM_ASSIGN_OR_RETURN(me, JoinShmJob(command.launch));
  } else if (transport == RankTransport::kMpi) {
    LOOM_ASSIGN_OR_RETURN(*mpi, MpiSession::Start(&argc, &argv));
    LOOM_ASSIGN_OR_RETURN(me, JoinMpiJob(command.launch, **mpi));
  }
  const bool prints = me.rank == 0;
  LOOM_RETURN_IF_ERROR(SetGemmThreads(threads_per_rank));
  // The MFU's denominator, measured before the ranks start (on an idle CPU).
  MeasuredPeaks peaks;
  if (prints) {
    LOOM_ASSIGN_OR_RETURN(
        peaks, MeasurePeaks(o.dtype == DType::kBF16 ? GemmPrecision::kBf16 : GemmPrecision::kF32,
                            /*products_on_cpu=*/o.device == ComputeDevice::kCpu));
  }
  // Under an mpirun the user started, rank 0 is the first to see the flags.
  if (prints && me.connect) LOOM_RETURN_IF_ERROR(CheckTrainPaths(command));
  if (prints) LOOM_RETURN_IF_ERROR(PrintTrainHeader(command, world, std::cout));
  LOOM_ASSIGN_OR_RETURN(StepLog log, StepLog::Open(command, prints, std::cout));
  TrainSummary summary;
  if (me.connect) {
    LOOM_ASSIGN_OR_RETURN(
        std::optional<TrainSummary> mine,
        RunTrainJobProcess(o, me.rank, me.hosts, RankTransportName(transport), me.connect,
                           [&](const StepReport& r) { log.Record(r); }));
    if (!mine.has_value()) return absl::OkStatus();  // not rank 0: nothing to report
    summary = std::move(*mine);
  } else {
    LOOM_ASSIGN_OR_RETURN(summary, RunThreads(command, log));
  }
  const MfuReport mfu = JobMfu(
      o, summary, peaks,
      CoresUsed(ranks_on_host, threads_per_rank, UsableCpus(), me.hosts.hosts()),
      threads_per_rank);
  PrintTrainSummary(command, summary, mfu, std::cout);
  std::optional<ReferenceComparison> reference;
  if (command.outputs.compare_reference) {
    LOOM_ASSIGN_OR_RETURN(reference, CompareWithReference(o, summary));
    PrintReference(*reference, std::cout);
  }
  LOOM_RETURN_IF_ERROR(log.status());
  if (!command.outputs.metrics.empty()) std::cout << "metrics: " << command.outputs.metrics << "\n";
  LOOM_RETURN_IF_ERROR(log.WritePlot(command, summary));
  return WriteTrainFiles(command, summary, mfu, reference, std::cout);
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  // Before any thread starts: every step's temporaries reuse the last step's pages.
  loom::ReuseFreedMemory();
  absl::SetProgramUsageMessage(loom::TrainUsage());
  const absl::StatusOr<std::vector<char*>> args = loom::cli::ParseFlags(argc, argv);
  if (!args.ok()) return loom::cli::Fail("train", args.status());
  if (absl::Status s = loom::cli::CheckNoArguments(*args); !s.ok()) {
    return loom::cli::Fail("train", s);
  }
  loom::ReportPeerFailuresAsTheyHappen();
  int exit_code = 0;
  std::unique_ptr<loom::MpiSession> mpi;
  const absl::Status status = loom::Run(argc, argv, &exit_code, &mpi);
  if (!status.ok()) {
    // A rank of a launched job tells the launcher why, and whether a peer caused it.
    loom::ReportRankFailure(status).IgnoreError();
    // An MPI rank names itself and its cause, then aborts the whole job.
    if (mpi != nullptr) mpi->AbortJob("train", status, loom::cli::ExitCode(status));
    exit_code = loom::cli::Fail("train", status);
  }
  mpi.reset();  // MPI_Finalize: a clean run only
  return exit_code;
}
