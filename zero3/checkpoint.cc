#include "zero3/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/config.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/buffer_view.h"
#include "core/crc32c.h"
#include "core/posix.h"
#include "core/shape.h"
#include "core/status_macros.h"
#include "zero3/internal/checkpoint_write_hook.h"

// Rank files hold floats and header fields in the host's byte order; every target
// Loom builds for (x86-64, AArch64) is little-endian, which the format fixes.
#ifndef ABSL_IS_LITTLE_ENDIAN
#error "zero3/checkpoint writes little-endian files and supports little-endian hosts only"
#endif

namespace loom {
namespace {

constexpr char kLatestName[] = "LATEST";
constexpr char kManifestName[] = "MANIFEST";
constexpr char kSubdirPrefix[] = "step-";
constexpr char kManifestMagic[] = "loom-checkpoint";
constexpr int kFormatVersion = 1;
constexpr char kFileMagic[8] = {'L', 'O', 'O', 'M', 'C', 'K', 'P', 'T'};
constexpr int64_t kHeaderBytes = 64;
constexpr int64_t kHeaderCrcOffset = 60;

// ---------------------------------------------------------------------------
// POSIX helpers (core/posix.h): every errno becomes a Status naming the call and path.

absl::Status Errno(int error_number, absl::string_view call, absl::string_view path) {
  return ErrnoToStatus(error_number, absl::StrCat(call, "(", path, ")"));
}

// FileKind names what a non-regular file is, for the refusal's message.
const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

// OpenRegularForRead opens `path` for reading only if it is a regular file. The open
// itself does not block (O_NONBLOCK: a FIFO with no writer would otherwise wait
// forever for one); FailedPrecondition naming the path and what it is otherwise.
absl::StatusOr<ScopedFd> OpenRegularForRead(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(ScopedFd fd, OpenFile(path, O_RDONLY | O_NONBLOCK));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Errno(errno, "fstat", path);
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is ", FileKind(st.st_mode), ", not a regular file; not reading it"));
  }
  // Regular files ignore O_NONBLOCK; cleared anyway so reads keep their usual meaning.
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return Errno(errno, "fcntl", path);
  }
  return fd;
}

absl::Status FsyncDir(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(ScopedFd fd, OpenFile(path, O_RDONLY | O_DIRECTORY));
  if (::fsync(fd.get()) != 0) return Errno(errno, "fsync", path);
  return fd.Close(path);
}

absl::Status Rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return Errno(errno, "rename", absl::StrCat(from, ", ", to));
  }
  return absl::OkStatus();
}

// PreadFull reads out.size() bytes at `offset`; returns how many it got (fewer only
// at end of file).
absl::StatusOr<size_t> PreadFull(int fd, absl::Span<std::byte> out, int64_t offset,
                                 absl::string_view path) {
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done,
                              static_cast<off_t>(offset + static_cast<int64_t>(done)));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, "pread", path);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  LOOM_ASSIGN_OR_RETURN(ScopedFd fd, OpenRegularForRead(path));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Errno(errno, "fstat", path);
  std::string text(static_cast<size_t>(st.st_size), '\0');
  LOOM_ASSIGN_OR_RETURN(const size_t n,
                        PreadFull(fd.get(), absl::MakeSpan(reinterpret_cast<std::byte*>(text.data()),
                                                           text.size()),
                                  0, path));
  text.resize(n);
  return text;
}

absl::Span<const std::byte> Bytes(absl::string_view s) {
  return absl::MakeConstSpan(reinterpret_cast<const std::byte*>(s.data()), s.size());
}

// FileWriter appends to a file written front to back, reporting every write to the
// test hook (internal/checkpoint_write_hook.h), if any.
class FileWriter {
 public:
  FileWriter(int fd, std::string path, const checkpoint_internal::WriteHook& hook)
      : fd_(fd), path_(std::move(path)), hook_(hook) {}

  absl::Status Write(absl::Span<const std::byte> data) {
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = ::write(fd_, data.data() + done, data.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return Errno(errno, "write", path_);
      }
      done += static_cast<size_t>(n);
    }
    written_ += static_cast<int64_t>(data.size());
    if (hook_) LOOM_RETURN_IF_ERROR(hook_(path_, written_));
    return absl::OkStatus();
  }
  int64_t written() const { return written_; }

 private:
  const int fd_;
  const std::string path_;
  const checkpoint_internal::WriteHook& hook_;
  int64_t written_ = 0;
};

// WriteFileAtomically makes `path` hold `content` or leaves it as it was: it writes
// path.tmp, fsyncs it, renames it over `path` and fsyncs the directory.
absl::Status WriteFileAtomically(const std::string& dir, const std::string& name,
                                 absl::string_view content,
                                 const checkpoint_internal::WriteHook& hook) {
  const std::string path = absl::StrCat(dir, "/", name);
  const std::string tmp = absl::StrCat(path, ".tmp");
  LOOM_ASSIGN_OR_RETURN(ScopedFd fd, OpenFile(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644));
  FileWriter writer(fd.get(), tmp, hook);
  LOOM_RETURN_IF_ERROR(writer.Write(Bytes(content)));
  if (::fsync(fd.get()) != 0) return Errno(errno, "fsync", tmp);
  LOOM_RETURN_IF_ERROR(fd.Close(tmp));
  LOOM_RETURN_IF_ERROR(Rename(tmp, path));
  return FsyncDir(dir);
}

// ---------------------------------------------------------------------------
// Layout: the pieces of parameters a rank owns, in the model's coordinates.

struct Piece {
  int param = 0;
  int64_t begin = 0;  // element range of the parameter
  int64_t end = 0;
};

// PiecesOf returns what `rank` saves: its owned range of every sharded parameter and,
// on rank 0 only, every persistent parameter whole; in parameter order.
std::vector<Piece> PiecesOf(const Partition& p, int rank) {
  std::vector<Piece> pieces;
  for (int q = 0; q < p.num_params(); ++q) {
    if (p.slot(q).persistent && rank != 0) continue;
    const Partition::Range range = p.OwnedRange(q, rank);
    if (range.end > range.begin) pieces.push_back({q, range.begin, range.end});
  }
  return pieces;
}

// LocalIndex is where element `i` of parameter `q` lives in `rank`'s state: in the
// persistent vector or in the sharded one.
int64_t LocalIndex(const Partition& p, int rank, int q, int64_t i) {
  const ParamSlot& slot = p.slot(q);
  if (slot.persistent) return slot.offset + i;
  return p.ShardOffset(slot.bucket) + slot.offset + i -
         static_cast<int64_t>(rank) * p.bucket(slot.bucket).shard_numel;
}

