#include "tools/training/train_paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/posix.h"
#include "core/status_macros.h"
#include "tools/cli.h"
#include "tools/training/job_checkpoint.h"

namespace loom {
namespace {

// CheckCheckpointDirectory: --checkpoint_dir is a directory this process may write
// in, or can be made as one (its parent is).
absl::Status CheckCheckpointDirectory(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  struct stat st;
  std::string target = dir;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      return absl::InvalidArgumentError(
          absl::StrCat("--checkpoint_dir ", dir, ": ", StrError(errno)));
    }
    const size_t slash = dir.find_last_of('/');
    target = slash == std::string::npos ? "." : (slash == 0 ? "/" : dir.substr(0, slash));
    if (::stat(target.c_str(), &st) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("--checkpoint_dir ", dir, ": its parent ",
                                                     target, ": ", StrError(errno)));
    }
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--checkpoint_dir ", dir, ": ", target, " is not a directory"));
  }
  if (::access(target.c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--checkpoint_dir ", dir, ": cannot write in ",
                                                   target, ": ", StrError(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckTrainPaths(const TrainCommand& command) {
  const TrainJobOptions& o = command.options;
  LOOM_RETURN_IF_ERROR(cli::CheckOutputPath("--trace", command.outputs.trace));
  LOOM_RETURN_IF_ERROR(cli::CheckOutputPath("--summary_json", command.outputs.summary_json));
  LOOM_RETURN_IF_ERROR(cli::CheckOutputPath("--metrics", command.outputs.metrics));
  LOOM_RETURN_IF_ERROR(cli::CheckOutputPath("--plot", command.outputs.plot));
  LOOM_RETURN_IF_ERROR(CheckCheckpointDirectory(o.checkpoint_dir));
  // The checkpoint to resume from, before any rank starts: there is one (for
  // --resume_from), it is readable, and it holds this model.
  if (!o.resume_dir.empty()) {
    const absl::string_view flag = o.resume_required ? "--resume_from " : "--resume ";
    absl::StatusOr<CheckpointReader> reader = CheckpointReader::Open(o.resume_dir);
    if (!reader.ok() && (o.resume_required || !absl::IsNotFound(reader.status()))) {
      // Nothing to resume from is the command line's fault; a damaged checkpoint is not.
      return absl::Status(absl::IsNotFound(reader.status()) ? absl::StatusCode::kInvalidArgument
                                                            : reader.status().code(),
                          absl::StrCat(flag, o.resume_dir, ": ", reader.status().message()));
    }
    if (reader.ok()) {
      if (absl::Status s = reader->CheckModel(GptModelFields(o.model)); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat(flag, o.resume_dir, ": ", s.message()));
      }
    }
  }
  if (!UsesDisk(o)) return absl::OkStatus();
  for (absl::string_view dir : absl::StrSplit(o.nvme_dir, ':', absl::SkipEmpty())) {
    const std::string path(dir);
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--nvme_dir: ", path, ": ", StrError(errno)));
    }
    if (!S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat("--nvme_dir: ", path, " is not a directory"));
    }
    if (::access(path.c_str(), W_OK | X_OK) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--nvme_dir: ", path, ": cannot write in it: ", StrError(errno)));
    }
  }
  return absl::OkStatus();
}

}  // namespace loom
