// GatherBytes: every rank's string at rank 0, in rank order (empty elsewhere): the
// sizes by a Gather, then each string by a point-to-point receive. For small,
// variable-length reports (a rank's parameters, its status, a checkpoint file's
// description), not for bulk data.
//
// Example:
//   LOOM_ASSIGN_OR_RETURN(std::vector<std::string> all, GatherBytes(world, mine));
//   // rank 0: all.size() == world.size(); others: all.empty()
#ifndef LOOM_COLLECTIVES_GATHER_BYTES_H_
#define LOOM_COLLECTIVES_GATHER_BYTES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"

namespace loom {

absl::StatusOr<std::vector<std::string>> GatherBytes(Communicator& world, const std::string& mine);

}  // namespace loom

#endif  // LOOM_COLLECTIVES_GATHER_BYTES_H_
