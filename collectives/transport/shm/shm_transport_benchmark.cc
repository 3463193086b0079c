// Shm transport between two processes: ping-pong (round-trip latency) and exchange
// (both ranks send and receive at once, as in each step of a two-rank ring
// all-reduce), over message sizes from 8 B to 64 MiB, for the CMA and staged paths,
// and exchanges out of SharedBuffers (mapped by the receiver).
// Run with --config=opt:
//   ./bazelw run //collectives/transport/shm:shm_transport_benchmark
// Rank 1 is a forked child; only rank 0's loop is timed.
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "collectives/transport/shm/shared_buffer.h"
#include "collectives/transport/shm/shm_harness.h"
#include "collectives/transport/shm/shm_transport.h"
#include "core/clock.h"
#include "core/status_macros.h"

namespace loom {
namespace {

enum class Pattern { kPingPong, kExchange };

// loom::Now: absl::Now() would add its ~78 ns to every step measured.
absl::Time Deadline() { return loom::Now() + absl::Seconds(60); }

// One step of `pattern` on rank `rank` of two.
absl::Status Step(Transport& t, Pattern pattern, absl::Span<const std::byte> out,
                  absl::Span<std::byte> in) {
  const int peer = 1 - t.rank();
  if (pattern == Pattern::kExchange || t.rank() == 0) {
    LOOM_ASSIGN_OR_RETURN(Request r, t.Recv(peer, 0, in));
    LOOM_ASSIGN_OR_RETURN(Request s, t.Send(peer, 0, out));
    return t.Wait({r, s}, Deadline());
  }
  LOOM_ASSIGN_OR_RETURN(Request r, t.Recv(peer, 0, in));
  LOOM_RETURN_IF_ERROR(t.Wait({r}, Deadline()));
  LOOM_ASSIGN_OR_RETURN(Request s, t.Send(peer, 0, out));
  return t.Wait({s}, Deadline());
}

// SendBuffer: `bytes` of ones, in a SharedBuffer (which the peer maps) when `shared`.
struct SendBuffer {
  SendBuffer(size_t bytes, bool shared) : plain(shared ? 0 : bytes, std::byte{1}) {
    if (shared && bytes > 0) {
      absl::StatusOr<SharedBuffer> allocated = SharedBuffer::Allocate(bytes);
      if (allocated.ok()) {
        mapped = *std::move(allocated);
        std::fill(mapped.data(), mapped.data() + bytes, std::byte{1});
      }
    }
  }
  absl::Span<const std::byte> span() const {
    return mapped.size() > 0 ? absl::Span<const std::byte>(mapped.bytes()) : absl::MakeConstSpan(plain);
  }
  std::vector<std::byte> plain;
  SharedBuffer mapped;
};

void BM_Shm(benchmark::State& state, ShmOptions::CopyMode mode, Pattern pattern, bool shared = false) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const int64_t iterations = state.max_iterations;
  ShmOptions options;
  options.job_id = UniqueJobId("bench");
  options.size = 2;
  options.copy_mode = mode;
  // Buffers are allocated after fork, and each side takes one untimed step first:
  // pages shared copy-on-write with the other process, or never touched, would
  // make the first steps measure page faults.
  const pid_t child = fork();
  if (child == 0) {
    options.rank = 1;
    SendBuffer out(bytes, shared);
    std::vector<std::byte> in(bytes);
    absl::StatusOr<std::unique_ptr<Transport>> peer = ConnectShmTransport(options);
    absl::Status status = peer.status();
    for (int64_t i = 0; status.ok() && i <= iterations; ++i)
      status = Step(**peer, pattern, out.span(), absl::MakeSpan(in));
    _exit(status.ok() ? 0 : 1);
  }
  options.rank = 0;
  SendBuffer out(bytes, shared);
  std::vector<std::byte> in(bytes);
  absl::StatusOr<std::unique_ptr<Transport>> transport = ConnectShmTransport(options);
  absl::Status status = transport.status();
  if (status.ok()) status = Step(**transport, pattern, out.span(), absl::MakeSpan(in));
  if (status.ok()) {
    for (auto _ : state) {
      status = Step(**transport, pattern, out.span(), absl::MakeSpan(in));
      if (!status.ok()) break;
    }
  }
  if (!status.ok()) state.SkipWithError(std::string(status.message()).c_str());
  if (transport.ok()) transport->reset();
  int wait_status = 0;
  waitpid(child, &wait_status, 0);
  // Bytes moved per step, both directions: what each rank sent plus received.
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes) * 2);
}

void Sizes(benchmark::internal::Benchmark* benchmark) {
  for (int64_t bytes :
       {8, 32, 40, 64, 128, 256, 512, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20}) {
    benchmark->Arg(bytes);
  }
  benchmark->UseRealTime();
}

BENCHMARK_CAPTURE(BM_Shm, PingPongCma, ShmOptions::CopyMode::kCma, Pattern::kPingPong)
    ->Apply(Sizes);
BENCHMARK_CAPTURE(BM_Shm, PingPongStaged, ShmOptions::CopyMode::kStaged, Pattern::kPingPong)
    ->Apply(Sizes);
BENCHMARK_CAPTURE(BM_Shm, ExchangeCma, ShmOptions::CopyMode::kCma, Pattern::kExchange)
    ->Apply(Sizes);
// Send buffers in SharedBuffers: the receiver maps them and copies with memcpy.
BENCHMARK_CAPTURE(BM_Shm, ExchangeMapped, ShmOptions::CopyMode::kCma, Pattern::kExchange, true)
    ->Apply(Sizes);
BENCHMARK_CAPTURE(BM_Shm, ExchangeStaged, ShmOptions::CopyMode::kStaged, Pattern::kExchange)
    ->Apply(Sizes);

}  // namespace
}  // namespace loom
