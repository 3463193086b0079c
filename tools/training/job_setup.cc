#include "tools/training/job_setup.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/posix.h"
#include "core/status_macros.h"
#include "pipeline/generators.h"
#include "tools/job_files.h"
#include "tools/training/rank_optimizer.h"
#include "tools/training/validate.h"

namespace loom {

absl::StatusOr<GptBatch> JobSetup::Microbatch(int64_t step, int64_t mb, int d) const {
  return text.has_value() ? text->Microbatch(batch, step, mb, d)
                          : markov->Microbatch(batch, step, mb, d);
}

absl::StatusOr<GptBatch> JobSetup::EvalMicrobatch(int64_t mb, int d) const {
  if (!text.has_value()) return markov->Microbatch(batch, kEvalStep, mb, d);
  LOOM_ASSIGN_OR_RETURN(const int64_t first, FirstSequenceOf("--eval_every", batch, 0, mb, d));
  return text->EvalSequences(first, batch.micro_batch);
}

absl::StatusOr<std::unique_ptr<JobSetup>> SetupJob(const TrainJobOptions& options) {
  LOOM_RETURN_IF_ERROR(ValidateTrainJob(options));
  auto setup = std::make_unique<JobSetup>();
  absl::StatusOr<Schedule> schedule = MakeSchedule(
      options.schedule, options.pp, options.microbatches, StagesPerRank(options.schedule));
  if (!schedule.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--schedule: ", schedule.status().message()));
  }
  setup->schedule = std::move(*schedule);
  ExecutorOptions executor_options;
  executor_options.timeout = kCollectiveTimeout;
  LOOM_ASSIGN_OR_RETURN(PipelineExecutor executor,
                        PipelineExecutor::Create(setup->schedule, executor_options));
  setup->executor.emplace(std::move(executor));
  if (options.eval_every > 0) {
    LOOM_ASSIGN_OR_RETURN(Schedule eval,
                          MakeForwardOnlySchedule(setup->schedule.layout, options.microbatches));
    LOOM_ASSIGN_OR_RETURN(PipelineExecutor eval_executor,
                          PipelineExecutor::Create(eval, executor_options));
    setup->eval_executor.emplace(std::move(eval_executor));
  }
  if (options.data.empty()) {
    MarkovOptions markov;
    markov.vocab = options.model.vocab;
    markov.seq_len = options.model.seq_len;
    markov.branching = options.markov_branching;
    markov.seed = options.data_seed;
    LOOM_ASSIGN_OR_RETURN(MarkovData data, MarkovData::Create(markov));
    setup->markov.emplace(std::move(data));
  } else {
    LOOM_ASSIGN_OR_RETURN(ByteCorpus text, OpenTrainCorpus(options));
    setup->text.emplace(std::move(text));
  }
  setup->batch.micro_batch = options.micro_batch;
  setup->batch.num_microbatches = options.microbatches;
  setup->batch.dp_size = options.dp;
  setup->tokens_per_step =
      options.dp * options.microbatches * options.micro_batch * options.model.seq_len;
  return setup;
}

absl::StatusOr<std::unique_ptr<DiskTier>> OpenOffloadDisk(const TrainJobOptions& options,
                                                          const std::string& subdirectory,
                                                          std::vector<std::string>* made) {
  DiskTierOptions disk_options;
  // Inside a launched job (LOOM_JOB_DIR), the default directory lives in the job's
  // directory and whatever is made elsewhere is registered with it, so that the
  // launcher, or its janitor if the launcher is killed, removes it after any end.
  const char* job_dir = std::getenv("LOOM_JOB_DIR");
  const bool in_job = job_dir != nullptr && *job_dir == '/';
  if (options.nvme_dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = in_job
                              ? absl::StrCat(job_dir, "/nvme.",
                                             subdirectory.empty() ? "all" : subdirectory, ".XXXXXX")
                              : absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp",
                                             "/loom_train_nvme.XXXXXX");
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("--offload nvme: mkdtemp ", pattern, ": ", StrError(errno)));
    }
    made->push_back(pattern);
    disk_options.directories = {pattern};
  } else {
    for (absl::string_view dir : absl::StrSplit(options.nvme_dir, ':', absl::SkipEmpty())) {
      std::string path(dir);
      if (!subdirectory.empty()) {
        path = absl::StrCat(dir, "/", subdirectory);
        if (mkdir(path.c_str(), 0700) == 0) {
          // Only what this job made is removed at its end: a directory (or a file)
          // that was there already is the user's.
          made->push_back(path);
          if (in_job && path[0] == '/') {
            if (absl::Status s = RegisterOwnedPath(path); !s.ok()) return s;
          }
        } else if (errno != EEXIST) {
          return absl::NotFoundError(
              absl::StrCat("--nvme_dir: mkdir ", path, ": ", StrError(errno)));
        }
      }
      disk_options.directories.push_back(path);
    }
  }
  absl::StatusOr<std::unique_ptr<DiskTier>> disk = DiskTier::Create(disk_options);
  if (!disk.ok()) {
    return absl::Status(disk.status().code(),
                        absl::StrCat("--nvme_dir: ", disk.status().message()));
  }
  return std::move(*disk);
}

void RemoveDirectories(const std::vector<std::string>& dirs) {
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) rmdir(it->c_str());
}

}  // namespace loom
