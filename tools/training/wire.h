// How ranks' results travel to world rank 0: as bytes through the world
// communicator, so that ranks in other processes report the same way as threads.
// ByteWriter / ByteReader hold host-order integers and floats (every rank of a job
// that gathers this way shares one byte order); GatherBytes collects one string per
// rank; the encoders below are what the job gathers (final parameters, the last
// step's pipeline execution for --trace).
//
// Example:
//   ByteWriter w;
//   w.I64(42);
//   w.Str("name");
//   ByteReader r(w.Take());
//   LOOM_ASSIGN_OR_RETURN(int64_t v, r.I64());   // 42
//   r.F32s();   // DataLoss: "rank report: a count of ... with 0 bytes left"
#ifndef LOOM_TOOLS_TRAINING_WIRE_H_
#define LOOM_TOOLS_TRAINING_WIRE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "collectives/communicator.h"
#include "models/gpt/gpt_parameter.h"
#include "pipeline/executor/executor.h"
#include "tools/training/train_options.h"

namespace loom {

class ByteWriter {
 public:
  void I64(int64_t v) { Raw(&v, sizeof(v)); }
  void F64(double v) { Raw(&v, sizeof(v)); }
  void Str(absl::string_view s);
  void I64s(absl::Span<const int64_t> v);
  void F32s(absl::Span<const float> v);
  std::string Take() { return std::move(out_); }

 private:
  void Raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string out_;
};

// ByteReader reads what ByteWriter wrote; DataLoss naming the counts for a short or
// malformed input (never an allocation larger than the input).
class ByteReader {
 public:
  explicit ByteReader(absl::string_view in) : in_(in) {}
  absl::StatusOr<int64_t> I64();
  absl::StatusOr<double> F64();
  absl::StatusOr<std::string> Str();
  absl::StatusOr<std::vector<int64_t>> I64s();
  absl::StatusOr<std::vector<float>> F32s();
  bool done() const { return in_.empty(); }

 private:
  absl::StatusOr<int64_t> Count(size_t element_bytes);
  absl::Status Raw(void* p, size_t n);
  absl::string_view in_;
};

// GatherBytes returns every rank's `mine`, in rank order, at rank 0 (empty elsewhere).
absl::StatusOr<std::vector<std::string>> GatherBytes(Communicator& world, const std::string& mine);

// A rank's parameters (its tp shards: names, shapes, split and values).
std::string EncodeParameters(int tp_rank, const std::vector<GptParameter>& params);
absl::StatusOr<RankParameters> DecodeParameters(absl::string_view bytes);

// A rank's last pipeline execution, for the trace: each action's name and its
// start and end in nanoseconds since the Unix epoch (one clock for every process).
struct TraceEvent {
  std::string name;
  int64_t start_ns = 0, end_ns = 0;
};
std::string EncodeExecution(const RankExecution& execution);
absl::StatusOr<std::vector<TraceEvent>> DecodeExecution(absl::string_view bytes);
// TraceEvents is a Chrome trace (JSON) of every rank's events, one thread per rank.
std::string TraceEvents(const std::vector<std::vector<TraceEvent>>& ranks);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_WIRE_H_
