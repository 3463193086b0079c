#include "tools/training/wire.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "core/buffer_view.h"
#include "core/status_macros.h"

namespace loom {

void ByteWriter::Str(absl::string_view s) {
  I64(static_cast<int64_t>(s.size()));
  out_.append(s.data(), s.size());
}

void ByteWriter::I64s(absl::Span<const int64_t> v) {
  I64(static_cast<int64_t>(v.size()));
  Raw(v.data(), v.size() * sizeof(int64_t));
}

void ByteWriter::F32s(absl::Span<const float> v) {
  I64(static_cast<int64_t>(v.size()));
  Raw(v.data(), v.size() * sizeof(float));
}

absl::StatusOr<int64_t> ByteReader::I64() {
  int64_t v = 0;
  LOOM_RETURN_IF_ERROR(Raw(&v, sizeof(v)));
  return v;
}

absl::StatusOr<double> ByteReader::F64() {
  double v = 0;
  LOOM_RETURN_IF_ERROR(Raw(&v, sizeof(v)));
  return v;
}

absl::StatusOr<std::string> ByteReader::Str() {
  LOOM_ASSIGN_OR_RETURN(const int64_t n, Count(1));
  std::string s(in_.substr(0, static_cast<size_t>(n)));
  in_.remove_prefix(static_cast<size_t>(n));
  return s;
}

absl::StatusOr<std::vector<int64_t>> ByteReader::I64s() {
  LOOM_ASSIGN_OR_RETURN(const int64_t n, Count(sizeof(int64_t)));
  std::vector<int64_t> v(static_cast<size_t>(n));
  LOOM_RETURN_IF_ERROR(Raw(v.data(), v.size() * sizeof(int64_t)));
  return v;
}

absl::StatusOr<std::vector<float>> ByteReader::F32s() {
  LOOM_ASSIGN_OR_RETURN(const int64_t n, Count(sizeof(float)));
  std::vector<float> v(static_cast<size_t>(n));
  LOOM_RETURN_IF_ERROR(Raw(v.data(), v.size() * sizeof(float)));
  return v;
}

absl::StatusOr<int64_t> ByteReader::Count(size_t element_bytes) {
  LOOM_ASSIGN_OR_RETURN(const int64_t n, I64());
  if (n < 0 || static_cast<uint64_t>(n) > in_.size() / element_bytes) {
    return absl::DataLossError(
        absl::StrCat("rank report: a count of ", n, " with ", in_.size(), " bytes left"));
  }
  return n;
}

absl::Status ByteReader::Raw(void* p, size_t n) {
  if (in_.size() < n) {
    return absl::DataLossError(
        absl::StrCat("rank report: ", n, " bytes wanted, ", in_.size(), " left"));
  }
  std::memcpy(p, in_.data(), n);
  in_.remove_prefix(n);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> GatherBytes(Communicator& world, const std::string& mine) {
  const int n = world.size();
  const int64_t my_size = static_cast<int64_t>(mine.size());
  std::vector<int64_t> sizes(static_cast<size_t>(n));
  LOOM_RETURN_IF_ERROR(world.Gather(ConstBufferView::Of(absl::MakeConstSpan(&my_size, 1)),
                                    BufferView::Of(absl::MakeSpan(sizes)), 0));
  auto bytes = [](std::string& s) {
    return absl::MakeSpan(reinterpret_cast<uint8_t*>(s.data()), s.size());
  };
  std::vector<std::string> out;
  if (world.rank() != 0) {
    std::string copy = mine;
    LOOM_RETURN_IF_ERROR(world.Send(ConstBufferView::Of(absl::MakeConstSpan(bytes(copy))), 0));
    return out;
  }
  out.resize(static_cast<size_t>(n));
  out[0] = mine;
  for (int r = 1; r < n; ++r) {
    out[r].resize(static_cast<size_t>(sizes[r]));
    LOOM_RETURN_IF_ERROR(world.Recv(BufferView::Of(bytes(out[r])), r));
  }
  return out;
}

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
  std::string out = "{\"traceEvents\":[";
  for (size_t r = 0; r < ranks.size(); ++r) {
    absl::StrAppend(&out, r == 0 ? "" : ",",
                    absl::StrFormat("{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%d,"
                                    "\"args\":{\"name\":\"rank %d\"}}",
                                    r, r));
    for (const TraceEvent& e : ranks[r]) {
      absl::StrAppend(
          &out, ",",
          absl::StrFormat("{\"name\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%d,\"ts\":%.3f,"
                          "\"dur\":%.3f}",
                          e.name, r, static_cast<double>(e.start_ns - origin) / 1e3,
                          static_cast<double>(e.end_ns - e.start_ns) / 1e3));
    }
  }
  absl::StrAppend(&out, "]}\n");
  return out;
}

}  // namespace loom