std::string SubdirName(int64_t step, int64_t suffix) {
  std::string name = absl::StrFormat("%s%08d", kSubdirPrefix, step);
  if (suffix > 0) absl::StrAppend(&name, ".", suffix);
  return name;
}

std::string RankFileName(int rank, int ranks) {
  return absl::StrFormat("rank-%05d-of-%05d.bin", rank, ranks);
}

// Names are written quoted and C-escaped, with spaces escaped too, so a manifest line
// splits on spaces.
std::string QuoteName(absl::string_view name) {
  return absl::StrCat("\"", absl::StrReplaceAll(absl::CEscape(name), {{" ", "\\x20"}}), "\"");
}

uint32_t Crc(absl::string_view s) { return Crc32c(Bytes(s)); }

std::string Hex32(uint32_t value) { return absl::StrFormat("0x%08x", value); }

// ---------------------------------------------------------------------------
// Rank file: header (64 bytes) | payload | block CRC table | CRC of the table.
//
// Header: magic[8], u32 version, u32 rank, u32 ranks, u32 num_fields, i64 step,
// i64 payload_bytes, i64 block_bytes, zeros, u32 CRC32C of bytes [0, 60) at 60.

struct RankHeader {
  uint32_t rank = 0;
  uint32_t ranks = 0;
  uint32_t num_fields = 0;
  int64_t step = 0;
  int64_t payload_bytes = 0;
  int64_t block_bytes = 0;
};

template <typename T>
void Put(std::array<std::byte, kHeaderBytes>& out, size_t offset, T value) {
  std::memcpy(out.data() + offset, &value, sizeof(T));
}
template <typename T>
T Get(const std::array<std::byte, kHeaderBytes>& in, size_t offset) {
  T value;
  std::memcpy(&value, in.data() + offset, sizeof(T));
  return value;
}

std::array<std::byte, kHeaderBytes> EncodeHeader(const RankHeader& h) {
  std::array<std::byte, kHeaderBytes> out{};
  std::memcpy(out.data(), kFileMagic, sizeof(kFileMagic));
  Put<uint32_t>(out, 8, kFormatVersion);
  Put<uint32_t>(out, 12, h.rank);
  Put<uint32_t>(out, 16, h.ranks);
  Put<uint32_t>(out, 20, h.num_fields);
  Put<int64_t>(out, 24, h.step);
  Put<int64_t>(out, 32, h.payload_bytes);
  Put<int64_t>(out, 40, h.block_bytes);
  Put<uint32_t>(out, kHeaderCrcOffset,
                Crc32c(absl::MakeConstSpan(out.data(), kHeaderCrcOffset)));
  return out;
}

int64_t NumBlocks(int64_t payload_bytes, int64_t block_bytes) {
  return (payload_bytes + block_bytes - 1) / block_bytes;
}

int64_t RankFileBytes(int64_t payload_bytes, int64_t block_bytes) {
  return kHeaderBytes + payload_bytes + 4 * NumBlocks(payload_bytes, block_bytes) + 4;
}

struct WrittenFile {
  int64_t bytes = 0;
  uint32_t table_crc = 0;
};

// WriteRankFile writes `rank`'s pieces of every field to subdir/rank-*.bin (via a
// temporary name, fsynced, renamed): field by field, piece by piece, in blocks of
// block_bytes whose CRC32Cs form the table at the end.
absl::StatusOr<WrittenFile> WriteRankFile(const std::string& subdir, int64_t step,
                                          const Partition& p, int rank,
                                          absl::Span<const CheckpointField> fields,
                                          const CheckpointOptions& options,
                                          const checkpoint_internal::WriteHook& hook) {
  const int ranks = p.options().dp_size;
  const std::vector<Piece> pieces = PiecesOf(p, rank);
  int64_t piece_numel = 0;
  for (const Piece& piece : pieces) piece_numel += piece.end - piece.begin;
  RankHeader header;
  header.rank = static_cast<uint32_t>(rank);
  header.ranks = static_cast<uint32_t>(ranks);
  header.num_fields = static_cast<uint32_t>(fields.size());
  header.step = step;
  header.payload_bytes = static_cast<int64_t>(fields.size()) * piece_numel *
                         static_cast<int64_t>(sizeof(float));
  header.block_bytes = options.block_bytes;

  const std::string path = absl::StrCat(subdir, "/", RankFileName(rank, ranks));
  const std::string tmp = absl::StrCat(path, ".tmp");
  LOOM_ASSIGN_OR_RETURN(ScopedFd fd, OpenFile(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644));
  FileWriter writer(fd.get(), tmp, hook);
  const std::array<std::byte, kHeaderBytes> encoded = EncodeHeader(header);
  LOOM_RETURN_IF_ERROR(writer.Write(encoded));

  std::vector<std::byte> block(static_cast<size_t>(
      std::min<int64_t>(options.block_bytes, std::max<int64_t>(header.payload_bytes, 1))));
  size_t filled = 0;
  std::vector<uint32_t> crcs;
  crcs.reserve(static_cast<size_t>(NumBlocks(header.payload_bytes, options.block_bytes)));
  auto flush = [&]() -> absl::Status {
    const absl::Span<const std::byte> data = absl::MakeConstSpan(block.data(), filled);
    crcs.push_back(Crc32c(data));
    filled = 0;
    return writer.Write(data);
  };
  for (const CheckpointField& field : fields) {
    for (const Piece& piece : pieces) {
      const bool persistent = p.slot(piece.param).persistent;
      const float* src = (persistent ? field.persistent : field.sharded).data() +
                         LocalIndex(p, rank, piece.param, piece.begin);
      absl::Span<const std::byte> bytes(reinterpret_cast<const std::byte*>(src),
                                        static_cast<size_t>(piece.end - piece.begin) * sizeof(float));
      while (!bytes.empty()) {
        const size_t n = std::min(bytes.size(), block.size() - filled);
        std::memcpy(block.data() + filled, bytes.data(), n);
        filled += n;
        bytes.remove_prefix(n);
        if (filled == block.size()) LOOM_RETURN_IF_ERROR(flush());
      }
    }
  }
  if (filled > 0) LOOM_RETURN_IF_ERROR(flush());

  const absl::Span<const std::byte> table(reinterpret_cast<const std::byte*>(crcs.data()),
                                          crcs.size() * sizeof(uint32_t));
  const uint32_t table_crc = Crc32c(table);
  LOOM_RETURN_IF_ERROR(writer.Write(table));
  LOOM_RETURN_IF_ERROR(writer.Write(absl::MakeConstSpan(
      reinterpret_cast<const std::byte*>(&table_crc), sizeof(table_crc))));
  if (::fsync(fd.get()) != 0) return Errno(errno, "fsync", tmp);
  LOOM_RETURN_IF_ERROR(fd.Close(tmp));
  LOOM_RETURN_IF_ERROR(Rename(tmp, path));
  LOOM_RETURN_IF_ERROR(FsyncDir(subdir));
  return WrittenFile{writer.written(), table_crc};
}

