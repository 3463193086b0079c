#include "tools/training/metrics_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/posix.h"
#include "core/status_macros.h"
#include "core/atomic_file.h"

namespace loom {
namespace {

// The keys, in the order FormatMetricsLine writes them.
enum Key { kStep, kLoss, kEvalLoss, kLr, kTokensPerSecond, kBytesSent, kSeconds, kKeyCount };
constexpr std::array<absl::string_view, kKeyCount> kKeys = {
    "step", "loss", "eval_loss", "lr", "tokens_per_second", "bytes_sent", "seconds"};

// Number prints `v` with the fewest digits, from 15 to 17 (17 always suffice), that
// read back as `v` exactly: 0.1 comes out as 0.1, not 0.10000000000000001.
std::string Number(double v) {
  if (!std::isfinite(v)) return "null";
  char text[32];
  for (int digits = 15;; ++digits) {
    std::snprintf(text, sizeof(text), "%.*g", digits, v);
    double back = 0.0;
    if (digits == 17 || (absl::SimpleAtod(text, &back) && back == v)) return text;
  }
}

// LineParser reads one object of the format; errors are InvalidArgument
// "column N: ...", columns counted from 1.
class LineParser {
 public:
  explicit LineParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<MetricsLine> Parse() {
    SkipBlanks();
    LOOM_RETURN_IF_ERROR(Expect('{', "at the start of the line"));
    SkipBlanks();
    if (!Consume('}')) {
      while (true) {
        LOOM_RETURN_IF_ERROR(Member());
        SkipBlanks();
        if (Consume('}')) break;
        LOOM_RETURN_IF_ERROR(Expect(',', "or '}' after a value"));
        SkipBlanks();
      }
    }
    SkipBlanks();
    if (pos_ != text_.size()) return Error(absl::StrCat("found ", Found(), " after the object"));
    return Assemble();
  }

 private:
  struct Value {
    std::optional<absl::string_view> number;  // nullopt: null
    size_t column = 0;
  };

