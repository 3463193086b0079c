#include "checkpoint/sharded_checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "collectives/gather_bytes.h"
#include "core/atomic_file.h"
#include "core/buffer_view.h"
#include "core/byte_codec.h"
#include "core/crc32c.h"
#include "core/posix.h"
#include "core/status_macros.h"

namespace loom {
namespace {

constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'J', 'C', '0', '1'};
constexpr absl::string_view kManifestTitle = "loom-train-checkpoint 1";
// Fields of every piece, in payload order.
constexpr int kFields = 3;  // master, exp_avg, exp_avg_sq
// The most a manifest, LATEST or an index may be: bounds what a corrupt length reads.
constexpr int64_t kMaxTextBytes = int64_t{64} << 20;

std::string StepName(int64_t step) { return absl::StrFormat("step-%08d", step); }
std::string RankFileName(int rank) { return absl::StrFormat("rank-%05d.bin", rank); }

uint32_t CrcOf(absl::string_view bytes) {
  return Crc32c(
      absl::MakeConstSpan(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
}

absl::Status FileError(absl::string_view call, const std::string& path, int error) {
  return ErrnoToStatus(error, absl::StrCat("checkpoint: ", call, " ", path));
}

// ReadSmallFile reads a whole regular file of at most kMaxTextBytes; a FIFO or a
// device is never opened for reading (DataLoss), so never waited on.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return FileError("open", path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return FileError("fstat", path, error);
  }
  if (!S_ISREG(st.st_mode) || st.st_size > kMaxTextBytes) {
    ::close(fd);
    return absl::DataLossError(
        absl::StrCat("checkpoint: ", path,
                     S_ISREG(st.st_mode) ? " is larger than 64 MiB" : " is not a regular file"));
  }
  std::string out(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : EIO;
      ::close(fd);
      return FileError("read", path, error);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return out;
}

// Text files end with "crc <CRC32C of the lines above>\n".
std::string WithCrc(std::string text) {
  const uint32_t crc = CrcOf(text);
  absl::StrAppend(&text, "crc ", crc, "\n");
  return text;
}

absl::StatusOr<std::vector<std::string>> CheckedLines(const std::string& path,
                                                      const std::string& text) {
  const size_t at = text.rfind("crc ");
  uint32_t crc = 0;
  if (at == std::string::npos || (at > 0 && text[at - 1] != '\n') || text.back() != '\n' ||
      !absl::SimpleAtoi(absl::string_view(text).substr(at + 4, text.size() - at - 5), &crc) ||
      CrcOf(absl::string_view(text).substr(0, at)) != crc) {
    return absl::DataLossError(
        absl::StrCat("checkpoint: ", path, " fails its CRC32C check (truncated or corrupt)"));
  }
  return std::vector<std::string>(absl::StrSplit(text.substr(0, at), '\n', absl::SkipEmpty()));
}

// Removes a step directory and the files in it (a stale, uncommitted save, or one
// older than `keep`).
absl::Status RemoveStepDirectory(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return errno == ENOENT ? absl::OkStatus() : FileError("opendir", path, errno);
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const absl::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  ::closedir(d);
  for (const std::string& name : names) {
    const std::string file = absl::StrCat(path, "/", name);
    if (::unlink(file.c_str()) != 0 && errno != ENOENT) return FileError("unlink", file, errno);
  }
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT) return FileError("rmdir", path, errno);
  return absl::OkStatus();
}

// The steps of the step directories in `dir`.
absl::StatusOr<std::vector<int64_t>> StepDirectories(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return FileError("opendir", dir, errno);
  std::vector<int64_t> steps;
  while (const dirent* e = ::readdir(d)) {
    const absl::string_view name = e->d_name;
    int64_t step = 0;
    if (absl::StartsWith(name, "step-") && name.size() >= 13 &&
        absl::SimpleAtoi(name.substr(5), &step) && StepName(step) == name) {
      steps.push_back(step);
    }
  }
  ::closedir(d);
  std::sort(steps.begin(), steps.end());
  return steps;
}

// ---- one rank's file

struct Piece {
  std::string name;
  int64_t full_begin = 0;
  int64_t length = 0;
};

absl::StatusOr<std::string> EncodeRankFile(const RankCheckpointPart& part) {
  const std::vector<CheckpointTensor>& tensors = part.tensors;
  ByteWriter index;
  std::string payload;
  int64_t count = 0;
  ByteWriter entries;
  for (const StateSlice& s : part.slices) {
    if (s.param < 0 || static_cast<size_t>(s.param) >= tensors.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint: a slice of tensor ", s.param, " of ", tensors.size()));
    }
    const CheckpointTensor& p = tensors[static_cast<size_t>(s.param)];
    if (s.dp_replicated && !part.saves_dp_replicated) continue;
    if (!p.saved_here) continue;
    const int64_t n = s.end - s.begin;
    if (s.begin < 0 || n < 0 || static_cast<int64_t>(s.master.size()) != n ||
        static_cast<int64_t>(s.exp_avg.size()) != n ||
        static_cast<int64_t>(s.exp_avg_sq.size()) != n) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint: slice [", s.begin, ", ", s.end, ") of ", p.name, " holds ", s.master.size(),
          "/", s.exp_avg.size(), "/", s.exp_avg_sq.size(), " values"));
    }
    int64_t at = 0;  // the run's first element in the shard
    for (const TensorRun& run : p.runs) {
      const int64_t lo = std::max(at, s.begin), hi = std::min(at + run.length, s.end);
      if (lo < hi) {
        const size_t from = static_cast<size_t>(lo - s.begin), len = static_cast<size_t>(hi - lo);
        const size_t offset = payload.size();
        for (const std::vector<float>* field : {&s.master, &s.exp_avg, &s.exp_avg_sq}) {
          payload.append(reinterpret_cast<const char*>(field->data() + from), len * sizeof(float));
        }
        entries.Str(p.name);
        entries.I64(run.full_offset + (lo - at));
        entries.I64(static_cast<int64_t>(len));
        entries.I64(static_cast<int64_t>(offset));
        entries.I64(CrcOf(absl::string_view(payload).substr(offset)));
        ++count;
      }
      at += run.length;
    }
    if (s.end > at) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint: slice [", s.begin, ", ", s.end,
                                                     ") of ", p.name, " whose shard holds ", at));
    }
  }
  index.I64(count);
  std::string header = index.Take() + entries.Take();
  ByteWriter file;
  file.I64(static_cast<int64_t>(header.size()));
  std::string out(kMagic, sizeof(kMagic));
  out += file.Take();
  out += header;
  ByteWriter crc;
  crc.I64(CrcOf(header));
  out += crc.Take();
  out += payload;
  return out;
}