// ---------------------------------------------------------------------------
// Manifest: a text file, one record per line, its CRC32C on the last line.

struct ManifestFile {
  std::string name;
  int64_t bytes = 0;
  uint32_t table_crc = 0;
  std::vector<Piece> pieces;
  std::vector<int64_t> piece_starts;  // element offset of each piece within a field
  int64_t piece_numel = 0;
};

struct Manifest {
  std::string path;
  uint32_t crc = 0;
  int64_t step = 0;
  PartitionOptions saved;
  int64_t block_bytes = 0;
  std::vector<std::string> fields;
  std::vector<ParamSpec> params;
  std::vector<int64_t> numels;
  std::vector<ManifestFile> files;
};

std::string EncodeManifest(int64_t step, const Partition& p,
                           absl::Span<const CheckpointField> fields, int64_t block_bytes,
                           absl::Span<const WrittenFile> files) {
  const PartitionOptions& o = p.options();
  std::string out = absl::StrCat(kManifestMagic, " ", kFormatVersion, "\n", "step ", step, "\n",
                                 "saved_dp_size ", o.dp_size, "\n", "saved_bucket_numel ",
                                 o.bucket_numel, "\n", "saved_persistence_threshold ",
                                 o.persistence_threshold, "\n", "saved_align_numel ",
                                 o.align_numel, "\n", "block_bytes ", block_bytes, "\n");
  for (const CheckpointField& field : fields) {
    absl::StrAppend(&out, "field ", QuoteName(field.name), "\n");
  }
  for (int q = 0; q < p.num_params(); ++q) {
    absl::StrAppend(&out, "param ", QuoteName(p.slot(q).name), " ", ShapeString(p.slot(q).shape),
                    "\n");
  }
  for (int r = 0; r < o.dp_size; ++r) {
    const std::vector<Piece> pieces = PiecesOf(p, r);
    absl::StrAppend(&out, "file ", RankFileName(r, o.dp_size), " ", files[r].bytes, " ",
                    Hex32(files[r].table_crc), " ", pieces.size(), "\n");
    for (const Piece& piece : pieces) {
      absl::StrAppend(&out, "piece ", piece.param, " ", piece.begin, " ", piece.end, "\n");
    }
  }
  absl::StrAppend(&out, "crc32c ", Hex32(Crc(out)), "\n");
  return out;
}

// ManifestParser walks the lines of a manifest whose CRC32C already checked out, so
// any surprise is a bug or a different writer: DataLoss naming the line.
class ManifestParser {
 public:
  ManifestParser(const std::string& path, absl::string_view body)
      : path_(path), lines_(absl::StrSplit(body, '\n')) {
    if (!lines_.empty() && lines_.back().empty()) lines_.pop_back();
  }

  bool AtEnd() const { return next_ >= lines_.size(); }
  absl::string_view PeekKey() const {
    return AtEnd() ? absl::string_view() : lines_[next_].substr(0, lines_[next_].find(' '));
  }

  // Next returns the next line's tokens after checking its key and token count.
  absl::StatusOr<std::vector<absl::string_view>> Next(absl::string_view key, size_t tokens) {
    if (AtEnd()) return Error(absl::StrCat("ends where a \"", key, "\" line was expected"));
    line_ = lines_[next_++];
    std::vector<absl::string_view> parts = absl::StrSplit(line_, ' ');
    if (parts[0] != key || parts.size() != tokens + 1) {
      return Error(absl::StrCat("expected \"", key, "\" with ", tokens, " values"));
    }
    parts.erase(parts.begin());
    return parts;
  }

  absl::StatusOr<int64_t> Int(absl::string_view token) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(token, &value)) return Error(absl::StrCat("\"", token, "\" is no integer"));
    return value;
  }
  absl::StatusOr<uint32_t> Hex(absl::string_view token) {
    uint32_t value = 0;
    if (!absl::ConsumePrefix(&token, "0x") || !absl::SimpleHexAtoi(token, &value)) {
      return Error(absl::StrCat("\"", token, "\" is no 0x hex number"));
    }
    return value;
  }
  absl::StatusOr<std::string> Name(absl::string_view token) {
    std::string name;
    if (token.size() < 2 || token.front() != '"' || token.back() != '"' ||
        !absl::CUnescape(token.substr(1, token.size() - 2), &name)) {
      return Error(absl::StrCat("bad quoted name ", token));
    }
    return name;
  }
  absl::StatusOr<std::vector<int64_t>> Shape(absl::string_view token) {
    std::vector<int64_t> shape;
    if (token.size() < 2 || token.front() != '[' || token.back() != ']') {
      return Error(absl::StrCat("bad shape ", token));
    }
    token = token.substr(1, token.size() - 2);
    if (token.empty()) return shape;
    for (absl::string_view extent : absl::StrSplit(token, ',')) {
      LOOM_ASSIGN_OR_RETURN(const int64_t value, Int(extent));
      if (value < 0) return Error(absl::StrCat("negative extent in ", token));
      shape.push_back(value);
    }
    return shape;
  }

  absl::Status Error(absl::string_view what) const {
    return absl::DataLossError(absl::StrCat(path_, " line ", next_, " (\"", line_, "\"): ", what));
  }

 private:
  const std::string& path_;
  std::vector<absl::string_view> lines_;
  size_t next_ = 0;
  absl::string_view line_;
};

absl::Status CheckManifest(Manifest& m, ManifestParser& parser);

