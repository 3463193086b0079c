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

// A small JSON reader, enough to check that the trace is well formed and to read
// its events back. It accepts exactly RFC 8259 JSON, except that \u escapes above
// 0x7f are not decoded (the trace writes none).
struct Json {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<Json> array;
  std::vector<std::pair<std::string, Json>> object;

  const Json* Find(absl::string_view key) const {
    for (const auto& [name, value] : object) {
      if (name == key) return &value;
    }
    return nullptr;
  }
  // Get returns the member `key`, or a null value when there is none.
  const Json& Get(absl::string_view key) const {
    static const Json kNull;
    const Json* value = Find(key);
    return value == nullptr ? kNull : *value;
  }
};

class JsonReader {
 public:
  explicit JsonReader(absl::string_view text) : text_(text) {}

  // Read returns the document, or nullopt with error() set.
  std::optional<Json> Read() {
    Json value;
    if (!Value(value)) return std::nullopt;
    SkipSpace();
    if (pos_ != text_.size()) {
      Fail("text after the document");
      return std::nullopt;
    }
    return value;
  }
  const std::string& error() const { return error_; }

 private:
  // Fail records the first error and returns false, so parsers can `return Fail(...)`.
  bool Fail(absl::string_view what) {
    if (error_.empty()) error_ = absl::StrCat(what, " at offset ", pos_);
    return false;
  }
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\r' || text_[pos_] == '\t')) {
      ++pos_;
    }
  }
  bool Consume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool Literal(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  bool Value(Json& out) {
    SkipSpace();
    if (pos_ >= text_.size()) return Fail("unexpected end");
    const char c = text_[pos_];
    if (c == '{') return Object(out);
    if (c == '[') return Array(out);
    if (c == '"') {
      out.type = Json::Type::kString;
      return String(out.string);
    }
    if (Literal("true")) {
      out.type = Json::Type::kBool;
      out.boolean = true;
      return true;
    }
    if (Literal("false")) {
      out.type = Json::Type::kBool;
      return true;
    }
    if (Literal("null")) return true;
    return Number(out);
  }
  bool Number(Json& out) {
    const size_t start = pos_;
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    const size_t digits = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    if (pos_ == digits) return Fail("expected a value");
    if (text_[digits] == '0' && pos_ - digits > 1) return Fail("leading zero");
    if (pos_ < text_.size() && text_[pos_] == '.') {
      ++pos_;
      const size_t fraction = pos_;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
      if (pos_ == fraction) return Fail("empty fraction");
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      const size_t exponent = pos_;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
      if (pos_ == exponent) return Fail("empty exponent");
    }
    out.type = Json::Type::kNumber;
    out.number = std::strtod(std::string(text_.substr(start, pos_ - start)).c_str(), nullptr);
    return true;
  }
  bool String(std::string& out) {
    ++pos_;  // The opening quote.
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return Fail("raw control character in string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= text_.size()) break;
      const char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (pos_ + 4 > text_.size()) return Fail("short \\u escape");
          const std::string hex(text_.substr(pos_, 4));
          char* end = nullptr;
          const long code = std::strtol(hex.c_str(), &end, 16);
          if (end != hex.c_str() + 4 || code > 0x7f) return Fail("unsupported \\u escape");
          out += static_cast<char>(code);
          pos_ += 4;
          break;
        }
        default:
          return Fail("bad escape");
      }
    }
    return Fail("unterminated string");
  }
  bool Array(Json& out) {
    ++pos_;
    out.type = Json::Type::kArray;
    if (Consume(']')) return true;
    do {
      Json element;
      if (!Value(element)) return false;
      out.array.push_back(std::move(element));
    } while (Consume(','));
    return Consume(']') || Fail("expected , or ]");
  }
  bool Object(Json& out) {
    ++pos_;
    out.type = Json::Type::kObject;
    if (Consume('}')) return true;
    do {
      SkipSpace();
      std::string key;
      if (pos_ >= text_.size() || text_[pos_] != '"' || !String(key)) {
        return Fail("expected a key");
      }
      if (!Consume(':')) return Fail("expected :");
      Json member;
      if (!Value(member)) return false;
      out.object.emplace_back(std::move(key), std::move(member));
    } while (Consume(','));
    return Consume('}') || Fail("expected , or }");
  }

  absl::string_view text_;
  size_t pos_ = 0;
  std::string error_;
};

