// JobSetup: what every rank of a training job builds the same way from the
// options: the pipeline schedule and its executor, the training data (the Markov
// chain or byte-level text) and the batch layout. OpenOffloadDisk opens the DiskTier
// of --offload nvme.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<JobSetup> setup, SetupJob(options));
//   setup->Microbatch(step, mb, dp_rank);     // the same on every mesh
#ifndef LOOM_TOOLS_TRAINING_JOB_SETUP_H_
#define LOOM_TOOLS_TRAINING_JOB_SETUP_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/gpt/batch.h"
#include "models/gpt/byte_corpus.h"
#include "models/gpt/markov_data.h"
#include "offload/disk/disk_tier.h"
#include "pipeline/executor/executor.h"
#include "pipeline/schedule.h"
#include "tools/training/train_options.h"

namespace loom {

struct JobSetup {
  Schedule schedule;
  std::optional<PipelineExecutor> executor;
  // --eval_every: a forward-only schedule on the training schedule's layout.
  std::optional<PipelineExecutor> eval_executor;
  // The training data: the Markov chain, or text (with TrainJobOptions::data).
  std::optional<MarkovData> markov;
  std::optional<ByteCorpus> text;
  BatchLayout batch;
  int64_t tokens_per_step = 0;

  // Microbatch `mb` of step `step` (from 0) for dp rank `d`: a function of these
  // and the data seed alone, so any mesh sees the same global batch.
  absl::StatusOr<GptBatch> Microbatch(int64_t step, int64_t mb, int d) const;
  // EvalMicrobatch: microbatch `mb` of the held-out set for dp rank `d`. The set is
  // fixed, one global batch of sequences cut as a training step is, so every mesh
  // evaluates the same sequences: text, the first sequences of the held-out tail;
  // the Markov chain, the sequences of a step no run reaches (kEvalStep).
  absl::StatusOr<GptBatch> EvalMicrobatch(int64_t mb, int d) const;
};

// SetupJob validates the options (ValidateTrainJob) and builds the setup.
absl::StatusOr<std::unique_ptr<JobSetup>> SetupJob(const TrainJobOptions& options);

// OpenOffloadDisk opens a DiskTier for --offload nvme. With no --nvme_dir, a fresh
// directory under $TMPDIR (inside a launched job: in its job directory) that `made`
// names, for the caller to remove (RemoveDirectories) once the tier is gone; with
// one, `subdirectory` (if any) is made inside each named directory, for processes
// that must not share one; `made` names it only when this call created it (one that
// was there already is used and left in place).
absl::StatusOr<std::unique_ptr<DiskTier>> OpenOffloadDisk(const TrainJobOptions& options,
                                                          const std::string& subdirectory,
                                                          std::vector<std::string>* made);
// RemoveDirectories removes `dirs` (empty directories), last first.
void RemoveDirectories(const std::vector<std::string>& dirs);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_JOB_SETUP_H_