absl::StatusOr<Manifest> ParseManifest(const std::string& path, absl::string_view text) {
  // The last line, "crc32c 0x........", covers every byte before it.
  if (text.empty() || text.back() != '\n') {
    return absl::DataLossError(absl::StrCat(path, " (", text.size(),
                                            " bytes) does not end in a newline: truncated"));
  }
  const size_t last = text.rfind('\n', text.size() - 2);
  const size_t crc_line = last == absl::string_view::npos ? 0 : last + 1;
  absl::string_view stored = text.substr(crc_line, text.size() - 1 - crc_line);
  uint32_t stored_crc = 0;
  if (!absl::ConsumePrefix(&stored, "crc32c 0x") || !absl::SimpleHexAtoi(stored, &stored_crc)) {
    return absl::DataLossError(absl::StrCat(path, " (", text.size(),
                                            " bytes) does not end in its \"crc32c\" line: "
                                            "truncated or corrupt"));
  }
  const absl::string_view body = text.substr(0, crc_line);
  const uint32_t computed = Crc(body);
  if (computed != stored_crc) {
    return absl::DataLossError(absl::StrCat(path, ": CRC32C of bytes [0, ", body.size(), ") is ",
                                            Hex32(computed), ", its last line says ",
                                            Hex32(stored_crc), ": corrupt"));
  }

  Manifest m;
  m.path = path;
  m.crc = stored_crc;
  ManifestParser parser(path, body);
  LOOM_ASSIGN_OR_RETURN(auto magic, parser.Next(kManifestMagic, 1));
  LOOM_ASSIGN_OR_RETURN(const int64_t version, parser.Int(magic[0]));
  if (version != kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " has checkpoint format version ", version, "; this build reads version ",
        kFormatVersion));
  }
  auto int_line = [&](absl::string_view key) -> absl::StatusOr<int64_t> {
    LOOM_ASSIGN_OR_RETURN(auto tokens, parser.Next(key, 1));
    return parser.Int(tokens[0]);
  };
  LOOM_ASSIGN_OR_RETURN(m.step, int_line("step"));
  LOOM_ASSIGN_OR_RETURN(const int64_t dp, int_line("saved_dp_size"));
  LOOM_ASSIGN_OR_RETURN(m.saved.bucket_numel, int_line("saved_bucket_numel"));
  LOOM_ASSIGN_OR_RETURN(m.saved.persistence_threshold, int_line("saved_persistence_threshold"));
  LOOM_ASSIGN_OR_RETURN(m.saved.align_numel, int_line("saved_align_numel"));
  LOOM_ASSIGN_OR_RETURN(m.block_bytes, int_line("block_bytes"));
  if (dp < 1 || dp > (int64_t{1} << 20) || m.block_bytes < 4 || m.block_bytes % 4 != 0) {
    return parser.Error(absl::StrCat("saved_dp_size ", dp, " or block_bytes ", m.block_bytes,
                                     " out of range"));
  }
  m.saved.dp_size = static_cast<int>(dp);
  while (parser.PeekKey() == "field") {
    LOOM_ASSIGN_OR_RETURN(auto tokens, parser.Next("field", 1));
    LOOM_ASSIGN_OR_RETURN(std::string name, parser.Name(tokens[0]));
    m.fields.push_back(std::move(name));
  }
  while (parser.PeekKey() == "param") {
    LOOM_ASSIGN_OR_RETURN(auto tokens, parser.Next("param", 2));
    ParamSpec spec;
    LOOM_ASSIGN_OR_RETURN(spec.name, parser.Name(tokens[0]));
    LOOM_ASSIGN_OR_RETURN(spec.shape, parser.Shape(tokens[1]));
    int64_t numel = 1;
    for (const int64_t extent : spec.shape) {
      if (extent != 0 && numel > (int64_t{1} << 50) / extent) {
        return parser.Error("parameter too large");
      }
      numel *= extent;
    }
    m.numels.push_back(numel);
    m.params.push_back(std::move(spec));
  }
  for (int r = 0; r < m.saved.dp_size; ++r) {
    LOOM_ASSIGN_OR_RETURN(auto tokens, parser.Next("file", 4));
    ManifestFile file;
    file.name = std::string(tokens[0]);
    if (file.name != RankFileName(r, m.saved.dp_size)) {
      return parser.Error(absl::StrCat("file of rank ", r, " should be named ",
                                       RankFileName(r, m.saved.dp_size)));
    }
    LOOM_ASSIGN_OR_RETURN(file.bytes, parser.Int(tokens[1]));
    LOOM_ASSIGN_OR_RETURN(file.table_crc, parser.Hex(tokens[2]));
    LOOM_ASSIGN_OR_RETURN(const int64_t num_pieces, parser.Int(tokens[3]));
    if (num_pieces < 0 || num_pieces > static_cast<int64_t>(m.params.size())) {
      return parser.Error(absl::StrCat(num_pieces, " pieces for ", m.params.size(), " params"));
    }
    for (int64_t i = 0; i < num_pieces; ++i) {
      LOOM_ASSIGN_OR_RETURN(auto piece_tokens, parser.Next("piece", 3));
      LOOM_ASSIGN_OR_RETURN(const int64_t param, parser.Int(piece_tokens[0]));
      LOOM_ASSIGN_OR_RETURN(const int64_t begin, parser.Int(piece_tokens[1]));
      LOOM_ASSIGN_OR_RETURN(const int64_t end, parser.Int(piece_tokens[2]));
      if (param < 0 || param >= static_cast<int64_t>(m.params.size()) || begin < 0 ||
          end <= begin || end > m.numels[param]) {
        return parser.Error("piece out of range of its parameter");
      }
      file.piece_starts.push_back(file.piece_numel);
      file.piece_numel += end - begin;
      file.pieces.push_back({static_cast<int>(param), begin, end});
    }
    m.files.push_back(std::move(file));
  }
  if (!parser.AtEnd()) return parser.Error("unexpected line");
  LOOM_RETURN_IF_ERROR(CheckManifest(m, parser));
  return m;
}

