// pipeline_schedule: builds a pipeline schedule with Loom's generators, proves it
// deadlock-free and complete with the verifier, and prints it as a grid. Then it
// drops one action and shows that the verifier rejects the broken schedule.
//
//   pipeline_schedule [kind] [ranks] [microbatches]     # 1f1b 4 8
// kind: gpipe, 1f1b, zb-h1, zb-v. Exit status: 0 when the schedule verifies and the
// broken one does not, 1 otherwise, 2 on bad arguments.
#include <cstdint>
#include <iostream>
#include <string>

#include "absl/strings/numbers.h"
#include "pipeline/generators.h"
#include "pipeline/verifier.h"

int main(int argc, char** argv) {
  const std::string kind = argc > 1 ? argv[1] : "1f1b";
  int64_t ranks = 4;
  int64_t microbatches = 8;
  if ((argc > 2 && !absl::SimpleAtoi(argv[2], &ranks)) ||
      (argc > 3 && !absl::SimpleAtoi(argv[3], &microbatches))) {
    std::cerr << "pipeline_schedule: ranks and microbatches must be integers\n";
    return 2;
  }
  absl::StatusOr<loom::Schedule> schedule;
  if (kind == "gpipe") {
    schedule = loom::MakeGPipeSchedule(ranks, microbatches);
  } else if (kind == "1f1b") {
    schedule = loom::Make1F1BSchedule(ranks, microbatches);
  } else if (kind == "zb-h1") {
    schedule = loom::MakeZeroBubbleH1Schedule(ranks, microbatches);
  } else if (kind == "zb-v") {
    schedule = loom::MakeZeroBubbleVSchedule(ranks, microbatches);
  } else {
    std::cerr << "pipeline_schedule: unknown kind \"" << kind << "\"; want gpipe, 1f1b, zb-h1 or zb-v\n";
    return 2;
  }
  if (!schedule.ok()) {
    std::cerr << "pipeline_schedule: " << schedule.status() << "\n";
    return 2;
  }

  std::cout << schedule->ToString();
  if (absl::Status status = loom::Verify(*schedule); !status.ok()) {
    std::cerr << "pipeline_schedule: the generated schedule does not verify: " << status << "\n";
    return 1;
  }
  std::cout << "verified: " << schedule->NumActions() << " actions on " << schedule->num_ranks()
            << " ranks, every microbatch forward and backward once, no deadlock\n";

  // The last rank's first action is the first forward through the last stage; without
  // it the last stage never produces that microbatch's output.
  loom::Schedule broken = *schedule;
  broken.ranks.back().erase(broken.ranks.back().begin());
  absl::Status rejected = loom::Verify(broken);
  if (rejected.ok()) {
    std::cerr << "pipeline_schedule: a schedule missing an action verified\n";
    return 1;
  }
  std::cout << "without rank " << ranks - 1 << "'s first action: "
            << absl::StatusCodeToString(rejected.code()) << "\n";
  return 0;
}