// What rank 0 learns from every rank for the manifest: its file's size and its
// tensors' names and full shapes.
std::string Describe(int64_t file_bytes, const std::vector<CheckpointTensor>& tensors) {
  ByteWriter w;
  w.I64(file_bytes);
  w.I64(static_cast<int64_t>(tensors.size()));
  for (const CheckpointTensor& p : tensors) {
    w.Str(p.name);
    w.I64s(p.full_shape);
  }
  return w.Take();
}

std::string ModelLine(const ModelFields& fields) {
  std::string line = "model";
  for (const auto& [name, value] : fields) absl::StrAppend(&line, " ", name, "=", value);
  return line;
}

// CheckFields: every name and value is one word without '=' (the manifest's syntax).
absl::Status CheckFields(const ModelFields& fields) {
  for (const auto& [name, value] : fields) {
    for (const std::string* word : {&name, &value}) {
      if (word->empty() || word->find_first_of(" =\n") != std::string::npos) {
        return absl::InvalidArgumentError(
            absl::StrCat("checkpoint: model field \"", name, "=", value,
                         "\": names and values are non-empty words without '='"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Commit(const std::string& dir, const CheckpointMeta& meta,
                    const std::vector<std::string>& described,
                    const CheckpointOptions& options) {
  const std::string step_dir = absl::StrCat(dir, "/", StepName(meta.step));
  std::string manifest =
      absl::StrCat(kManifestTitle, "\nstep ", meta.step, "\n", ModelLine(meta.model), "\nsaved_by ",
                   meta.saved_by, "\ndata_seed ", meta.data_seed, "\n");
  std::map<std::string, std::vector<int64_t>> shapes;
  std::vector<std::string> order;
  std::string files;
  for (size_t r = 0; r < described.size(); ++r) {
    ByteReader in(described[r]);
    LOOM_ASSIGN_OR_RETURN(const int64_t bytes, in.I64());
    LOOM_ASSIGN_OR_RETURN(const int64_t count, in.I64());
    for (int64_t i = 0; i < count; ++i) {
      LOOM_ASSIGN_OR_RETURN(std::string name, in.Str());
      LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> shape, in.I64s());
      auto [it, added] = shapes.emplace(name, shape);
      if (added) order.push_back(name);
      if (it->second != shape) {
        return absl::InternalError(
            absl::StrCat("checkpoint: ranks disagree on the shape of ", name));
      }
    }
    absl::StrAppend(&files, "file ", RankFileName(static_cast<int>(r)), " ", bytes, "\n");
  }
  for (const std::string& name : order) {
    absl::StrAppend(&manifest, "param ", name, " ", absl::StrJoin(shapes[name], ","), "\n");
  }
  manifest += files;
  LOOM_RETURN_IF_ERROR(WriteFileAtomically(absl::StrCat(step_dir, "/MANIFEST"), WithCrc(manifest),
                                           options.testing_after_write));
  // The commit point.
  LOOM_RETURN_IF_ERROR(WriteFileAtomically(absl::StrCat(dir, "/LATEST"),
                                           WithCrc(absl::StrCat(StepName(meta.step), "\n")),
                                           options.testing_after_write));
  // Keep the newest `keep` committed checkpoints; anything newer than the commit is
  // a save that never committed.
  LOOM_ASSIGN_OR_RETURN(std::vector<int64_t> steps, StepDirectories(dir));
  int kept = 0;
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    if (*it <= meta.step && kept < options.keep) {
      ++kept;
      continue;
    }
    LOOM_RETURN_IF_ERROR(RemoveStepDirectory(absl::StrCat(dir, "/", StepName(*it))));
  }
  return absl::OkStatus();
}

// Rank 0, before any rank writes: the directories exist and hold no stale save of
// this step.
absl::Status Prepare(const std::string& dir, int64_t step) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return FileError("mkdir", dir, errno);
  const absl::StatusOr<int64_t> latest = LatestCheckpointStep(dir);
  if (latest.ok() && *latest >= step) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint: ", dir, " already holds step ",
                                                      *latest, "; this save is of step ", step));
  }
  if (!latest.ok() && latest.status().code() != absl::StatusCode::kNotFound) {
    return latest.status();
  }
  const std::string step_dir = absl::StrCat(dir, "/", StepName(step));
  LOOM_RETURN_IF_ERROR(RemoveStepDirectory(step_dir));
  if (::mkdir(step_dir.c_str(), 0755) != 0) return FileError("mkdir", step_dir, errno);
  return absl::OkStatus();
}

}  // namespace