// CheckManifest checks that the pieces tile every parameter exactly once and that the
// file sizes follow from them.
absl::Status CheckManifest(Manifest& m, ManifestParser& parser) {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ranges(m.params.size());
  for (const ManifestFile& file : m.files) {
    for (const Piece& piece : file.pieces) ranges[piece.param].push_back({piece.begin, piece.end});
    const int64_t payload = static_cast<int64_t>(m.fields.size()) * file.piece_numel * 4;
    if (file.bytes != RankFileBytes(payload, m.block_bytes)) {
      return parser.Error(absl::StrCat(file.name, " is listed with ", file.bytes,
                                       " bytes; its pieces make ",
                                       RankFileBytes(payload, m.block_bytes)));
    }
  }
  for (size_t q = 0; q < ranges.size(); ++q) {
    std::sort(ranges[q].begin(), ranges[q].end());
    int64_t covered = 0;
    for (const auto& [begin, end] : ranges[q]) {
      if (begin != covered) break;
      covered = end;
    }
    if (covered != m.numels[q]) {
      return parser.Error(absl::StrCat("the pieces of parameter ", q, " (\"", m.params[q].name,
                                       "\") do not tile its ", m.numels[q], " elements"));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Reading: LATEST -> MANIFEST -> verified blocks of rank files.

struct Committed {
  std::string subdir;  // dir/step-...
  Manifest manifest;
};

std::string EncodeLatest(absl::string_view subdir_name) {
  const std::string body = absl::StrCat(subdir_name, "\n");
  return absl::StrCat(body, "crc32c ", Hex32(Crc(body)), "\n");
}

// ReadLatest returns the subdirectory name that dir/LATEST commits.
absl::StatusOr<std::string> ReadLatest(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kLatestName);
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (absl::IsNotFound(text.status())) {
    return absl::NotFoundError(absl::StrCat("no checkpoint in ", dir, ": ", path,
                                            " does not exist"));
  }
  LOOM_RETURN_IF_ERROR(text.status());
  const std::vector<absl::string_view> lines = absl::StrSplit(*text, '\n');
  uint32_t stored = 0;
  absl::string_view crc_line = lines.size() == 3 ? lines[1] : absl::string_view();
  const bool parsed = lines.size() == 3 && lines[2].empty() &&
                      absl::ConsumePrefix(&crc_line, "crc32c 0x") &&
                      absl::SimpleHexAtoi(crc_line, &stored);
  const std::string body = absl::StrCat(lines[0], "\n");
  if (!parsed || Crc(body) != stored) {
    return absl::DataLossError(absl::StrCat(path, " (", text->size(), " bytes: \"",
                                            absl::CHexEscape(*text),
                                            "\") fails its CRC32C or format check"));
  }
  const absl::string_view name = lines[0];
  if (!absl::StartsWith(name, kSubdirPrefix) || absl::StrContains(name, '/')) {
    return absl::DataLossError(absl::StrCat(path, " names \"", name, "\", not a step-* directory"));
  }
  return std::string(name);
}

absl::StatusOr<Committed> OpenCommitted(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat("checkpoint directory ", dir, " does not exist"));
    }
    return Errno(errno, "stat", dir);
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint path ", dir, " is not a directory"));
  }
  LOOM_ASSIGN_OR_RETURN(const std::string name, ReadLatest(dir));
  Committed c;
  c.subdir = absl::StrCat(dir, "/", name);
  const std::string path = absl::StrCat(c.subdir, "/", kManifestName);
  absl::StatusOr<std::string> text = ReadWholeFile(path);
  if (!text.ok()) {
    return absl::DataLossError(absl::StrCat(dir, "/", kLatestName, " commits ", name,
                                            " but its manifest cannot be read: ",
                                            text.status().message()));
  }
  LOOM_ASSIGN_OR_RETURN(c.manifest, ParseManifest(path, *text));
  return c;
}

// RankFileReader reads a rank file's payload, checking the header against the
// manifest, the block table against the manifest's CRC and every block it reads
// against the table.
class RankFileReader {
 public:
  static absl::StatusOr<RankFileReader> Open(const std::string& subdir, const Manifest& m,
                                             int rank) {
    const ManifestFile& entry = m.files[rank];
    const std::string path = absl::StrCat(subdir, "/", entry.name);
    absl::StatusOr<ScopedFd> fd = OpenRegularForRead(path);
    if (!fd.ok()) {
      return absl::DataLossError(absl::StrCat("the manifest lists ", path, " but: ",
                                              fd.status().message()));
    }
    struct stat st;
    if (::fstat(fd->get(), &st) != 0) return Errno(errno, "fstat", path);
    if (st.st_size != entry.bytes) {
      return absl::DataLossError(absl::StrCat(path, " has ", st.st_size, " bytes, the manifest says ",
                                              entry.bytes,
                                              st.st_size < entry.bytes ? ": truncated" : ""));
    }
    std::array<std::byte, kHeaderBytes> raw;
    LOOM_ASSIGN_OR_RETURN(const size_t got, PreadFull(fd->get(), absl::MakeSpan(raw), 0, path));
    if (got != raw.size()) {
      return absl::DataLossError(absl::StrCat(path, ": header truncated at ", got, " bytes"));
    }
    const uint32_t header_crc = Crc32c(absl::MakeConstSpan(raw.data(), kHeaderCrcOffset));
    if (header_crc != Get<uint32_t>(raw, kHeaderCrcOffset)) {
      return absl::DataLossError(absl::StrCat(path, ": header (bytes [0, ", kHeaderBytes,
                                              ")) has CRC32C ", Hex32(header_crc), ", it stores ",
                                              Hex32(Get<uint32_t>(raw, kHeaderCrcOffset))));
    }
    const int64_t payload =
        static_cast<int64_t>(m.fields.size()) * entry.piece_numel * 4;
    const std::array<std::pair<const char*, std::pair<int64_t, int64_t>>, 7> checks = {{
        {"magic", {std::memcmp(raw.data(), kFileMagic, sizeof(kFileMagic)) == 0, 1}},
        {"version", {Get<uint32_t>(raw, 8), kFormatVersion}},
        {"rank", {Get<uint32_t>(raw, 12), rank}},
        {"ranks", {Get<uint32_t>(raw, 16), m.saved.dp_size}},
        {"num_fields", {Get<uint32_t>(raw, 20), static_cast<int64_t>(m.fields.size())}},
        {"step", {Get<int64_t>(raw, 24), m.step}},
        {"payload_bytes", {Get<int64_t>(raw, 32), payload}},
    }};
    for (const auto& [what, values] : checks) {
      if (values.first != values.second) {
        return absl::DataLossError(absl::StrCat(path, ": header ", what, " is ", values.first,
                                                ", the manifest implies ", values.second));
      }
    }
    if (Get<int64_t>(raw, 40) != m.block_bytes) {
      return absl::DataLossError(absl::StrCat(path, ": header block_bytes is ",
                                              Get<int64_t>(raw, 40), ", the manifest says ",
                                              m.block_bytes));
    }
    RankFileReader reader(std::move(*fd), path, payload, m.block_bytes);
    const int64_t blocks = NumBlocks(payload, m.block_bytes);
    reader.crcs_.resize(static_cast<size_t>(blocks) + 1);  // the table and its CRC
    const absl::Span<std::byte> table(reinterpret_cast<std::byte*>(reader.crcs_.data()),
                                      reader.crcs_.size() * sizeof(uint32_t));
    const int64_t table_offset = kHeaderBytes + payload;
    LOOM_ASSIGN_OR_RETURN(const size_t table_got,
                          PreadFull(reader.fd_.get(), table, table_offset, path));
    if (table_got != table.size()) {
      return absl::DataLossError(absl::StrCat(path, ": block CRC table truncated"));
    }
    const uint32_t table_crc = Crc32c(table.first(table.size() - sizeof(uint32_t)));
    if (table_crc != entry.table_crc || table_crc != reader.crcs_.back()) {
      return absl::DataLossError(absl::StrCat(
          path, ": block CRC table (bytes [", table_offset, ", ", entry.bytes, ")) has CRC32C ",
          Hex32(table_crc), "; the file stores ", Hex32(reader.crcs_.back()),
          " and the manifest ", Hex32(entry.table_crc)));
    }
    reader.crcs_.pop_back();
    return reader;
  }

