#include "tensor_parallel/internal/transition_planner.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace tensor_parallel_internal {
namespace {

// Plan renders the transitions as "m:from->to" joined by spaces.
std::string Plan(const std::string& from, const std::string& to, int tensor_rank) {
  absl::StatusOr<std::vector<Placement>> a = ParsePlacements(from);
  absl::StatusOr<std::vector<Placement>> b = ParsePlacements(to);
  if (!a.ok() || !b.ok()) return "parse error";
  absl::StatusOr<std::vector<Transition>> plan = PlanTransitions(*a, *b, tensor_rank);
  if (!plan.ok()) return std::string(plan.status().message());
  std::string out;
  for (const Transition& t : *plan) {
    absl::StrAppend(&out, out.empty() ? "" : " ", t.mesh_dim, ":", t.from.ToString(), "->",
                    t.to.ToString());
  }
  return out;
}

TEST(TransitionPlannerTest, SingleTransitionsAreDirect) {
  EXPECT_EQ(Plan("S(0)", "S(0)", 2), "");
  EXPECT_EQ(Plan("S(0)", "R", 2), "0:S(0)->R");
  EXPECT_EQ(Plan("P(sum)", "R", 2), "0:P(sum)->R");
  EXPECT_EQ(Plan("P(sum)", "S(1)", 2), "0:P(sum)->S(1)");
  EXPECT_EQ(Plan("S(0)", "S(1)", 2), "0:S(0)->S(1)");
  EXPECT_EQ(Plan("R", "S(1)", 2), "0:R->S(1)");
  EXPECT_EQ(Plan("R", "P(max)", 2), "0:R->P(max)");
}

TEST(TransitionPlannerTest, TwoHopTransitionsGoThroughReplicate) {
  EXPECT_EQ(Plan("S(0)", "P(sum)", 1), "0:S(0)->R 0:R->P(sum)");
  EXPECT_EQ(Plan("P(sum)", "P(max)", 1), "0:P(sum)->R 0:R->P(max)");
}

// Nested shards come off innermost first and go on outermost first.
TEST(TransitionPlannerTest, NestedShardsKeepEveryLayoutValid) {
  EXPECT_EQ(Plan("S(0),S(0)", "R,R", 1), "1:S(0)->R 0:S(0)->R");
  EXPECT_EQ(Plan("R,R", "S(0),S(0)", 1), "0:R->S(0) 1:R->S(0)");
  EXPECT_EQ(Plan("S(0),S(0)", "R,S(0)", 1), "1:S(0)->R 0:S(0)->R 1:R->S(0)");
  EXPECT_EQ(Plan("S(0),S(0)", "S(0),R", 1), "1:S(0)->R");
  EXPECT_EQ(Plan("S(0),R", "S(0),S(0)", 1), "1:R->S(0)");
  // A new outer shard under an existing inner one needs the inner gathered first.
  EXPECT_EQ(Plan("R,S(0)", "S(0),S(0)", 1), "1:S(0)->R 0:R->S(0) 1:R->S(0)");
  EXPECT_EQ(Plan("R,S(0)", "S(1),S(0)", 2), "0:R->S(1)");
}

// Two all-to-alls waiting on each other: one is split into a gather and a slice.
TEST(TransitionPlannerTest, CrossedAllToAllsAreBroken) {
  EXPECT_EQ(Plan("S(0),S(1)", "S(1),S(0)", 2), "1:S(1)->R 0:S(0)->S(1) 1:R->S(0)");
  EXPECT_EQ(Plan("S(0),R", "R,S(0)", 1), "0:S(0)->R 1:R->S(0)");
}

// Slices and reductions before gathers; Replicate -> Partial last.
TEST(TransitionPlannerTest, ShrinkingStepsFirstPartialLast) {
  EXPECT_EQ(Plan("S(0),P(sum)", "R,R", 2), "1:P(sum)->R 0:S(0)->R");
  EXPECT_EQ(Plan("P(sum),R", "R,S(1)", 2), "1:R->S(1) 0:P(sum)->R");
  EXPECT_EQ(Plan("P(sum),R", "R,P(prod)", 2), "0:P(sum)->R 1:R->P(prod)");
  EXPECT_EQ(Plan("R,S(0),P(avg)", "S(0),P(avg),R", 2),
            "2:P(avg)->R 1:S(0)->R 0:R->S(0) 1:R->P(avg)");
}

}  // namespace
}  // namespace tensor_parallel_internal
}  // namespace loom
