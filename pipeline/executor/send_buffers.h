// SendBuffers: one rank's staging buffers for the pipeline executor's payloads,
// allocated from the transport's communication memory (Transport::AllocateBuffer,
// collectives/transport/comm_buffer.h) and reused from Run to Run.
//
// Over shm, a payload sent from such a buffer travels mapped: the receiving process
// maps the buffer once and copies out of it with memcpy, instead of reading the
// sender's private memory through process_vm_readv (about twice the bandwidth at
// the sizes of activations, collectives/transport/shm/README.md). Staging costs one
// memcpy on the sender, of memory it has just written (warm in its cache). Over the
// other transports AllocateBuffer returns ordinary memory, so staging would be a
// copy for nothing: Stage says so once and the executor sends from the tensor.
//
// The receive side needs no such memory with any of Loom's transports: the
// receiver copies into its destination itself, whatever that memory is, so the
// executor receives straight into the tensor it hands to the stage module.
//
// A SendBuffers belongs to one rank (one thread); it is not thread-safe. Buffers
// live until the SendBuffers is destroyed; at most kMaxFree are kept free, the
// smallest dropped first, so a run of odd sizes does not grow it without bound.
//
// Example (each rank, across training steps):
//   SendBuffers send_buffers;
//   for (int step = 0; step < steps; ++step) {
//     LOOM_ASSIGN_OR_RETURN(RankExecution run,
//                           executor.Run(*endpoint, *module, &send_buffers));
//   }
//   send_buffers.staged();   // payloads sent from communication memory (shm: > 0)
#ifndef LOOM_PIPELINE_EXECUTOR_SEND_BUFFERS_H_
#define LOOM_PIPELINE_EXECUTOR_SEND_BUFFERS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectives/transport/comm_buffer.h"
#include "collectives/transport/transport.h"

namespace loom {

class SendBuffers {
 public:
  static constexpr size_t kMaxFree = 16;

  SendBuffers() = default;
  SendBuffers(const SendBuffers&) = delete;
  SendBuffers& operator=(const SendBuffers&) = delete;

  // Stage returns a buffer of `transport`'s communication memory holding a copy of
  // `values` (its first values.size() floats; the buffer may be larger), or an
  // empty buffer when that transport's memory is ordinary (not zero-copy) or
  // `values` is empty: then send from `values` itself. The first Stage with a transport
  // asks it once (a SendBuffers used with another transport asks again and drops
  // its free buffers). Errors: AllocateBuffer's (ResourceExhausted naming the
  // size).
  absl::StatusOr<CommBuffer> Stage(Transport& transport, absl::Span<const float> values);

  // Return gives back a buffer from Stage once its send has completed (an empty one
  // is ignored).
  void Return(CommBuffer buffer);

  // staged counts the payloads Stage copied into communication memory;
  // allocated_bytes the bytes of every buffer it allocated, kept or dropped.
  int64_t staged() const { return staged_; }
  int64_t allocated_bytes() const { return allocated_bytes_; }

 private:
  const Transport* transport_ = nullptr;  // Whose memory the free buffers are.
  bool zero_copy_ = false;                // transport_'s verdict.
  std::vector<CommBuffer> free_;          // Sorted by size, smallest first.
  int64_t staged_ = 0;
  int64_t allocated_bytes_ = 0;
};

}  // namespace loom

#endif  // LOOM_PIPELINE_EXECUTOR_SEND_BUFFERS_H_