  // Read copies payload bytes [offset, offset + out.size()) after checking the
  // CRC32C of every block they touch.
  absl::Status Read(int64_t offset, absl::Span<std::byte> out) {
    while (!out.empty()) {
      const int64_t index = offset / block_bytes_;
      if (index != cached_) {
        const int64_t begin = index * block_bytes_;
        const int64_t length = std::min(block_bytes_, payload_bytes_ - begin);
        block_.resize(static_cast<size_t>(length));
        cached_ = -1;
        LOOM_ASSIGN_OR_RETURN(const size_t got, PreadFull(fd_.get(), absl::MakeSpan(block_),
                                                          kHeaderBytes + begin, path_));
        const uint32_t crc = Crc32c(absl::MakeConstSpan(block_.data(), got));
        if (got != block_.size() || crc != crcs_[index]) {
          return absl::DataLossError(absl::StrCat(
              path_, ": block ", index, " (file bytes [", kHeaderBytes + begin, ", ",
              kHeaderBytes + begin + length, ")) has CRC32C ", Hex32(crc), ", its table says ",
              Hex32(crcs_[index]), got != block_.size() ? " (short read)" : ""));
        }
        cached_ = index;
      }
      const int64_t within = offset - cached_ * block_bytes_;
      const size_t n = std::min(out.size(), block_.size() - static_cast<size_t>(within));
      std::memcpy(out.data(), block_.data() + within, n);
      out.remove_prefix(n);
      offset += static_cast<int64_t>(n);
    }
    return absl::OkStatus();
  }

 private:
  RankFileReader(ScopedFd fd, std::string path, int64_t payload_bytes, int64_t block_bytes)
      : fd_(std::move(fd)),
        path_(std::move(path)),
        payload_bytes_(payload_bytes),
        block_bytes_(block_bytes) {}

  ScopedFd fd_;
  std::string path_;
  int64_t payload_bytes_;
  int64_t block_bytes_;
  std::vector<uint32_t> crcs_;
  std::vector<std::byte> block_;
  int64_t cached_ = -1;
};

// CopyOp: `count` floats of field `field` of a file's piece, starting `skip`
// elements into it, go to `dest`.
struct CopyOp {
  int file = 0;
  int64_t offset = 0;  // payload bytes
  int64_t count = 0;
  float* dest = nullptr;
};

// AddCopies adds the copies that bring elements [begin, end) of parameter `q`, field
// `field` (an index into the manifest's fields) to `dest(i)` for each i.
template <typename Dest>
void AddCopies(const Manifest& m, const std::vector<std::vector<std::pair<int, int>>>& by_param,
               int field, int q, int64_t begin, int64_t end, Dest dest, std::vector<CopyOp>& ops) {
  for (const auto& [f, k] : by_param[q]) {
    const ManifestFile& file = m.files[f];
    const Piece& piece = file.pieces[k];
    const int64_t lo = std::max(begin, piece.begin);
    const int64_t hi = std::min(end, piece.end);
    if (lo >= hi) continue;
    const int64_t element = field * file.piece_numel + file.piece_starts[k] + (lo - piece.begin);
    ops.push_back({f, element * 4, hi - lo, dest(lo)});
  }
}

std::vector<std::vector<std::pair<int, int>>> PiecesByParam(const Manifest& m) {
  std::vector<std::vector<std::pair<int, int>>> by_param(m.params.size());
  for (size_t f = 0; f < m.files.size(); ++f) {
    for (size_t k = 0; k < m.files[f].pieces.size(); ++k) {
      by_param[m.files[f].pieces[k].param].push_back({static_cast<int>(f), static_cast<int>(k)});
    }
  }
  return by_param;
}

absl::Status RunCopies(const Committed& c, std::vector<CopyOp> ops) {
  std::sort(ops.begin(), ops.end(), [](const CopyOp& a, const CopyOp& b) {
    return std::tie(a.file, a.offset) < std::tie(b.file, b.offset);
  });
  for (size_t i = 0; i < ops.size();) {
    LOOM_ASSIGN_OR_RETURN(RankFileReader reader,
                          RankFileReader::Open(c.subdir, c.manifest, ops[i].file));
    const int file = ops[i].file;
    for (; i < ops.size() && ops[i].file == file; ++i) {
      LOOM_RETURN_IF_ERROR(reader.Read(
          ops[i].offset, absl::MakeSpan(reinterpret_cast<std::byte*>(ops[i].dest),
                                        static_cast<size_t>(ops[i].count) * sizeof(float))));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Agreement: every collective step ends with an all-gather of each rank's status
// code and a few numbers, so all ranks take the same decision.

using Report = std::array<int64_t, 4>;  // status code, then phase-specific values

absl::StatusOr<std::vector<Report>> Agree(Communicator& dp, const absl::Status& local,
                                          int64_t a, int64_t b, int64_t c) {
  const Report mine = {static_cast<int64_t>(local.code()), a, b, c};
  std::vector<Report> all(static_cast<size_t>(dp.size()));
  const absl::Status gathered = dp.AllGather(
      ConstBufferView::Of(absl::MakeConstSpan(mine)),
      BufferView::Of(absl::MakeSpan(all.front().data(), all.size() * mine.size())));
  if (!local.ok()) return local;
  if (!gathered.ok()) return gathered;
  return all;
}

// Decide returns the local error, or the first failing rank's code with a message
// naming it.
absl::Status Decide(absl::string_view what, absl::string_view phase, const absl::Status& local,
                    absl::Span<const Report> reports, int rank, absl::string_view consequence) {
  if (!local.ok()) return local;
  for (size_t r = 0; r < reports.size(); ++r) {
    if (reports[r][0] == 0 || static_cast<int>(r) == rank) continue;
    const auto code = static_cast<absl::StatusCode>(reports[r][0]);
    return absl::Status(code, absl::StrCat(what, ": rank ", r, " of ", reports.size(),
                                           " failed while ", phase, " (",
                                           absl::StatusCodeToString(code),
                                           "; its own error names the cause)", consequence));
  }
  return absl::OkStatus();
}

// Fingerprint of what every rank must pass alike.
int64_t Fingerprint(const Partition& p, absl::Span<const CheckpointField> fields,
                    int64_t block_bytes) {
  const PartitionOptions& o = p.options();
  std::string s = absl::StrCat(o.dp_size, "/", o.bucket_numel, "/", o.persistence_threshold, "/",
                               o.align_numel, "/", block_bytes, "\n", p.Describe());
  for (int q = 0; q < p.num_params(); ++q) {
    absl::StrAppend(&s, QuoteName(p.slot(q).name), ShapeString(p.slot(q).shape), "\n");
  }
  for (const CheckpointField& field : fields) absl::StrAppend(&s, QuoteName(field.name), "\n");
  return Crc(s);
}

template <typename Field>
absl::Status CheckFields(absl::string_view what, const Partition& p,
                         absl::Span<const Field> fields) {
  std::set<absl::string_view> seen;
  for (size_t i = 0; i < fields.size(); ++i) {
    const Field& field = fields[i];
    if (field.name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": field ", i, " has an empty name"));
    }
    if (!seen.insert(field.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": field \"", field.name, "\" is given twice"));
    }
    if (static_cast<int64_t>(field.sharded.size()) != p.ShardNumel() ||
        static_cast<int64_t>(field.persistent.size()) != p.PersistentNumel()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": field \"", field.name, "\" has ", field.sharded.size(), " sharded and ",
          field.persistent.size(), " persistent elements; the partition needs ShardNumel() = ",
          p.ShardNumel(), " and PersistentNumel() = ", p.PersistentNumel()));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckGroup(absl::string_view what, const Partition& p, const Communicator& dp) {
  if (dp.size() != p.options().dp_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": the communicator has ", dp.size(), " ranks, the partition's dp_size is ",
        p.options().dp_size));
  }
  return absl::OkStatus();
}

