// all_reduce_threads: four threads, one Loom Communicator each over the in-process
// transport, sum-all-reduce 65,537 distinct 64-bit integers per rank (odd, so no
// chunking divides it evenly); every rank checks every element against the sum
// computed sequentially, and the program prints the algorithm Loom chose.
//
//   all_reduce_threads [count]
// Exit status: 0 when every rank's result is exact, 1 otherwise.
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "collectives/communicator.h"
#include "collectives/transport/inproc/inproc_transport.h"

namespace {

constexpr int kRanks = 4;

// Rank r's i-th input: distinct across ranks and elements, large enough that a
// dropped or doubled contribution cannot cancel out.
int64_t Input(int rank, int64_t i) { return (rank + 1) * 1000003LL + i * 7919LL - 5 * rank * i; }

}  // namespace

int main(int argc, char** argv) {
  int64_t count = 65537;
  if (argc > 1 && (!absl::SimpleAtoi(argv[1], &count) || count < 0)) {
    std::cerr << "all_reduce_threads: bad count \"" << argv[1] << "\"; want an integer >= 0\n";
    return 2;
  }
  absl::StatusOr<std::shared_ptr<loom::InprocGroup>> group = loom::InprocGroup::Create(kRanks);
  if (!group.ok()) {
    std::cerr << "all_reduce_threads: " << group.status() << "\n";
    return 1;
  }

  std::vector<std::string> results(kRanks);
  std::string explanation;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kRanks; ++rank) {
    threads.emplace_back([&, rank] {
      absl::StatusOr<std::unique_ptr<loom::Transport>> endpoint = (*group)->Endpoint(rank);
      if (!endpoint.ok()) {
        results[rank] = endpoint.status().ToString();
        return;
      }
      absl::StatusOr<std::unique_ptr<loom::Communicator>> comm =
          loom::Communicator::Create(std::move(*endpoint));
      if (!comm.ok()) {
        results[rank] = comm.status().ToString();
        return;
      }
      std::vector<int64_t> data(count);
      for (int64_t i = 0; i < count; ++i) data[i] = Input(rank, i);
      if (absl::Status status = (*comm)->AllReduce(absl::MakeSpan(data), loom::ReduceOp::kSum);
          !status.ok()) {
        results[rank] = status.ToString();
        return;
      }
      int64_t wrong = 0;
      for (int64_t i = 0; i < count; ++i) {
        int64_t expected = 0;
        for (int r = 0; r < kRanks; ++r) expected += Input(r, i);
        if (data[i] != expected) ++wrong;
      }
      results[rank] = wrong == 0 ? "exact" : std::to_string(wrong) + " elements differ";
      if (rank == 0) {
        explanation = (*comm)->Explain(loom::CollectiveKind::kAllReduce,
                                       count * static_cast<int64_t>(sizeof(int64_t)))
                          .ToString();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  bool ok = true;
  for (int rank = 0; rank < kRanks; ++rank) {
    std::cout << "rank " << rank << ": all_reduce sum of " << count << " int64: "
              << results[rank] << "\n";
    ok = ok && results[rank] == "exact";
  }
  std::cout << explanation << "\n";
  return ok ? 0 : 1;
}
