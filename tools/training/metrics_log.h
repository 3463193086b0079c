// MetricsLog: the training job's metrics file, one JSON object per line (JSON Lines),
// one line per logged step, read back by ReadMetricsFile (and by jq, pandas or any
// JSON reader).
//
//   {"step":10,"loss":3.2188,"eval_loss":3.3012,"lr":0.003,"tokens_per_second":5120,
//    "bytes_sent":1048576,"seconds":1.25}
//
// (one line in the file). Numbers are printed with as many digits as it takes to read
// back the same double (at most 17). eval_loss is left out on steps without an
// evaluation. Strict JSON has no NaN or infinity, so a non-finite number (a diverged
// loss) is written as null and reads back as NaN; null is never "absent".
//
// A resumed run calls OpenForResume with its first step: the lines of that step and
// later ones, which the run is about to log again, are dropped first, so the file
// never holds a step twice.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(MetricsLog log, MetricsLog::Open("/runs/7/metrics.jsonl"));
//   LOOM_RETURN_IF_ERROR(log.Append({.step = 1, .loss = 5.54, .lr = 3e-3, ...}));
//   // after a restart from the checkpoint of step 400:
//   LOOM_ASSIGN_OR_RETURN(MetricsLog log, MetricsLog::OpenForResume(path, 401));
//   LOOM_ASSIGN_OR_RETURN(std::vector<MetricsLine> lines, ReadMetricsFile(path));
//   ReadMetricsFile(path)  // on a file whose third line is {"step":3,"loss":}
//   // DataLoss: "ReadMetricsFile: /runs/7/metrics.jsonl line 3: column 18: expected a
//   //   number or null, found '}' in: {"step":3,"loss":}"
#ifndef LOOM_TOOLS_TRAINING_METRICS_LOG_H_
#define LOOM_TOOLS_TRAINING_METRICS_LOG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom {

// One line of the file; every field is required but eval_loss.
struct MetricsLine {
  int64_t step = 0;                 // the AdamW step, from 1
  double loss = 0.0;                // mean training loss of the step
  std::optional<double> eval_loss;  // held-out loss, on steps that evaluate
  double lr = 0.0;                  // the learning rate the step used
  double tokens_per_second = 0.0;   // training tokens of the step / its wall time
  int64_t bytes_sent = 0;           // by this rank's communicators during the step
  double seconds = 0.0;             // wall time since the run (or the resume) started
};

// FormatMetricsLine returns `line` as one JSON object, without the newline.
std::string FormatMetricsLine(const MetricsLine& line);

// ParseMetricsLine reads one object as FormatMetricsLine writes it: keys in any order,
// blanks between tokens, values numbers or null (the integer fields step and
// bytes_sent take neither null nor a fraction or exponent). No other JSON: no
// strings as values, no escapes in keys, no nesting. InvalidArgument naming the
// column and what was found there, an unknown or repeated key, or a missing one.
absl::StatusOr<MetricsLine> ParseMetricsLine(absl::string_view text);

// MetricsLog appends lines to the file. Each Append is one write(2) of one whole line
// and nothing is buffered in the process, so a crash of the job loses no logged line;
// the file is not fsynced per line (a power loss may lose the last ones). One writer
// per file: the job's rank 0.
class MetricsLog {
 public:
  // Open creates `path`, or empties it (a fresh run). Errors name the path and the
  // errno text (NotFound for a missing directory, ...); FailedPrecondition if `path`
  // is not a regular file (a FIFO would block the job).
  static absl::StatusOr<MetricsLog> Open(const std::string& path);

  // OpenForResume keeps the lines of `path` whose step is below `resume_step` (the
  // first step the resumed run logs), rewriting the file atomically (temporary file,
  // fsync, rename) before appending. A missing file is created. A last line without
  // its newline is a torn append of the crashed run and is dropped; any other
  // malformed line is DataLoss as in ReadMetricsFile, and the file is left as it was.
  static absl::StatusOr<MetricsLog> OpenForResume(const std::string& path, int64_t resume_step);

  MetricsLog(MetricsLog&& other) noexcept;
  MetricsLog& operator=(MetricsLog&& other) noexcept;
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  ~MetricsLog();

  // Append writes `line` and its newline. An error names the path and the errno text;
  // the file may then end in part of a line, so every later Append returns
  // FailedPrecondition instead of writing after it.
  absl::Status Append(const MetricsLine& line);

  const std::string& path() const { return path_; }

 private:
  MetricsLog(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  void Close();

  int fd_ = -1;
  std::string path_;
  bool failed_ = false;
};

// ReadMetricsFile returns the lines of `path` in file order; blank lines are skipped.
// DataLoss naming the path, the line number (from 1), the column and the line for a
// malformed line; NotFound / PermissionDenied / ... with the errno text when the
// file cannot be read.
absl::StatusOr<std::vector<MetricsLine>> ReadMetricsFile(const std::string& path);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_METRICS_LOG_H_