// PrepareSave (rank 0) makes `dir` and an empty subdirectory for `step`, removing
// leftovers of failed saves; returns the subdirectory's suffix (0, or 1 when the
// committed checkpoint already has this step).
absl::StatusOr<int64_t> PrepareSave(const std::string& dir, int64_t step) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return Errno(errno, "mkdir", dir);
  // A LATEST that cannot be read commits nothing this save must keep.
  const std::string current = ReadLatest(dir).value_or("");
  const int64_t suffix = SubdirName(step, 0) == current ? 1 : 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, kSubdirPrefix) && name != current) {
      std::filesystem::remove_all(entry.path(), error);
      if (error) {
        return ErrnoToStatus(error.value(),
                                   absl::StrCat("remove_all(", entry.path().string(), ")"));
      }
    }
  }
  if (error) return ErrnoToStatus(error.value(), absl::StrCat("opendir(", dir, ")"));
  const std::string subdir = absl::StrCat(dir, "/", SubdirName(step, suffix));
  if (::mkdir(subdir.c_str(), 0755) != 0) return Errno(errno, "mkdir", subdir);
  LOOM_RETURN_IF_ERROR(FsyncDir(dir));
  return suffix;
}

// Commit (rank 0) writes the manifest, then swings LATEST: the commit point. Then it
// removes every other step-* subdirectory; a failure there leaves garbage that the
// next save removes, so it is not an error.
absl::Status Commit(const std::string& dir, const std::string& name, const std::string& manifest,
                    const checkpoint_internal::WriteHook& hook) {
  const std::string subdir = absl::StrCat(dir, "/", name);
  absl::Status status = WriteFileAtomically(subdir, kManifestName, manifest, hook);
  if (status.ok()) status = WriteFileAtomically(dir, kLatestName, EncodeLatest(name), hook);
  std::error_code error;
  if (!status.ok()) {
    // Unless LATEST was renamed before the failure (an fsync of `dir` failed), the new
    // subdirectory is garbage.
    if (ReadLatest(dir).value_or("") != name) std::filesystem::remove_all(subdir, error);
    return status;
  }
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string other = entry.path().filename().string();
    if (absl::StartsWith(other, kSubdirPrefix) && other != name) {
      std::filesystem::remove_all(entry.path(), error);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SaveCheckpoint(const std::string& dir, int64_t step, const Partition& partition,
                            absl::Span<const CheckpointField> fields, Communicator& dp,
                            const CheckpointOptions& options) {
  return checkpoint_internal::SaveCheckpointWithWriteHook(dir, step, partition, fields, dp,
                                                          options, nullptr);
}

namespace checkpoint_internal {

absl::Status SaveCheckpointWithWriteHook(const std::string& dir, int64_t step,
                                         const Partition& partition,
                                         absl::Span<const CheckpointField> fields,
                                         Communicator& dp, const CheckpointOptions& options,
                                         const WriteHook& hook) {
  const std::string what = absl::StrCat("SaveCheckpoint(", dir, ", step ", step, ")");
  const int rank = dp.rank();
  constexpr absl::string_view kKept = "; nothing was committed, the previous checkpoint stays";

  // 1. Check the input; rank 0 prepares the directory.
  absl::Status local = CheckGroup(what, partition, dp);
  if (local.ok() && step < 0) {
    local = absl::InvalidArgumentError(absl::StrCat(what, ": step must be >= 0"));
  }
  if (local.ok() && (options.block_bytes < 4 || options.block_bytes % 4 != 0)) {
    local = absl::InvalidArgumentError(absl::StrCat(
        what, ": CheckpointOptions::block_bytes is ", options.block_bytes,
        "; it must be a positive multiple of 4"));
  }
  if (local.ok()) local = CheckFields(what, partition, fields);
  int64_t suffix = 0;
  if (local.ok() && rank == 0) {
    absl::StatusOr<int64_t> prepared = PrepareSave(dir, step);
    if (prepared.ok()) {
      suffix = *prepared;
    } else {
      local = prepared.status();
    }
  }
  const int64_t fingerprint = local.ok() ? Fingerprint(partition, fields, options.block_bytes) : 0;
  absl::StatusOr<std::vector<Report>> agreed = Agree(dp, local, step, fingerprint, suffix);
  absl::Status checked = agreed.ok() ? Decide(what, "checking its input", local, *agreed, rank, kKept)
                                     : agreed.status();
  const std::vector<Report>& first = agreed.ok() ? *agreed : std::vector<Report>();
  for (size_t r = 1; checked.ok() && r < first.size(); ++r) {
    if (first[r][1] != first[0][1] || first[r][2] != first[0][2]) {
      checked = absl::FailedPreconditionError(absl::StrCat(
          what, ": ranks disagree: rank 0 passed step ", first[0][1], " (layout fingerprint ",
          first[0][2], "), rank ", r, " step ", first[r][1], " (layout fingerprint ",
          first[r][2], "); every rank must pass the same step, partition and field names",
          kKept));
    }
  }
  if (!checked.ok()) {
    // Rank 0 made an empty subdirectory if its own input was fine.
    if (rank == 0 && local.ok()) {
      std::error_code ignored;
      std::filesystem::remove_all(absl::StrCat(dir, "/", SubdirName(step, suffix)), ignored);
    }
    return checked;
  }
  const std::string name = SubdirName(step, first[0][3]);
  const std::string subdir = absl::StrCat(dir, "/", name);

  // 2. Every rank writes its file.
  absl::StatusOr<WrittenFile> written =
      WriteRankFile(subdir, step, partition, rank, fields, options, hook);
  LOOM_ASSIGN_OR_RETURN(std::vector<Report> reports, Agree(dp, written.status(), written.ok() ? written->bytes : 0,
                                       written.ok() ? written->table_crc : 0, 0));
  const absl::Status wrote =
      Decide(what, "writing its file", written.status(), reports, rank, kKept);
  if (!wrote.ok()) {
    if (rank == 0) {
      std::error_code ignored;
      std::filesystem::remove_all(subdir, ignored);
    }
    return wrote;
  }

  // 3. Rank 0 commits.
  absl::Status committed = absl::OkStatus();
  if (rank == 0) {
    std::vector<WrittenFile> files(reports.size());
    for (size_t r = 0; r < reports.size(); ++r) {
      files[r] = {reports[r][1], static_cast<uint32_t>(reports[r][2])};
    }
    committed = Commit(dir, name, EncodeManifest(step, partition, fields, options.block_bytes, files),
                       hook);
  }
  LOOM_ASSIGN_OR_RETURN(reports, Agree(dp, committed, 0, 0, 0));
  return Decide(what, "committing", committed, reports, rank,
                "; the previous checkpoint stays unless LATEST was already renamed");
}

}  // namespace checkpoint_internal

absl::StatusOr<int64_t> LoadCheckpoint(const std::string& dir, const Partition& partition,
                                       absl::Span<const MutableCheckpointField> fields,
                                       Communicator& dp) {
  const std::string what = absl::StrCat("LoadCheckpoint(", dir, ")");
  const int rank = dp.rank();
  auto load = [&]() -> absl::StatusOr<Committed> {
    LOOM_RETURN_IF_ERROR(CheckGroup(what, partition, dp));
    LOOM_RETURN_IF_ERROR(CheckFields(what, partition, fields));
    LOOM_ASSIGN_OR_RETURN(Committed c, OpenCommitted(dir));
    const Manifest& m = c.manifest;

    // The parameter lists must match, name and shape, in order.
    const int n = std::max<int>(partition.num_params(), static_cast<int>(m.params.size()));
    for (int q = 0; q < n; ++q) {
      const bool in_checkpoint = q < static_cast<int>(m.params.size());
      const bool in_model = q < partition.num_params();
      const std::string saved =
          in_checkpoint ? absl::StrCat("\"", m.params[q].name, "\" ", ShapeString(m.params[q].shape))
                        : "none";
      const std::string model =
          in_model ? absl::StrCat("\"", partition.slot(q).name, "\" ",
                                  ShapeString(partition.slot(q).shape))
                   : "none";
      if (saved != model) {
        return absl::FailedPreconditionError(absl::StrCat(
            what, ": the model does not match the checkpoint (", m.params.size(),
            " parameters; the model has ", partition.num_params(), ") at parameter ", q,
            ": checkpoint has ", saved, ", model has ", model));
      }
    }

    const auto by_param = PiecesByParam(m);
    std::vector<CopyOp> ops;
    for (const MutableCheckpointField& field : fields) {
      const auto found = std::find(m.fields.begin(), m.fields.end(), field.name);
      if (found == m.fields.end()) {
        std::vector<std::string> quoted;
        for (const std::string& name : m.fields) quoted.push_back(QuoteName(name));
        return absl::NotFoundError(absl::StrCat(what, ": field \"", field.name,
                                                "\" is not in the checkpoint; it has ",
                                                absl::StrJoin(quoted, ", ")));
      }
      const int index = static_cast<int>(found - m.fields.begin());
      std::fill(field.sharded.begin(), field.sharded.end(), 0.0f);
      for (int q = 0; q < partition.num_params(); ++q) {
        const Partition::Range range = partition.OwnedRange(q, rank);
        float* base = (partition.slot(q).persistent ? field.persistent : field.sharded).data();
        AddCopies(m, by_param, index, q, range.begin, range.end,
                  [&](int64_t i) { return base + LocalIndex(partition, rank, q, i); }, ops);
      }
    }
    LOOM_RETURN_IF_ERROR(RunCopies(c, std::move(ops)));
    return c;
  };
  absl::StatusOr<Committed> loaded = load();
  LOOM_ASSIGN_OR_RETURN(std::vector<Report> reports,
                        Agree(dp, loaded.status(), loaded.ok() ? loaded->manifest.step : 0,
                              loaded.ok() ? loaded->manifest.crc : 0, 0));
  LOOM_RETURN_IF_ERROR(Decide(what, "loading", loaded.status(), reports, rank, ""));
  for (size_t r = 1; r < reports.size(); ++r) {
    if (reports[r][1] != reports[0][1] || reports[r][2] != reports[0][2]) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, ": ranks read different checkpoints: rank 0 step ", reports[0][1],
          " (manifest CRC32C ", Hex32(static_cast<uint32_t>(reports[0][2])), "), rank ", r,
          " step ", reports[r][1], " (", Hex32(static_cast<uint32_t>(reports[r][2])),
          "); was a save running?"));
    }
  }
  return loaded->manifest.step;
}

