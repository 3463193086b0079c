// ByteWriter / ByteReader: a flat byte encoding of host-order integers, doubles,
// strings and arrays, for what ranks send one another as bytes (reports to rank 0,
// checkpoint indexes, status agreement). Every rank of a job shares one byte order.
// ByteReader checks every length against what is left: a short or corrupt input is
// DataLoss naming the counts, never an allocation larger than the input.
//
// Example:
//   ByteWriter w;
//   w.I64(42);
//   w.Str("name");
//   ByteReader r(w.Take());
//   LOOM_ASSIGN_OR_RETURN(int64_t v, r.I64());   // 42
//   r.F32s();   // DataLoss: "bytes: a count of ... with 0 bytes left"
#ifndef LOOM_CORE_BYTE_CODEC_H_
#define LOOM_CORE_BYTE_CODEC_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace loom {

class ByteWriter {
 public:
  void I64(int64_t v) { Raw(&v, sizeof(v)); }
  void F64(double v) { Raw(&v, sizeof(v)); }
  void Str(absl::string_view s);
  void I64s(absl::Span<const int64_t> v);
  void F32s(absl::Span<const float> v);
  std::string Take() { return std::move(out_); }

 private:
  void Raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  std::string out_;
};

class ByteReader {
 public:
  explicit ByteReader(absl::string_view in) : in_(in) {}
  absl::StatusOr<int64_t> I64();
  absl::StatusOr<double> F64();
  absl::StatusOr<std::string> Str();
  absl::StatusOr<std::vector<int64_t>> I64s();
  absl::StatusOr<std::vector<float>> F32s();
  bool done() const { return in_.empty(); }

 private:
  absl::StatusOr<int64_t> Count(size_t element_bytes);
  absl::Status Raw(void* p, size_t n);
  absl::string_view in_;
};

}  // namespace loom

#endif  // LOOM_CORE_BYTE_CODEC_H_
