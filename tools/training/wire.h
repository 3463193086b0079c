// How ranks' results travel to world rank 0: as bytes (core/byte_codec.h) gathered
// through the world communicator (collectives/gather_bytes.h), so that ranks in other
// processes report the same way as threads. The encoders below are what the job
// gathers: final parameters, the last step's pipeline execution for --trace.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(std::vector<std::string> all,
//                         GatherBytes(world, EncodeParameters(tp_rank, params)));
//   LOOM_ASSIGN_OR_RETURN(RankParameters rank1, DecodeParameters(all[1]));  // at rank 0
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
#include "collectives/gather_bytes.h"
#include "core/byte_codec.h"
#include "models/gpt/gpt_parameter.h"
#include "pipeline/executor/executor.h"
#include "tools/training/train_options.h"

namespace loom {

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