absl::Status AgreeOnStatus(Communicator& world, const absl::Status& mine) {
  ByteWriter w;
  w.I64(static_cast<int64_t>(mine.code()));
  w.Str(mine.message());
  LOOM_ASSIGN_OR_RETURN(const std::vector<std::string> all, GatherBytes(world, w.Take()));
  std::string verdict;
  if (world.rank() == 0) {
    ByteWriter out;
    out.I64(0);
    out.Str("");
    for (size_t r = 0; r < all.size(); ++r) {
      ByteReader in(all[r]);
      LOOM_ASSIGN_OR_RETURN(const int64_t code, in.I64());
      LOOM_ASSIGN_OR_RETURN(const std::string message, in.Str());
      if (code == 0) continue;
      ByteWriter failed;
      failed.I64(code);
      failed.Str(absl::StrCat("rank ", r, ": ", message));
      out = std::move(failed);
      break;
    }
    verdict = out.Take();
  }
  int64_t size = static_cast<int64_t>(verdict.size());
  LOOM_RETURN_IF_ERROR(world.Broadcast(absl::MakeSpan(&size, 1), 0));
  verdict.resize(static_cast<size_t>(size));
  LOOM_RETURN_IF_ERROR(world.Broadcast(
      absl::MakeSpan(reinterpret_cast<uint8_t*>(verdict.data()), verdict.size()), 0));
  ByteReader in(verdict);
  LOOM_ASSIGN_OR_RETURN(const int64_t code, in.I64());
  LOOM_ASSIGN_OR_RETURN(const std::string message, in.Str());
  if (code == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(code), message);
}

