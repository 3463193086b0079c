#include "pipeline/chrome_trace.h"

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/status_matchers.h"
#include "nlohmann/json.hpp"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pipeline/action.h"
#include "pipeline/generators.h"
#include "pipeline/schedule.h"
#include "pipeline/simulator.h"
#include "topology/parallel_config.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using Json = nlohmann::json;

// ParseOrDie reads the trace back with the JSON library (a malformed trace fails
// the test) to check its events.
Json ParseOrDie(const std::string& text) {
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(json.is_discarded()) << text.substr(0, 2000);
  return json;
}

// Member `key` of `object`: Obj an object (null when missing), Str a string ("" when
// missing), Num a number (NaN when missing).
const Json& Obj(const Json& object, const char* key) {
  static const Json kNull;
  const auto it = object.find(key);
  return it == object.end() ? kNull : *it;
}
std::string Str(const Json& object, const char* key) {
  const Json& v = Obj(object, key);
  return v.is_string() ? v.get<std::string>() : std::string();
}
double Num(const Json& object, const char* key) {
  const Json& v = Obj(object, key);
  return v.is_number() ? v.get<double>() : std::nan("");
}

// The whole trace of the smallest pipeline with messages: 1F1B on 2 ranks, one
// microbatch, F = 1 and B = 2 (the simulator's timeline test has the times).
TEST(ChromeTraceTest, ExactTinyTrace) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, Make1F1BSchedule(2, 1));
  LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run, Simulate(s, SimulationCosts{}));
  LOOM_ASSERT_OK_AND_ASSIGN(std::string json, ToChromeTrace(s, run));
  EXPECT_EQ(json,
            R"({"traceEvents": [
{"name":"process_name","ph":"M","pid":1,"tid":0,"args":{"name":"1f1b: loop p=2 v=1, 1 microbatch"}},
{"name":"thread_name","ph":"M","pid":1,"tid":0,"args":{"name":"rank 0"}},
{"name":"thread_sort_index","ph":"M","pid":1,"tid":0,"args":{"sort_index":0}},
{"name":"thread_name","ph":"M","pid":1,"tid":1,"args":{"name":"rank 1"}},
{"name":"thread_sort_index","ph":"M","pid":1,"tid":1,"args":{"sort_index":1}},
{"name":"F s0 mb0","cat":"F","ph":"X","pid":1,"tid":0,"ts":0,"dur":1000,"args":{"stage":0,"microbatch":0}},
{"name":"B s0 mb0","cat":"B","ph":"X","pid":1,"tid":0,"ts":4000,"dur":2000,"args":{"stage":0,"microbatch":0}},
{"name":"F s1 mb0","cat":"F","ph":"X","pid":1,"tid":1,"ts":1000,"dur":1000,"args":{"stage":1,"microbatch":0}},
{"name":"B s1 mb0","cat":"B","ph":"X","pid":1,"tid":1,"ts":2000,"dur":2000,"args":{"stage":1,"microbatch":0}},
{"name":"activation s0 -> s1 mb0","cat":"message","id":1,"pid":1,"ph":"s","tid":0,"ts":500},
{"name":"activation s0 -> s1 mb0","cat":"message","id":1,"pid":1,"ph":"f","bp":"e","tid":1,"ts":1500},
{"name":"gradient s1 -> s0 mb0","cat":"message","id":2,"pid":1,"ph":"s","tid":1,"ts":3000},
{"name":"gradient s1 -> s0 mb0","cat":"message","id":2,"pid":1,"ph":"f","bp":"e","tid":0,"ts":5000}
],
"displayTimeUnit": "ms",
"otherData": {"schedule":"1f1b","layout":"loop p=2 v=1","microbatches":1,"microseconds_per_unit":1000,"makespan":6,"bubble_ratio":0.5}
}
)");
  ParseOrDie(json);
}

struct TraceCase {
  PipelineScheduleKind kind;
  int64_t p;
  int64_t m;
  int64_t v;
  StageCosts costs;
  double latency;
  double scale;
};

