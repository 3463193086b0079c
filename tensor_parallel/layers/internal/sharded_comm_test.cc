#include "tensor_parallel/layers/internal/sharded_comm.h"

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tensor_parallel/layers/comm_tally.h"
#include "tensor_parallel/layers/internal/tp_testing.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using tp_layers_internal::AllGatherV;
using tp_layers_internal::AllGatherVInto;
using tp_layers_internal::ShardCounts;
using tp_layers_testing::RunTp;

// AllGatherVInto fills the caller's span with what AllGatherV returns (every rank's
// piece in rank order, uneven pieces included) and tallies the same bytes; an output
// of another size is refused, naming both sizes, before any rank sends.
TEST(ShardedCommTest, AllGatherVIntoIsAllGatherVIntoTheCallersSpan) {
  for (const int tp : {1, 2, 3}) {
    for (const int64_t rows : {int64_t{1}, int64_t{7}, int64_t{12}}) {
      SCOPED_TRACE(absl::StrCat("tp ", tp, ", ", rows, " rows of 5"));
      const std::vector<int64_t> counts = ShardCounts(rows, tp, ShardRule::kBalanced, 5);
      tp_layers_testing::ExpectAllOk(RunTp(tp, [&](Communicator& comm) -> absl::Status {
        const std::vector<float> mine = tp_layers_testing::RandomValues(
            counts[static_cast<size_t>(comm.rank())], static_cast<uint32_t>(70 + comm.rank()));
        CommTally by_vector, by_span;
        LOOM_ASSIGN_OR_RETURN(std::vector<float> want, AllGatherV(comm, mine, counts, by_vector));
        std::vector<float> got(want.size(), -1.0f);
        LOOM_RETURN_IF_ERROR(AllGatherVInto(comm, mine, counts, by_span, absl::MakeSpan(got)));
        EXPECT_EQ(got, want);
        EXPECT_EQ(by_span.all_gather_bytes, by_vector.all_gather_bytes);
        EXPECT_EQ(by_span.calls, by_vector.calls);
        std::vector<float> short_by_one(want.size() - 1);
        EXPECT_THAT(AllGatherVInto(comm, mine, counts, by_span, absl::MakeSpan(short_by_one)),
                    StatusIs(absl::StatusCode::kInvalidArgument,
                             HasSubstr(absl::StrCat("the pieces hold ", want.size(),
                                                    " elements; the output has room for ",
                                                    want.size() - 1))));
        return absl::OkStatus();
      }));
    }
  }
}

}  // namespace
}  // namespace loom