absl::Status SaveCheckpoint(const std::string& dir, const CheckpointMeta& meta,
                            const RankCheckpointPart& part, Communicator& world,
                            const CheckpointOptions& options) {
  absl::Status prepared = CheckFields(meta.model);
  if (options.keep < 1) {
    prepared = absl::InvalidArgumentError(
        absl::StrCat("checkpoint: keep ", options.keep, " must be >= 1"));
  } else if (prepared.ok() && world.rank() == 0) {
    prepared = Prepare(dir, meta.step);
  }
  LOOM_RETURN_IF_ERROR(AgreeOnStatus(world, prepared));
  const std::string step_dir = absl::StrCat(dir, "/", StepName(meta.step));
  absl::StatusOr<std::string> file = EncodeRankFile(part);
  absl::Status wrote = file.status();
  if (file.ok()) {
    wrote = WriteFileAtomically(absl::StrCat(step_dir, "/", RankFileName(world.rank())), *file,
                                options.testing_after_write);
  }
  LOOM_RETURN_IF_ERROR(AgreeOnStatus(world, wrote));
  LOOM_ASSIGN_OR_RETURN(
      const std::vector<std::string> described,
      GatherBytes(world, Describe(static_cast<int64_t>(file->size()), part.tensors)));
  absl::Status committed = absl::OkStatus();
  if (world.rank() == 0) committed = Commit(dir, meta, described, options);
  return AgreeOnStatus(world, committed);
}

absl::StatusOr<int64_t> LatestCheckpointStep(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/LATEST");
  absl::StatusOr<std::string> text = ReadSmallFile(path);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) {
      return absl::NotFoundError(
          absl::StrCat("checkpoint: no checkpoint in ", dir, " (no LATEST)"));
    }
    return text.status();
  }
  LOOM_ASSIGN_OR_RETURN(const std::vector<std::string> lines, CheckedLines(path, *text));
  int64_t step = 0;
  if (lines.size() != 1 || !absl::StartsWith(lines[0], "step-") ||
      !absl::SimpleAtoi(absl::string_view(lines[0]).substr(5), &step) ||
      StepName(step) != lines[0]) {
    return absl::DataLossError(absl::StrCat("checkpoint: ", path, " does not name a step"));
  }
  return step;
}

// ---- reading

struct CheckpointReader::Index {
  std::string step_dir;
  CheckpointMeta meta;
  std::map<std::string, std::vector<int64_t>> shapes;
  struct Entry {
    int64_t full_begin = 0, length = 0;
    int file = 0;
    int64_t offset = 0;  // in the file
    uint32_t crc = 0;
  };
  std::map<std::string, std::vector<Entry>> entries;  // by name, sorted by full_begin
  std::vector<std::string> paths;
  std::vector<int> fds;
  // The last piece read: consecutive runs of one shard often fall in one piece.
  mutable std::pair<int, int64_t> cached_at = {-1, -1};
  mutable std::vector<float> cached;

  ~Index() {
    for (int fd : fds) ::close(fd);
  }