absl::StatusOr<FullCheckpoint> ReadFullCheckpoint(const std::string& dir) {
  LOOM_ASSIGN_OR_RETURN(Committed c, OpenCommitted(dir));
  const Manifest& m = c.manifest;
  FullCheckpoint full;
  full.step = m.step;
  full.params = m.params;
  full.field_names = m.fields;
  full.saved_dp_size = m.saved.dp_size;
  std::vector<int64_t> flat(m.params.size() + 1, 0);
  for (size_t q = 0; q < m.params.size(); ++q) flat[q + 1] = flat[q] + m.numels[q];
  const auto by_param = PiecesByParam(m);
  std::vector<CopyOp> ops;
  for (size_t f = 0; f < m.fields.size(); ++f) {
    std::vector<float>& values = full.fields[m.fields[f]];
    if (!values.empty()) {
      return absl::DataLossError(absl::StrCat(m.path, " lists field \"", m.fields[f], "\" twice"));
    }
    values.resize(static_cast<size_t>(flat.back()));
    for (size_t q = 0; q < m.params.size(); ++q) {
      float* base = values.data() + flat[q];
      AddCopies(m, by_param, static_cast<int>(f), static_cast<int>(q), 0, m.numels[q],
                [base](int64_t i) { return base + i; }, ops);
    }
  }
  LOOM_RETURN_IF_ERROR(RunCopies(c, std::move(ops)));
  return full;
}

}  // namespace loom