// Every compute action has one complete event on its rank's thread whose ts and
// dur are the simulator's start and end, scaled; every message between ranks has
// one flow whose ends sit inside its producer's and consumer's events.
TEST(ChromeTraceTest, EventsMatchTheSimulation) {
  const std::vector<TraceCase> cases = {
      {PipelineScheduleKind::kGPipe, 4, 8, 1, {1, 2, 1, 1}, 0, 1000},
      {PipelineScheduleKind::k1F1B, 4, 8, 1, {1, 2, 1, 1}, 0.25, 1000},
      {PipelineScheduleKind::kInterleaved1F1B, 4, 8, 2, {0.3, 0.7, 1, 1}, 0.1, 1},
      {PipelineScheduleKind::kZeroBubbleH1, 3, 6, 1, {1, 2, 1.1, 0.9}, 0, 12.5},
      {PipelineScheduleKind::kZeroBubbleV, 4, 8, 2, {1, 2, 1, 1}, 0, 1000},
      {PipelineScheduleKind::kZeroBubbleV, 2, 3, 2, {1e-3, 2e-3, 1e-3, 1e-3}, 0, 1e6},
  };
  for (const TraceCase& c : cases) {
    LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, MakeSchedule(c.kind, c.p, c.m, c.v));
    SCOPED_TRACE(absl::StrCat(s.name, " p=", c.p, " m=", c.m, " v=", c.v));
    SimulationCosts costs;
    costs.uniform = c.costs;
    costs.p2p_latency = c.latency;
    LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run, Simulate(s, costs));
    ChromeTraceOptions options;
    options.microseconds_per_unit = c.scale;
    LOOM_ASSERT_OK_AND_ASSIGN(std::string text, ToChromeTrace(s, run, options));
    const Json json = ParseOrDie(text);
    const Json& events = Obj(json, "traceEvents");
    ASSERT_TRUE(events.is_array());

    // (tid, name) -> the event; flows by id.
    std::map<std::pair<int64_t, std::string>, const Json*> slices;
    std::map<int64_t, std::vector<const Json*>> flows;
    std::map<int64_t, std::string> thread_names;
    for (const Json& e : events) {
      const std::string& ph = Str(e, "ph");
      const int64_t tid = static_cast<int64_t>(Num(e, "tid"));
      EXPECT_EQ(Num(e, "pid"), 1);
      if (ph == "X") {
        EXPECT_TRUE(slices.emplace(std::make_pair(tid, Str(e, "name")), &e).second)
            << Str(e, "name");
      } else if (ph == "s" || ph == "f") {
        flows[static_cast<int64_t>(Num(e, "id"))].push_back(&e);
      } else if (ph == "M" && Str(e, "name") == "thread_name") {
        thread_names[tid] = Str(Obj(e, "args"), "name");
      }
    }
    ASSERT_EQ(static_cast<int64_t>(thread_names.size()), c.p);
    for (int64_t r = 0; r < c.p; ++r) EXPECT_EQ(thread_names[r], absl::StrCat("rank ", r));

    int64_t computes = 0;
    int64_t sends = 0;
    for (int64_t r = 0; r < c.p; ++r) {
      for (const TimedAction& t : run.ranks[r].actions) {
        if (IsSend(t.action.kind)) ++sends;
        if (!IsCompute(t.action.kind)) continue;
        ++computes;
        const std::string name = absl::StrCat(ActionKindName(t.action.kind), " s", t.action.stage,
                                              " mb", t.action.microbatch);
        const auto it = slices.find({r, name});
        ASSERT_NE(it, slices.end()) << name << " on rank " << r;
        const Json& e = *it->second;
        EXPECT_EQ(Num(e, "ts"), t.start * c.scale) << name;
        EXPECT_EQ(Num(e, "dur"), (t.end - t.start) * c.scale) << name;
        EXPECT_EQ(Str(e, "cat"), ActionKindName(t.action.kind));
        EXPECT_EQ(Num(Obj(e, "args"), "stage"), static_cast<double>(t.action.stage));
        EXPECT_EQ(Num(Obj(e, "args"), "microbatch"),
                  static_cast<double>(t.action.microbatch));
      }
    }
    EXPECT_EQ(static_cast<int64_t>(slices.size()), computes);
    EXPECT_EQ(static_cast<int64_t>(flows.size()), sends);
    for (const auto& [id, ends] : flows) {
      ASSERT_EQ(ends.size(), 2u) << "flow " << id;
      EXPECT_EQ(Str(*ends[0], "ph"), "s");
      EXPECT_EQ(Str(*ends[1], "ph"), "f");
      EXPECT_EQ(Str(*ends[1], "bp"), "e");
      EXPECT_EQ(Str(*ends[0], "name"), Str(*ends[1], "name"));
      EXPECT_NE(Num(*ends[0], "tid"), Num(*ends[1], "tid"));
      // Each end lies strictly inside a slice on its thread.
      for (const Json* end : ends) {
        bool inside = false;
        for (const auto& [key, slice] : slices) {
          const double ts = Num(*slice, "ts");
          const double dur = Num(*slice, "dur");
          inside = inside || (key.first == Num(*end, "tid") &&
                              Num(*end, "ts") > ts && Num(*end, "ts") < ts + dur);
        }
        EXPECT_TRUE(inside) << Str(*end, "name");
      }
    }
    EXPECT_EQ(Num(Obj(json, "otherData"), "makespan"), run.makespan);
    EXPECT_EQ(Num(Obj(json, "otherData"), "bubble_ratio"), run.bubble_ratio);
    EXPECT_EQ(Str(Obj(json, "otherData"), "schedule"), s.name);
  }
}

