#include "tools/training/wire.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/buffer_view.h"
#include "core/status_macros.h"
#include "nlohmann/json.hpp"

namespace loom {

std::string EncodeParameters(int tp_rank, const std::vector<GptParameter>& params) {
  ByteWriter w;
  w.I64(tp_rank);
  w.I64(static_cast<int64_t>(params.size()));
  for (const GptParameter& p : params) {
    w.Str(p.name);
    w.I64s(p.shape);
    w.I64s(p.full_shape);
    w.I64(static_cast<int64_t>(p.split));
    w.I64(p.parts);
    w.F32s(p.values);
  }
  return w.Take();
}

absl::StatusOr<RankParameters> DecodeParameters(absl::string_view bytes) {
  ByteReader r(bytes);
  RankParameters out;
  LOOM_ASSIGN_OR_RETURN(const int64_t tp_rank, r.I64());
  LOOM_ASSIGN_OR_RETURN(const int64_t count, r.I64());
  out.tp_rank = static_cast<int>(tp_rank);
  for (int64_t i = 0; i < count; ++i) {
    GptParameter p;
    LOOM_ASSIGN_OR_RETURN(p.name, r.Str());
    LOOM_ASSIGN_OR_RETURN(p.shape, r.I64s());
    LOOM_ASSIGN_OR_RETURN(p.full_shape, r.I64s());
    LOOM_ASSIGN_OR_RETURN(const int64_t split, r.I64());
    p.split = static_cast<TpSplit>(split);
    LOOM_ASSIGN_OR_RETURN(p.parts, r.I64());
    LOOM_ASSIGN_OR_RETURN(std::vector<float> values, r.F32s());
    out.params.push_back(std::move(p));
    out.values.push_back(std::move(values));
  }
  return out;
}

std::string EncodeExecution(const RankExecution& execution) {
  ByteWriter w;
  w.I64(static_cast<int64_t>(execution.actions.size()));
  for (const ExecutedAction& a : execution.actions) {
    w.Str(a.action.ToString());
    w.I64(absl::ToUnixNanos(a.start));
    w.I64(absl::ToUnixNanos(a.end));
  }
  return w.Take();
}

absl::StatusOr<std::vector<TraceEvent>> DecodeExecution(absl::string_view bytes) {
  ByteReader r(bytes);
  LOOM_ASSIGN_OR_RETURN(const int64_t count, r.I64());
  std::vector<TraceEvent> events;
  for (int64_t i = 0; i < count; ++i) {
    TraceEvent e;
    LOOM_ASSIGN_OR_RETURN(e.name, r.Str());
    LOOM_ASSIGN_OR_RETURN(e.start_ns, r.I64());
    LOOM_ASSIGN_OR_RETURN(e.end_ns, r.I64());
    events.push_back(std::move(e));
  }
  return events;
}

std::string TraceEvents(const std::vector<std::vector<TraceEvent>>& ranks) {
  int64_t origin = std::numeric_limits<int64_t>::max();
  for (const auto& events : ranks) {
    for (const TraceEvent& e : events) origin = std::min(origin, e.start_ns);
  }
  // Written by the JSON library (names quoted and escaped), one document.
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  for (size_t r = 0; r < ranks.size(); ++r) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", r},
                      {"args", {{"name", absl::StrCat("rank ", r)}}}});
    for (const TraceEvent& e : ranks[r]) {
      // Microseconds, rounded to the nanosecond the clocks give.
      events.push_back({{"name", e.name},
                        {"ph", "X"},
                        {"pid", 0},
                        {"tid", r},
                        {"ts", static_cast<double>(e.start_ns - origin) / 1e3},
                        {"dur", static_cast<double>(e.end_ns - e.start_ns) / 1e3}});
    }
  }
  const nlohmann::ordered_json trace = {{"traceEvents", std::move(events)}};
  std::string out =
      trace.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
  return out;
}

}  // namespace loom
