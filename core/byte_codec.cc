#include "core/byte_codec.h"

#include <cstring>

#include "absl/strings/str_cat.h"
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
        absl::StrCat("bytes: a count of ", n, " with ", in_.size(), " bytes left"));
  }
  return n;
}

absl::Status ByteReader::Raw(void* p, size_t n) {
  if (in_.size() < n) {
    return absl::DataLossError(
        absl::StrCat("bytes: ", n, " bytes wanted, ", in_.size(), " left"));
  }
  std::memcpy(p, in_.data(), n);
  in_.remove_prefix(n);
  return absl::OkStatus();
}

}  // namespace loom