TEST(ChromeTraceTest, FlowsCanBeLeftOut) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, Make1F1BSchedule(4, 8));
  LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run, Simulate(s, SimulationCosts{}));
  ChromeTraceOptions options;
  options.message_flows = false;
  LOOM_ASSERT_OK_AND_ASSIGN(std::string text, ToChromeTrace(s, run, options));
  EXPECT_THAT(text, Not(HasSubstr("\"ph\":\"s\"")));
  EXPECT_THAT(text, Not(HasSubstr("\"cat\":\"message\"")));
  EXPECT_THAT(text, HasSubstr("\"ph\":\"X\""));  // the computes are there
  ParseOrDie(text);
}

// A zero-length compute gets its event but no flow: a viewer could not tell
// which slice the arrow belongs to.
TEST(ChromeTraceTest, ZeroLengthComputesHaveNoFlows) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, Make1F1BSchedule(2, 2));
  SimulationCosts costs;
  costs.uniform.forward = 0;
  LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run, Simulate(s, costs));
  LOOM_ASSERT_OK_AND_ASSIGN(std::string text, ToChromeTrace(s, run));
  const Json json = ParseOrDie(text);
  int64_t slices = 0;
  int64_t flow_ends = 0;
  for (const Json& e : Obj(json, "traceEvents")) {
    slices += Str(e, "ph") == "X";
    flow_ends += Str(e, "ph") == "s" || Str(e, "ph") == "f";
  }
  EXPECT_EQ(slices, 8);
  EXPECT_EQ(flow_ends, 4);  // The two gradients; the activations leave zero-length F's.
}

TEST(ChromeTraceTest, EscapesTheScheduleName) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, MakeGPipeSchedule(1, 1));
  s.name = "a \"quoted\" \\ name\nwith\ttabs\x01 and \xc3\xa9";
  LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run, Simulate(s, SimulationCosts{}));
  LOOM_ASSERT_OK_AND_ASSIGN(std::string text, ToChromeTrace(s, run));
  EXPECT_THAT(text, HasSubstr(R"("a \"quoted\" \\ name\nwith\ttabs\u0001 and )"));
  const Json json = ParseOrDie(text);
  EXPECT_EQ(Str(Obj(json, "otherData"), "schedule"), s.name);
  EXPECT_EQ(Str(Obj(Obj(json, "traceEvents")[0], "args"), "name"),
            s.name + ": loop p=1 v=1, 1 microbatch");
  // Bytes that are not UTF-8 become U+FFFD: the trace stays readable JSON.
  s.name = "bad \xff byte";
  LOOM_ASSERT_OK_AND_ASSIGN(text, ToChromeTrace(s, run));
  EXPECT_EQ(Str(Obj(ParseOrDie(text), "otherData"), "schedule"), "bad \xef\xbf\xbd byte");
}

TEST(ChromeTraceTest, Errors) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, Make1F1BSchedule(2, 2));
  LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run, Simulate(s, SimulationCosts{}));
  for (const double scale : {0.0, -1.0, std::numeric_limits<double>::infinity(),
                             std::numeric_limits<double>::quiet_NaN()}) {
    ChromeTraceOptions options;
    options.microseconds_per_unit = scale;
    EXPECT_THAT(ToChromeTrace(s, run, options),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr(absl::StrCat("microseconds_per_unit=", scale,
                                                " must be a finite positive number"))));
  }
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule bigger, Make1F1BSchedule(3, 2));
  EXPECT_THAT(ToChromeTrace(bigger, run),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "the simulation has 2 ranks, the schedule \"1f1b\" has 3"));
}

}  // namespace
}  // namespace loom