  absl::Status Error(absl::string_view what) const { return ErrorAt(pos_, what); }
  static absl::Status ErrorAt(size_t pos, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("column ", pos + 1, ": ", what));
  }
  std::string Found() const {
    if (pos_ == text_.size()) return "the end of the line";
    const char c = text_[pos_];
    if (c >= ' ' && c <= '~') return absl::StrCat("'", std::string(1, c), "'");
    return absl::StrCat("'", absl::CHexEscape(std::string(1, c)), "'");  // e.g. '\x01'
  }
  bool AtDigit() const { return pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9'; }
  void SkipBlanks() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Consume(char c) {
    if (pos_ == text_.size() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  absl::Status Expect(char c, absl::string_view context) {
    if (Consume(c)) return absl::OkStatus();
    return Error(absl::StrCat("expected '", std::string(1, c), "' ", context, ", found ", Found()));
  }

  // Member reads "key": value into values_.
  absl::Status Member() {
    const size_t key_pos = pos_;
    LOOM_RETURN_IF_ERROR(Expect('"', "to open a key"));
    const size_t end = text_.find_first_of("\"\\", pos_);
    if (end == absl::string_view::npos) return ErrorAt(key_pos, "a key without its closing '\"'");
    if (text_[end] == '\\') {
      return ErrorAt(end, "an escape in a key; no key of this format has one");
    }
    const absl::string_view key = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    size_t k = 0;
    while (k < kKeys.size() && kKeys[k] != key) ++k;
    if (k == kKeys.size()) return ErrorAt(key_pos, absl::StrCat("unknown key \"", key, "\""));
    if (values_[k].has_value()) return ErrorAt(key_pos, absl::StrCat("repeated key \"", key, "\""));
    SkipBlanks();
    LOOM_RETURN_IF_ERROR(Expect(':', absl::StrCat("after \"", key, "\"")));
    SkipBlanks();
    const size_t value_pos = pos_;
    if (absl::StartsWith(text_.substr(pos_), "null")) {
      pos_ += 4;
      values_[k] = Value{std::nullopt, value_pos};
      return absl::OkStatus();
    }
    // JSON's number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
    Consume('-');
    if (!AtDigit()) return Error(absl::StrCat("expected a number or null, found ", Found()));
    if (!Consume('0')) {
      while (AtDigit()) ++pos_;
    }
    if (Consume('.')) {
      if (!AtDigit()) return Error(absl::StrCat("expected a digit after '.', found ", Found()));
      while (AtDigit()) ++pos_;
    }
    if (Consume('e') || Consume('E')) {
      if (!Consume('+')) Consume('-');
      if (!AtDigit()) return Error(absl::StrCat("expected an exponent, found ", Found()));
      while (AtDigit()) ++pos_;
    }
    values_[k] = Value{text_.substr(value_pos, pos_ - value_pos), value_pos};
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> Integer(Key k) const {
    if (!values_[k].has_value()) return absl::InvalidArgumentError(Missing(k));
    const Value& v = *values_[k];
    if (!v.number.has_value()) return ErrorAt(v.column, absl::StrCat(kKeys[k], " cannot be null"));
    int64_t out = 0;
    if (v.number->find_first_of(".eE") != absl::string_view::npos) {
      return ErrorAt(v.column, absl::StrCat(kKeys[k], " must be an integer, found ", *v.number));
    }
    if (!absl::SimpleAtoi(*v.number, &out)) {
      return ErrorAt(v.column, absl::StrCat(kKeys[k], " ", *v.number, " is out of int64 range"));
    }
    return out;
  }

  // Double returns the value of key k, NaN for null, nullopt when the key is missing.
  std::optional<double> Double(Key k) const {
    if (!values_[k].has_value()) return std::nullopt;
    const Value& v = *values_[k];
    double out = std::numeric_limits<double>::quiet_NaN();
    // Cannot fail: the token is a JSON number (too large ones read as infinity).
    if (v.number.has_value()) (void)absl::SimpleAtod(*v.number, &out);
    return out;
  }

  absl::StatusOr<double> Required(Key k) const {
    std::optional<double> v = Double(k);
    if (!v.has_value()) return absl::InvalidArgumentError(Missing(k));
    return *v;
  }

  static std::string Missing(Key k) { return absl::StrCat("missing key \"", kKeys[k], "\""); }

  absl::StatusOr<MetricsLine> Assemble() const {
    MetricsLine line;
    LOOM_ASSIGN_OR_RETURN(line.step, Integer(kStep));
    LOOM_ASSIGN_OR_RETURN(line.loss, Required(kLoss));
    line.eval_loss = Double(kEvalLoss);
    LOOM_ASSIGN_OR_RETURN(line.lr, Required(kLr));
    LOOM_ASSIGN_OR_RETURN(line.tokens_per_second, Required(kTokensPerSecond));
    LOOM_ASSIGN_OR_RETURN(line.bytes_sent, Integer(kBytesSent));
    LOOM_ASSIGN_OR_RETURN(line.seconds, Required(kSeconds));
    return line;
  }

  const absl::string_view text_;
  size_t pos_ = 0;
  std::array<std::optional<Value>, kKeyCount> values_;
};

absl::Status ErrnoError(int error, absl::string_view who, absl::string_view call,
                        const std::string& path) {
  return ErrnoToStatus(error, absl::StrCat(who, ": ", call, "(", path, ")"));
}

// ReadText returns the contents of the regular file `path`.
absl::StatusOr<std::string> ReadText(const std::string& path, absl::string_view who) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoError(errno, who, "open", path);
  struct stat info;
  if (fstat(fd, &info) != 0) {
    const int error = errno;
    close(fd);
    return ErrnoError(error, who, "fstat", path);
  }
  if (!S_ISREG(info.st_mode)) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(who, ": ", path, " is not a regular file"));
  }
  std::string text;
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      close(fd);
      return ErrnoError(error, who, "read", path);
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return text;
}

struct ParsedLine {
  MetricsLine line;
  absl::string_view text;
};

// ParseLines parses every non-blank line of `text`, read from `path`. With
// `drop_torn_tail`, a malformed last line that lacks its newline is left out.
absl::StatusOr<std::vector<ParsedLine>> ParseLines(absl::string_view text, const std::string& path,
                                                   absl::string_view who, bool drop_torn_tail) {
  const std::vector<absl::string_view> pieces = absl::StrSplit(text, '\n');
  std::vector<ParsedLine> lines;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const absl::string_view piece = pieces[i];
    if (absl::StripAsciiWhitespace(piece).empty()) continue;
    absl::StatusOr<MetricsLine> line = ParseMetricsLine(piece);
    if (!line.ok()) {
      // Only the last piece can lack a newline: the split leaves "" after a final one.
      if (drop_torn_tail && i + 1 == pieces.size()) break;
      constexpr size_t kShown = 160;
      return absl::DataLossError(
          absl::StrCat(who, ": ", path, " line ", i + 1, ": ", line.status().message(),
                       " in: ", piece.substr(0, kShown), piece.size() > kShown ? "..." : ""));
    }
    lines.push_back({*line, piece});
  }
  return lines;
}

constexpr char kLogName[] = "MetricsLog";

// OpenForAppend opens the regular file `path` for appending, with `flags` besides.
absl::StatusOr<int> OpenForAppend(const std::string& path, int flags) {
  // O_NONBLOCK: opening a FIFO must not wait for a reader (regular files ignore it).
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK | flags, 0644);
  if (fd < 0) return ErrnoError(errno, kLogName, "open", path);
  struct stat info;
  if (fstat(fd, &info) != 0) {
    const int error = errno;
    close(fd);
    return ErrnoError(error, kLogName, "fstat", path);
  }
  if (!S_ISREG(info.st_mode)) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat(kLogName, ": ", path, " is not a regular file"));
  }
  return fd;
}

}  // namespace