  // Reads (and checks) the piece `e`: kFields x length floats.
  absl::StatusOr<const std::vector<float>*> Read(const Entry& e) const {
    if (cached_at == std::make_pair(e.file, e.offset)) return &cached;
    cached_at = {-1, -1};
    cached.assign(static_cast<size_t>(e.length * kFields), 0.0f);
    const size_t bytes = cached.size() * sizeof(float);
    char* out = reinterpret_cast<char*>(cached.data());
    size_t done = 0;
    while (done < bytes) {
      const ssize_t n = ::pread(fds[static_cast<size_t>(e.file)], out + done, bytes - done,
                                static_cast<off_t>(e.offset + static_cast<int64_t>(done)));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        return absl::DataLossError(absl::StrCat("checkpoint: ", paths[static_cast<size_t>(e.file)],
                                                " is shorter than its index says (piece at byte ",
                                                e.offset, ")"));
      }
      done += static_cast<size_t>(n);
    }
    if (CrcOf(absl::string_view(out, bytes)) != e.crc) {
      return absl::DataLossError(absl::StrCat(
          "checkpoint: ", paths[static_cast<size_t>(e.file)], ": the piece at bytes [", e.offset,
          ", ", e.offset + static_cast<int64_t>(bytes), ") fails its CRC32C check"));
    }
    cached_at = {e.file, e.offset};
    return &cached;
  }

  // Fills [full_begin, full_begin + length) of `name` into the three outputs.
  absl::Status Fill(const std::string& name, int64_t full_begin, int64_t length,
                    absl::Span<float> master, absl::Span<float> m, absl::Span<float> v) const {
    const auto it = entries.find(name);
    int64_t covered = 0;
    if (it != entries.end()) {
      const std::vector<Entry>& list = it->second;
      // The first piece that may overlap: the last one starting at or before full_begin.
      auto e = std::upper_bound(list.begin(), list.end(), full_begin,
                                [](int64_t x, const Entry& y) { return x < y.full_begin; });
      if (e != list.begin()) --e;
      for (; e != list.end() && e->full_begin < full_begin + length; ++e) {
        const int64_t lo = std::max(full_begin, e->full_begin);
        const int64_t hi = std::min(full_begin + length, e->full_begin + e->length);
        if (lo >= hi) continue;
        LOOM_ASSIGN_OR_RETURN(const std::vector<float>* piece, Read(*e));
        const float* base = piece->data();
        for (int f = 0; f < kFields; ++f) {
          const float* from = base + f * e->length + (lo - e->full_begin);
          absl::Span<float> to = f == 0 ? master : (f == 1 ? m : v);
          std::copy(from, from + (hi - lo), to.begin() + (lo - full_begin));
        }
        covered += hi - lo;
      }
    }
    if (covered != length) {
      return absl::DataLossError(absl::StrCat("checkpoint: ", step_dir, ": elements [", full_begin,
                                              ", ", full_begin + length, ") of ", name,
                                              " are in no rank file (", covered, " found)"));
    }
    return absl::OkStatus();
  }
};

CheckpointReader::CheckpointReader(std::unique_ptr<Index> index) : index_(std::move(index)) {}
CheckpointReader::CheckpointReader(CheckpointReader&&) noexcept = default;
CheckpointReader& CheckpointReader::operator=(CheckpointReader&&) noexcept = default;
CheckpointReader::~CheckpointReader() = default;

const CheckpointMeta& CheckpointReader::meta() const { return index_->meta; }

