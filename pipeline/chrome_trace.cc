#include "pipeline/chrome_trace.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "core/status_macros.h"
#include "pipeline/action.h"

namespace loom {
namespace {

constexpr int kPid = 1;

std::string JsonQuote(absl::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", static_cast<unsigned char>(c));
        } else {
          // Bytes from 0x80 up pass through: JSON text is UTF-8.
          out += c;
        }
    }
  }
  out += "\"";
  return out;
}

// JsonNumber writes `value` so that it reads back as the same double: whole
// numbers without a fraction (timestamps usually are), others with the fewest
// digits that round-trip.
std::string JsonNumber(double value) {
  if (value == 0) return "0";  // Also turns -0 into 0.
  if (std::fabs(value) < 9007199254740992.0 && value == std::trunc(value)) {
    return absl::StrFormat("%.0f", value);
  }
  std::string text = absl::StrFormat("%.15g", value);
  if (std::strtod(text.c_str(), nullptr) != value) text = absl::StrFormat("%.17g", value);
  return text;
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

  std::string out = "{\"traceEvents\": [\n";
  bool first = true;
  const auto add = [&out, &first](const std::string& event) {
    if (!first) out += ",\n";
    first = false;
    out += event;
  };
  add(absl::StrCat("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": ", kPid,
                   ", \"tid\": 0, \"args\": {\"name\": ", JsonQuote(Describe(schedule)), "}}"));
  for (int64_t rank = 0; rank < schedule.num_ranks(); ++rank) {
    add(absl::StrCat("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": ", kPid,
                     ", \"tid\": ", rank, ", \"args\": {\"name\": \"rank ", rank, "\"}}"));
    add(absl::StrCat("{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": ", kPid,
                     ", \"tid\": ", rank, ", \"args\": {\"sort_index\": ", rank, "}}"));
  }

  absl::flat_hash_map<Action, Placed> computes;
  for (int64_t rank = 0; rank < schedule.num_ranks(); ++rank) {
    for (const TimedAction& timed : result.ranks[rank].actions) {
      const Action& a = timed.action;
      if (!IsCompute(a.kind)) continue;
      computes[a] = {rank, &timed};
      add(absl::StrCat("{\"name\": \"", ActionKindName(a.kind), " s", a.stage, " mb", a.microbatch,
                       "\", \"cat\": \"", ActionKindName(a.kind), "\", \"ph\": \"X\", \"pid\": ",
                       kPid, ", \"tid\": ", rank, ", \"ts\": ", JsonNumber(timed.start * scale),
                       ", \"dur\": ", JsonNumber((timed.end - timed.start) * scale),
                       ", \"args\": {\"stage\": ", a.stage, ", \"microbatch\": ", a.microbatch,
                       "}}"));
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
        const std::string common =
            absl::StrCat("{\"name\": \"", name, "\", \"cat\": \"message\", \"id\": ", id,
                         ", \"pid\": ", kPid);
        add(absl::StrCat(common, ", \"ph\": \"s\", \"tid\": ", rank, ", \"ts\": ",
                         JsonNumber((timed.start + timed.end) / 2 * scale), "}"));
        add(absl::StrCat(common, ", \"ph\": \"f\", \"bp\": \"e\", \"tid\": ", consumer->second.rank,
                         ", \"ts\": ", JsonNumber((to.start + to.end) / 2 * scale), "}"));
      }
    }
  }

  absl::StrAppend(&out, "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": {\"schedule\": ",
                  JsonQuote(schedule.name), ", \"layout\": ", JsonQuote(schedule.layout.ToString()),
                  ", \"microbatches\": ", schedule.num_microbatches,
                  ", \"microseconds_per_unit\": ", JsonNumber(scale),
                  ", \"makespan\": ", JsonNumber(result.makespan),
                  ", \"bubble_ratio\": ", JsonNumber(result.bubble_ratio), "}\n}\n");
  return out;
}

}  // namespace loom
