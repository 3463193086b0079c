#ifndef LOOM_ZERO3_INTERNAL_CHECKPOINT_WRITE_HOOK_H_
#define LOOM_ZERO3_INTERNAL_CHECKPOINT_WRITE_HOOK_H_

// SaveCheckpoint with a hook on every write, for the crash and error-injection tests
// (internal: never part of the public API, whose users have no reason to set it).
//
//   // Fail rank 1's save as a full disk would, once 300 bytes are written:
//   checkpoint_internal::SaveCheckpointWithWriteHook(
//       dir, step, partition, fields, dp, options,
//       [](absl::string_view path, int64_t bytes_written) {
//         return bytes_written > 300 ? absl::ResourceExhaustedError("injected")
//                                    : absl::OkStatus();
//       });

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "collectives/communicator.h"
#include "zero3/checkpoint.h"
#include "zero3/partition.h"

namespace loom {
namespace checkpoint_internal {

// Called after each write to a checkpoint file (a rank file, the manifest or LATEST,
// under its temporary name) with the bytes written to it so far. A non-OK return fails
// the save as that write's error would; a test may also kill the process from it to
// simulate a crash mid-save.
using WriteHook = std::function<absl::Status(absl::string_view path, int64_t bytes_written)>;

// SaveCheckpoint (checkpoint.h), calling `hook` (when set) after every write.
absl::Status SaveCheckpointWithWriteHook(const std::string& dir, int64_t step,
                                         const Partition& partition,
                                         absl::Span<const CheckpointField> fields,
                                         Communicator& dp, const CheckpointOptions& options,
                                         const WriteHook& hook);

}  // namespace checkpoint_internal
}  // namespace loom

#endif  // LOOM_ZERO3_INTERNAL_CHECKPOINT_WRITE_HOOK_H_