absl::StatusOr<CheckpointReader> CheckpointReader::Open(const std::string& dir) {
  LOOM_ASSIGN_OR_RETURN(const int64_t step, LatestCheckpointStep(dir));
  auto index = std::make_unique<Index>();
  index->step_dir = absl::StrCat(dir, "/", StepName(step));
  const std::string manifest_path = absl::StrCat(index->step_dir, "/MANIFEST");
  LOOM_ASSIGN_OR_RETURN(const std::string manifest, ReadSmallFile(manifest_path));
  LOOM_ASSIGN_OR_RETURN(const std::vector<std::string> lines,
                        CheckedLines(manifest_path, manifest));
  const auto bad = [&](absl::string_view line) {
    return absl::DataLossError(
        absl::StrCat("checkpoint: ", manifest_path, ": cannot read the line \"", line, "\""));
  };
  if (lines.empty() || lines[0] != kManifestTitle) return bad(lines.empty() ? "" : lines[0]);
  std::vector<std::pair<std::string, int64_t>> files;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> words = absl::StrSplit(lines[i], ' ');
    const std::string& key = words[0];
    if (key == "step" && words.size() == 2) {
      if (!absl::SimpleAtoi(words[1], &index->meta.step)) return bad(lines[i]);
    } else if (key == "model") {
      for (size_t k = 1; k < words.size(); ++k) {
        const std::vector<std::string> kv = absl::StrSplit(words[k], '=');
        if (kv.size() != 2 || kv[0].empty() || kv[1].empty()) return bad(lines[i]);
        index->meta.model.emplace_back(kv[0], kv[1]);
      }
    } else if (key == "saved_by") {
      index->meta.saved_by = lines[i].substr(9);
    } else if (key == "data_seed" && words.size() == 2) {
      if (!absl::SimpleAtoi(words[1], &index->meta.data_seed)) return bad(lines[i]);
    } else if (key == "param" && words.size() == 3) {
      std::vector<int64_t> shape;
      for (absl::string_view d : absl::StrSplit(words[2], ',')) {
        int64_t extent = 0;
        if (!absl::SimpleAtoi(d, &extent) || extent < 0) return bad(lines[i]);
        shape.push_back(extent);
      }
      index->shapes[words[1]] = std::move(shape);
    } else if (key == "file" && words.size() == 3) {
      int64_t bytes = 0;
      if (!absl::SimpleAtoi(words[2], &bytes)) return bad(lines[i]);
      files.emplace_back(words[1], bytes);
    } else {
      return bad(lines[i]);
    }
  }
  if (index->meta.step != step) {
    return absl::DataLossError(absl::StrCat("checkpoint: ", manifest_path, " is of step ",
                                            index->meta.step, ", LATEST names ", step));
  }
  // Every rank file: its size as the manifest says, then its index.
  for (size_t f = 0; f < files.size(); ++f) {
    const std::string path = absl::StrCat(index->step_dir, "/", files[f].first);
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return FileError("open", path, errno);
    index->fds.push_back(fd);
    index->paths.push_back(path);
    struct stat st;
    if (::fstat(fd, &st) != 0) return FileError("fstat", path, errno);
    if (!S_ISREG(st.st_mode) || st.st_size != files[f].second) {
      return absl::DataLossError(absl::StrCat("checkpoint: ", path, " is ",
                                              S_ISREG(st.st_mode)
                                                  ? absl::StrCat(st.st_size, " bytes")
                                                  : std::string("not a regular file"),
                                              "; the manifest says ", files[f].second, " bytes"));
    }
    char head[sizeof(kMagic) + sizeof(int64_t)];
    int64_t header_bytes = 0;
    if (::pread(fd, head, sizeof(head), 0) != static_cast<ssize_t>(sizeof(head)) ||
        std::memcmp(head, kMagic, sizeof(kMagic)) != 0) {
      return absl::DataLossError(absl::StrCat("checkpoint: ", path, " is not a rank file"));
    }
    std::memcpy(&header_bytes, head + sizeof(kMagic), sizeof(header_bytes));
    const int64_t payload_start =
        static_cast<int64_t>(sizeof(head)) + header_bytes + static_cast<int64_t>(sizeof(int64_t));
    if (header_bytes < 0 || header_bytes > kMaxTextBytes || payload_start > st.st_size) {
      return absl::DataLossError(
          absl::StrCat("checkpoint: ", path, ": an index of ", header_bytes, " bytes"));
    }
    std::string header(static_cast<size_t>(header_bytes) + sizeof(int64_t), '\0');
    if (::pread(fd, header.data(), header.size(), static_cast<off_t>(sizeof(head))) !=
        static_cast<ssize_t>(header.size())) {
      return absl::DataLossError(absl::StrCat("checkpoint: ", path, ": a short index"));
    }
    int64_t crc = 0;
    std::memcpy(&crc, header.data() + header_bytes, sizeof(crc));
    header.resize(static_cast<size_t>(header_bytes));
    if (CrcOf(header) != static_cast<uint32_t>(crc)) {
      return absl::DataLossError(
          absl::StrCat("checkpoint: ", path, ": the index fails its CRC32C check"));
    }
    ByteReader in(header);
    LOOM_ASSIGN_OR_RETURN(const int64_t count, in.I64());
    for (int64_t i = 0; i < count; ++i) {
      LOOM_ASSIGN_OR_RETURN(const std::string name, in.Str());
      Index::Entry e;
      e.file = static_cast<int>(f);
      LOOM_ASSIGN_OR_RETURN(e.full_begin, in.I64());
      LOOM_ASSIGN_OR_RETURN(e.length, in.I64());
      LOOM_ASSIGN_OR_RETURN(const int64_t offset, in.I64());
      LOOM_ASSIGN_OR_RETURN(const int64_t piece_crc, in.I64());
      e.offset = payload_start + offset;
      e.crc = static_cast<uint32_t>(piece_crc);
      if (e.length < 0 || offset < 0 ||
          e.length > (st.st_size - e.offset) / static_cast<int64_t>(kFields * sizeof(float))) {
        return absl::DataLossError(absl::StrCat("checkpoint: ", path, ": piece ", i, " of ", name,
                                                " lies outside the file"));
      }
      index->entries[name].push_back(e);
    }
  }
  for (auto& [name, list] : index->entries) {
    std::sort(list.begin(), list.end(), [](const Index::Entry& a, const Index::Entry& b) {
      return a.full_begin < b.full_begin;
    });
  }
  return CheckpointReader(std::move(index));
}

