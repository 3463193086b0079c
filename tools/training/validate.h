// ValidateTrainJob: the training job's check of its options, before any rank,
// thread, process or allocation starts. Every bad mesh, model, schedule, option or
// data file is one InvalidArgument line naming the flags and the values.
//
// Example:
//   TrainJobOptions options;          // dp 2, pp 2, tp 2, 4 layers
//   options.pp = 5;
//   ValidateTrainJob(options, TrainLaunchOptions{.transport = RankTransport::kShm});
//   // InvalidArgument: "--layers 4 is fewer than the 5 pipeline stages (--pp 5)"
#ifndef LOOM_TOOLS_TRAINING_VALIDATE_H_
#define LOOM_TOOLS_TRAINING_VALIDATE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "models/gpt/byte_corpus.h"
#include "tools/training/train_options.h"
#include "topology/parallel_config.h"

namespace loom {

// kMaxTrainRanks: the most ranks (dp x pp x cp x tp) of a job, threads or processes.
inline constexpr int64_t kMaxTrainRanks = 64;

// ValidateTrainJob is RunTrainJob's check of the options, without training:
// InvalidArgument naming the flags and values for a bad mesh, model, schedule or
// option, for size flags whose products overflow an int64, and for a job whose model
// state, tokens and activations could not fit this machine's physical memory (so no
// allocation of the run fails). The launch options are checked too (a job id, the
// heartbeat timeout, restarts and what they need); their transport names the ranks
// in the message ("thread ranks", "processes over shm"). Files named by `data` are
// opened (a missing, empty or too-short one is one line). Without launch options:
// thread ranks.
absl::Status ValidateTrainJob(const TrainJobOptions& options);
absl::Status ValidateTrainJob(const TrainJobOptions& options, const TrainLaunchOptions& launch);

// StagesPerRank: interleaved 1F1B runs two model chunks per rank here, and ZB-V
// always places two stages per rank (its V); the others one.
int64_t StagesPerRank(PipelineScheduleKind schedule);

// OpenTrainCorpus opens the text of `options.data` as the job reads it.
absl::StatusOr<ByteCorpus> OpenTrainCorpus(const TrainJobOptions& options);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_VALIDATE_H_
