#include "pipeline/chrome_trace.h"

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/status_macros.h"
#include "nlohmann/json.hpp"
#include "pipeline/action.h"

namespace loom {
namespace {

constexpr int kPid = 1;

using Json = nlohmann::ordered_json;

// Dump: compact JSON; bytes that are not UTF-8 (a schedule name is the caller's
// text) become U+FFFD instead of an exception.
std::string Dump(const Json& json) {
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Number: a whole value (timestamps usually are) as an integer, so that it prints
// without a fraction; others as the double, which the library prints with the
// fewest digits that read back as the same value. -0 becomes 0.
Json Number(double value) {
  if (value == 0) return 0;
  if (std::fabs(value) < 9007199254740992.0 && value == std::trunc(value)) {
    return static_cast<int64_t>(value);
  }
  return value;
}

std::string Describe(const Schedule& schedule) {
  const int64_t m = schedule.num_microbatches;
  return absl::StrCat(schedule.name.empty() ? "schedule" : schedule.name, ": ",
                      schedule.layout.ToString(), ", ", m, m == 1 ? " microbatch" : " microbatches");
}

// ConsumerOf returns the compute that takes the data `producer` sends to another
// rank, or nullopt when it sends nothing (its neighbour stage is on its own rank,
// it is at the end of the pipeline, or it is a W).
std::optional<Action> ConsumerOf(const StageLayout& layout, const Action& producer) {
  if (producer.kind == ActionKind::kForward) {
    const int64_t next = producer.stage + 1;
    if (next >= layout.num_stages() || layout.RankOf(next) == layout.RankOf(producer.stage)) {
      return std::nullopt;
    }
    return Action{ActionKind::kForward, next, producer.microbatch};
  }
  if (producer.kind == ActionKind::kBackward || producer.kind == ActionKind::kBackwardInput) {
    const int64_t previous = producer.stage - 1;
    if (previous < 0 || layout.RankOf(previous) == layout.RankOf(producer.stage)) {
      return std::nullopt;
    }
    // The consumer's kind (B or I) is looked up by the caller.
    return Action{producer.kind, previous, producer.microbatch};
  }
  return std::nullopt;
}

struct Placed {
  int64_t rank = 0;
  const TimedAction* timed = nullptr;
};

}  // namespace

absl::StatusOr<std::string> ToChromeTrace(const Schedule& schedule, const SimulationResult& result,
                                          const ChromeTraceOptions& options) {
  LOOM_RETURN_IF_ERROR(CheckSimulationOf(schedule, result));
  const double scale = options.microseconds_per_unit;
  if (!std::isfinite(scale) || scale <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "microseconds_per_unit=", scale, " must be a finite positive number"));
  }

  // One event per line, so that a trace diffs line by line; each written by the
  // JSON library (quoting, escaping, numbers).
  std::string out = "{\"traceEvents\": [\n";
  bool first = true;
  const auto add = [&out, &first](const Json& event) {
    if (!first) out += ",\n";
    first = false;
    out += Dump(event);
  };
  add(Json{{"name", "process_name"}, {"ph", "M"}, {"pid", kPid}, {"tid", 0},
           {"args", {{"name", Describe(schedule)}}}});
  for (int64_t rank = 0; rank < schedule.num_ranks(); ++rank) {
    add(Json{{"name", "thread_name"}, {"ph", "M"}, {"pid", kPid}, {"tid", rank},
             {"args", {{"name", absl::StrCat("rank ", rank)}}}});
    add(Json{{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", kPid}, {"tid", rank},
             {"args", {{"sort_index", rank}}}});
  }

  absl::flat_hash_map<Action, Placed> computes;
  for (int64_t rank = 0; rank < schedule.num_ranks(); ++rank) {
    for (const TimedAction& timed : result.ranks[rank].actions) {
      const Action& a = timed.action;
      if (!IsCompute(a.kind)) continue;
      computes[a] = {rank, &timed};
      add(Json{{"name", absl::StrCat(ActionKindName(a.kind), " s", a.stage, " mb", a.microbatch)},
               {"cat", ActionKindName(a.kind)},
               {"ph", "X"},
               {"pid", kPid},
               {"tid", rank},
               {"ts", Number(timed.start * scale)},
               {"dur", Number((timed.end - timed.start) * scale)},
               {"args", {{"stage", a.stage}, {"microbatch", a.microbatch}}}});
    }
  }

  if (options.message_flows) {
    int64_t id = 0;
    for (int64_t rank = 0; rank < schedule.num_ranks(); ++rank) {
      for (const TimedAction& timed : result.ranks[rank].actions) {
        const std::optional<Action> wanted = ConsumerOf(schedule.layout, timed.action);
        if (!wanted.has_value()) continue;
        auto consumer = computes.find(*wanted);
        if (consumer == computes.end() && wanted->kind != ActionKind::kForward) {
          // A backward's gradient may feed either form of the previous stage's
          // backward: B, or I when that stage splits its backward.
          Action other = *wanted;
          other.kind = other.kind == ActionKind::kBackward ? ActionKind::kBackwardInput
                                                           : ActionKind::kBackward;
          consumer = computes.find(other);
        }
        if (consumer == computes.end()) continue;
        const TimedAction& to = *consumer->second.timed;
        if (timed.end <= timed.start || to.end <= to.start) continue;
        ++id;
        const Action& a = timed.action;
        const std::string name =
            absl::StrCat(a.kind == ActionKind::kForward ? "activation" : "gradient", " s", a.stage,
                         " -> s", wanted->stage, " mb", a.microbatch);
        Json start{{"name", name}, {"cat", "message"}, {"id", id}, {"pid", kPid}};
        Json finish = start;
        start["ph"] = "s";
        start["tid"] = rank;
        start["ts"] = Number((timed.start + timed.end) / 2 * scale);
        finish["ph"] = "f";
        finish["bp"] = "e";
        finish["tid"] = consumer->second.rank;
        finish["ts"] = Number((to.start + to.end) / 2 * scale);
        add(start);
        add(finish);
      }
    }
  }

  const Json other{{"schedule", schedule.name},
                   {"layout", schedule.layout.ToString()},
                   {"microbatches", schedule.num_microbatches},
                   {"microseconds_per_unit", Number(scale)},
                   {"makespan", Number(result.makespan)},
                   {"bubble_ratio", Number(result.bubble_ratio)}};
  absl::StrAppend(&out, "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": ", Dump(other),
                  "\n}\n");
  return out;
}

}  // namespace loom