Json ParseOrDie(const std::string& text) {
  JsonReader reader(text);
  std::optional<Json> json = reader.Read();
  EXPECT_TRUE(json.has_value()) << reader.error() << "\n" << text.substr(0, 2000);
  return json.value_or(Json{});
}

TEST(JsonReaderTest, RejectsBrokenJson) {
  for (const char* bad : {"{", "[1,]", "{\"a\" 1}", "\"a\nb\"", "01", "[1] x", "{\"a\": tru}"}) {
    JsonReader reader(bad);
    EXPECT_FALSE(reader.Read().has_value()) << bad;
  }
  JsonReader good("{\"a\": [1, -2.5e3, \"x\\u0001\\\"\", true, null]}");
  const std::optional<Json> json = good.Read();
  ASSERT_TRUE(json.has_value()) << good.error();
  EXPECT_EQ(json->Get("a").array[1].number, -2500);
  EXPECT_EQ(json->Get("a").array[2].string, "x\x01\"");
  EXPECT_TRUE(json->Get("a").array[3].boolean);
}

// The whole trace of the smallest pipeline with messages: 1F1B on 2 ranks, one
// microbatch, F = 1 and B = 2 (the simulator's timeline test has the times).
TEST(ChromeTraceTest, ExactTinyTrace) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, Make1F1BSchedule(2, 1));
  LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run, Simulate(s, SimulationCosts{}));
  LOOM_ASSERT_OK_AND_ASSIGN(std::string json, ToChromeTrace(s, run));
  EXPECT_EQ(json,
            R"({"traceEvents": [
{"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "1f1b: loop p=2 v=1, 1 microbatch"}},
{"name": "thread_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "rank 0"}},
{"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": 0, "args": {"sort_index": 0}},
{"name": "thread_name", "ph": "M", "pid": 1, "tid": 1, "args": {"name": "rank 1"}},
{"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": 1, "args": {"sort_index": 1}},
{"name": "F s0 mb0", "cat": "F", "ph": "X", "pid": 1, "tid": 0, "ts": 0, "dur": 1000, "args": {"stage": 0, "microbatch": 0}},
{"name": "B s0 mb0", "cat": "B", "ph": "X", "pid": 1, "tid": 0, "ts": 4000, "dur": 2000, "args": {"stage": 0, "microbatch": 0}},
{"name": "F s1 mb0", "cat": "F", "ph": "X", "pid": 1, "tid": 1, "ts": 1000, "dur": 1000, "args": {"stage": 1, "microbatch": 0}},
{"name": "B s1 mb0", "cat": "B", "ph": "X", "pid": 1, "tid": 1, "ts": 2000, "dur": 2000, "args": {"stage": 1, "microbatch": 0}},
{"name": "activation s0 -> s1 mb0", "cat": "message", "id": 1, "pid": 1, "ph": "s", "tid": 0, "ts": 500},
{"name": "activation s0 -> s1 mb0", "cat": "message", "id": 1, "pid": 1, "ph": "f", "bp": "e", "tid": 1, "ts": 1500},
{"name": "gradient s1 -> s0 mb0", "cat": "message", "id": 2, "pid": 1, "ph": "s", "tid": 1, "ts": 3000},
{"name": "gradient s1 -> s0 mb0", "cat": "message", "id": 2, "pid": 1, "ph": "f", "bp": "e", "tid": 0, "ts": 5000}
],
"displayTimeUnit": "ms",
"otherData": {"schedule": "1f1b", "layout": "loop p=2 v=1", "microbatches": 1, "microseconds_per_unit": 1000, "makespan": 6, "bubble_ratio": 0.5}
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
    const Json& events = json.Get("traceEvents");
    ASSERT_EQ(events.type, Json::Type::kArray);

    // (tid, name) -> the event; flows by id.
    std::map<std::pair<int64_t, std::string>, const Json*> slices;
    std::map<int64_t, std::vector<const Json*>> flows;
    std::map<int64_t, std::string> thread_names;
    for (const Json& e : events.array) {
      const std::string& ph = e.Get("ph").string;
      const int64_t tid = static_cast<int64_t>(e.Get("tid").number);
      EXPECT_EQ(e.Get("pid").number, 1);
      if (ph == "X") {
        EXPECT_TRUE(slices.emplace(std::make_pair(tid, e.Get("name").string), &e).second)
            << e.Get("name").string;
      } else if (ph == "s" || ph == "f") {
        flows[static_cast<int64_t>(e.Get("id").number)].push_back(&e);
      } else if (ph == "M" && e.Get("name").string == "thread_name") {
        thread_names[tid] = e.Get("args").Get("name").string;
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
        EXPECT_EQ(e.Get("ts").number, t.start * c.scale) << name;
        EXPECT_EQ(e.Get("dur").number, (t.end - t.start) * c.scale) << name;
        EXPECT_EQ(e.Get("cat").string, ActionKindName(t.action.kind));
        EXPECT_EQ(e.Get("args").Get("stage").number, static_cast<double>(t.action.stage));
        EXPECT_EQ(e.Get("args").Get("microbatch").number,
                  static_cast<double>(t.action.microbatch));
      }
    }
    EXPECT_EQ(static_cast<int64_t>(slices.size()), computes);
    EXPECT_EQ(static_cast<int64_t>(flows.size()), sends);
    for (const auto& [id, ends] : flows) {
      ASSERT_EQ(ends.size(), 2u) << "flow " << id;
      EXPECT_EQ(ends[0]->Get("ph").string, "s");
      EXPECT_EQ(ends[1]->Get("ph").string, "f");
      EXPECT_EQ(ends[1]->Get("bp").string, "e");
      EXPECT_EQ(ends[0]->Get("name").string, ends[1]->Get("name").string);
      EXPECT_NE(ends[0]->Get("tid").number, ends[1]->Get("tid").number);
      // Each end lies strictly inside a slice on its thread.
      for (const Json* end : ends) {
        bool inside = false;
        for (const auto& [key, slice] : slices) {
          const double ts = slice->Get("ts").number;
          const double dur = slice->Get("dur").number;
          inside = inside || (key.first == end->Get("tid").number &&
                              end->Get("ts").number > ts && end->Get("ts").number < ts + dur);
        }
        EXPECT_TRUE(inside) << end->Get("name").string;
      }
    }
    EXPECT_EQ(json.Get("otherData").Get("makespan").number, run.makespan);
    EXPECT_EQ(json.Get("otherData").Get("bubble_ratio").number, run.bubble_ratio);
    EXPECT_EQ(json.Get("otherData").Get("schedule").string, s.name);
  }
}

TEST(ChromeTraceTest, FlowsCanBeLeftOut) {
  LOOM_ASSERT_OK_AND_ASSIGN(Schedule s, Make1F1BSchedule(4, 8));
  LOOM_ASSERT_OK_AND_ASSIGN(SimulationResult run, Simulate(s, SimulationCosts{}));
  ChromeTraceOptions options;
  options.message_flows = false;
  LOOM_ASSERT_OK_AND_ASSIGN(std::string text, ToChromeTrace(s, run, options));
  EXPECT_THAT(text, Not(HasSubstr("\"ph\": \"s\"")));
  EXPECT_THAT(text, Not(HasSubstr("\"cat\": \"message\"")));
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
  for (const Json& e : json.Get("traceEvents").array) {
    slices += e.Get("ph").string == "X";
    flow_ends += e.Get("ph").string == "s" || e.Get("ph").string == "f";
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
  EXPECT_EQ(json.Get("otherData").Get("schedule").string, s.name);
  EXPECT_EQ(json.Get("traceEvents").array[0].Get("args").Get("name").string,
            s.name + ": loop p=1 v=1, 1 microbatch");
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
