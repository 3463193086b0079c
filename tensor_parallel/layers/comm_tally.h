// CommTally: the bytes a parallel layer handed to collectives, by kind, counted at
// the layer as logical payloads (an all-reduce of N bytes counts N; an all-gather
// counts its gathered output; a reduce-scatter its full input), before any padding
// of uneven pieces and whatever algorithm moves them. Benchmarks print it next to
// the analytical count and to the Communicator's own wire counters.
//
// Example:
//   layer.Forward(x);  // a row-parallel layer on tp = 2, output [128, 256] f32
//   layer.comm_tally().all_reduce_bytes;   // 131072
//   layer.comm_tally().total();            // 131072
#ifndef LOOM_TENSOR_PARALLEL_LAYERS_COMM_TALLY_H_
#define LOOM_TENSOR_PARALLEL_LAYERS_COMM_TALLY_H_

#include <cstdint>

namespace loom {

struct CommTally {
  uint64_t all_reduce_bytes = 0;
  uint64_t all_gather_bytes = 0;
  uint64_t reduce_scatter_bytes = 0;
  uint64_t calls = 0;

  uint64_t total() const { return all_reduce_bytes + all_gather_bytes + reduce_scatter_bytes; }
  CommTally& operator+=(const CommTally& other) {
    all_reduce_bytes += other.all_reduce_bytes;
    all_gather_bytes += other.all_gather_bytes;
    reduce_scatter_bytes += other.reduce_scatter_bytes;
    calls += other.calls;
    return *this;
  }
};

inline CommTally operator+(CommTally a, const CommTally& b) { return a += b; }

}  // namespace loom

#endif  // LOOM_TENSOR_PARALLEL_LAYERS_COMM_TALLY_H_