absl::Status CheckpointReader::CheckModel(const ModelFields& model) const {
  const ModelFields& saved = index_->meta.model;
  for (const auto& [name, value] : model) {
    const auto it = std::find_if(saved.begin(), saved.end(),
                                 [&, &n = name](const auto& field) { return field.first == n; });
    if (it == saved.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the checkpoint's model has no ", name, ", this job's is ", value));
    }
    if (it->second != value) {
      return absl::FailedPreconditionError(absl::StrCat("the checkpoint's model has ", name, " ",
                                                        it->second, ", this job's ", value));
    }
  }
  return absl::OkStatus();
}

StateSource CheckpointReader::SourceFor(std::vector<CheckpointTensor> tensors) const {
  const Index* index = index_.get();
  return [index, tensors = std::move(tensors)](int param, int64_t begin, int64_t end,
                                               absl::Span<float> master, absl::Span<float> m,
                                               absl::Span<float> v) -> absl::Status {
    if (param < 0 || static_cast<size_t>(param) >= tensors.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint: tensor ", param, " of ", tensors.size()));
    }
    const CheckpointTensor& p = tensors[static_cast<size_t>(param)];
    const auto shape = index->shapes.find(p.name);
    if (shape == index->shapes.end() || shape->second != p.full_shape) {
      return absl::FailedPreconditionError(
          absl::StrCat("the checkpoint ",
                       shape == index->shapes.end()
                           ? "has no parameter "
                           : absl::StrCat("has [", absl::StrJoin(shape->second, ","), "] for "),
                       p.name, ", this job's model [", absl::StrJoin(p.full_shape, ","), "]"));
    }

    int64_t at = 0;
    for (const TensorRun& run : p.runs) {
      const int64_t lo = std::max(at, begin), hi = std::min(at + run.length, end);
      if (lo < hi) {
        const size_t to = static_cast<size_t>(lo - begin), n = static_cast<size_t>(hi - lo);
        LOOM_RETURN_IF_ERROR(index->Fill(p.name, run.full_offset + (lo - at), hi - lo,
                                         master.subspan(to, n), m.subspan(to, n),
                                         v.subspan(to, n)));
      }
      at += run.length;
    }
    if (end > at || begin < 0) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint: range [", begin, ", ", end,
                                                     ") of ", p.name, " whose shard holds ", at));
    }
    return absl::OkStatus();
  };
}

}  // namespace loom