std::string FormatMetricsLine(const MetricsLine& line) {
  std::string text = absl::StrCat("{\"step\":", line.step, ",\"loss\":", Number(line.loss));
  if (line.eval_loss.has_value())
    absl::StrAppend(&text, ",\"eval_loss\":", Number(*line.eval_loss));
  absl::StrAppend(&text, ",\"lr\":", Number(line.lr),
                  ",\"tokens_per_second\":", Number(line.tokens_per_second),
                  ",\"bytes_sent\":", line.bytes_sent, ",\"seconds\":", Number(line.seconds), "}");
  return text;
}

absl::StatusOr<MetricsLine> ParseMetricsLine(absl::string_view text) {
  return LineParser(text).Parse();
}

absl::StatusOr<MetricsLog> MetricsLog::Open(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(const int fd, OpenForAppend(path, O_TRUNC));
  return MetricsLog(fd, path);
}

absl::StatusOr<MetricsLog> MetricsLog::OpenForResume(const std::string& path, int64_t resume_step) {
  absl::StatusOr<std::string> text = ReadText(path, kLogName);
  if (!text.ok() && absl::IsNotFound(text.status())) text = std::string();
  if (!text.ok()) return text.status();
  LOOM_ASSIGN_OR_RETURN(const std::vector<ParsedLine> lines,
                        ParseLines(*text, path, kLogName, /*drop_torn_tail=*/true));
  // The kept lines as they were written, byte for byte.
  std::string kept;
  for (const ParsedLine& parsed : lines) {
    if (parsed.line.step < resume_step) absl::StrAppend(&kept, parsed.text, "\n");
  }
  LOOM_RETURN_IF_ERROR(WriteFileAtomically(path, kept));
  LOOM_ASSIGN_OR_RETURN(const int fd, OpenForAppend(path, 0));
  return MetricsLog(fd, path);
}

MetricsLog::MetricsLog(MetricsLog&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)), failed_(other.failed_) {}

MetricsLog& MetricsLog::operator=(MetricsLog&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    failed_ = other.failed_;
  }
  return *this;
}

MetricsLog::~MetricsLog() { Close(); }

void MetricsLog::Close() {
  // Every line went out whole in Append's write(2); close has nothing left to report.
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

absl::Status MetricsLog::Append(const MetricsLine& line) {
  if (fd_ < 0 || failed_) {
    return absl::FailedPreconditionError(
        absl::StrCat(kLogName, ": ", path_, fd_ < 0 ? " is not open" : " failed an earlier write"));
  }
  const std::string text = absl::StrCat(FormatMetricsLine(line), "\n");
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      failed_ = true;
      return ErrnoError(errno, kLogName, "write", path_);
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<MetricsLine>> ReadMetricsFile(const std::string& path) {
  constexpr char kName[] = "ReadMetricsFile";
  LOOM_ASSIGN_OR_RETURN(const std::string text, ReadText(path, kName));
  LOOM_ASSIGN_OR_RETURN(const std::vector<ParsedLine> parsed,
                        ParseLines(text, path, kName, /*drop_torn_tail=*/false));
  std::vector<MetricsLine> lines;
  lines.reserve(parsed.size());
  for (const ParsedLine& p : parsed) lines.push_back(p.line);
  return lines;
}

}  // namespace loom
