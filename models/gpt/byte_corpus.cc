#include "models/gpt/byte_corpus.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/posix.h"

namespace loom {
namespace {

constexpr char kName[] = "ByteCorpus";

// SplitMix64: a full-period mix of 64 bits, so offsets of neighbouring sequence
// indices are unrelated.
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

absl::Status OpenError(int error, const std::string& path) {
  return ErrnoToStatus(error, absl::StrCat(kName, ": cannot open ", path));
}

}  // namespace

absl::StatusOr<ByteCorpus> ByteCorpus::Open(const ByteCorpusOptions& options) {
  if (options.paths.empty()) return absl::InvalidArgumentError(absl::StrCat(kName, ": no files"));
  if (options.seq_len < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": seq_len ", options.seq_len, " is below 1"));
  }
  if (!(options.eval_fraction >= 0.0 && options.eval_fraction <= 0.5)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": eval_fraction ", options.eval_fraction, " is outside [0, 0.5]"));
  }
  ByteCorpus corpus;
  corpus.options_ = options;
  for (const std::string& path : options.paths) {
    // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return OpenError(errno, path);
    struct stat info;
    if (fstat(fd, &info) != 0) {
      const int error = errno;
      close(fd);
      return OpenError(error, path);
    }
    if (!S_ISREG(info.st_mode)) {
      close(fd);
      return absl::InvalidArgumentError(absl::StrCat(kName, ": ", path, " is not a regular file"));
    }
    if (info.st_size == 0) {
      close(fd);
      return absl::InvalidArgumentError(absl::StrCat(kName, ": ", path, " is empty"));
    }
    void* data = mmap(nullptr, static_cast<size_t>(info.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    const int error = errno;
    close(fd);  // The mapping keeps the file.
    if (data == MAP_FAILED) {
      return ErrnoToStatus(
          error, absl::StrCat(kName, ": cannot map ", path, " (", info.st_size, " bytes)"));
    }
    // Training reads sequences at random offsets.
    madvise(data, static_cast<size_t>(info.st_size), MADV_RANDOM);
    corpus.mappings_.push_back({static_cast<const std::byte*>(data),
                                static_cast<int64_t>(info.st_size), corpus.total_bytes_});
    corpus.total_bytes_ += info.st_size;
  }
  const int64_t sequence = options.seq_len + 1;
  const int64_t held_out = static_cast<int64_t>(
      std::floor(static_cast<double>(corpus.total_bytes_) * options.eval_fraction));
  corpus.train_bytes_ = corpus.total_bytes_ - held_out;
  if (corpus.train_bytes_ < sequence || (held_out > 0 && held_out < sequence)) {
    return absl::InvalidArgumentError(absl::StrCat(
        kName, ": ", corpus.total_bytes_, " bytes split into ", corpus.train_bytes_,
        " for training and ", held_out, " held out (eval_fraction ", options.eval_fraction,
        "); each part needs at least one sequence of seq_len + 1 = ", sequence, " bytes"));
  }
  return corpus;
}

ByteCorpus::ByteCorpus(ByteCorpus&& other) noexcept { *this = std::move(other); }

ByteCorpus& ByteCorpus::operator=(ByteCorpus&& other) noexcept {
  if (this != &other) {
    Release();
    options_ = std::move(other.options_);
    mappings_ = std::move(other.mappings_);
    total_bytes_ = other.total_bytes_;
    train_bytes_ = other.train_bytes_;
    other.mappings_.clear();
  }
  return *this;
}

ByteCorpus::~ByteCorpus() { Release(); }

void ByteCorpus::Release() {
  for (const Mapping& mapping : mappings_) {
    munmap(const_cast<std::byte*>(mapping.data), static_cast<size_t>(mapping.bytes));
  }
  mappings_.clear();
}

void ByteCorpus::Read(int64_t offset, int64_t count, int64_t* tokens) const {
  // The last mapping that starts at or before `offset`.
  auto it = std::upper_bound(mappings_.begin(), mappings_.end(), offset,
                             [](int64_t at, const Mapping& m) { return at < m.start; });
  size_t file = static_cast<size_t>(it - mappings_.begin()) - 1;
  int64_t within = offset - mappings_[file].start;
  for (int64_t i = 0; i < count; ++i) {
    while (within >= mappings_[file].bytes) {  // across a file boundary
      ++file;
      within = 0;
    }
    tokens[i] = static_cast<int64_t>(static_cast<uint8_t>(mappings_[file].data[within]));
    ++within;
  }
}

int64_t ByteCorpus::TrainOffset(int64_t k) const {
  const uint64_t starts = static_cast<uint64_t>(train_bytes_ - options_.seq_len);
  return static_cast<int64_t>(Mix(options_.seed ^ Mix(static_cast<uint64_t>(k))) % starts);
}

GptBatch ByteCorpus::Gather(const std::vector<int64_t>& offsets) const {
  GptBatch batch;
  batch.batch = static_cast<int64_t>(offsets.size());
  batch.seq_len = options_.seq_len;
  const size_t length = static_cast<size_t>(options_.seq_len);
  batch.tokens.resize(offsets.size() * length);
  batch.targets.resize(offsets.size() * length);
  std::vector<int64_t> window(length + 1);
  for (size_t s = 0; s < offsets.size(); ++s) {
    Read(offsets[s], options_.seq_len + 1, window.data());
    std::copy(window.begin(), window.end() - 1, batch.tokens.begin() + s * length);
    std::copy(window.begin() + 1, window.end(), batch.targets.begin() + s * length);
  }
  return batch;
}

absl::StatusOr<GptBatch> ByteCorpus::Sequences(int64_t first, int64_t count) const {
  if (first < 0 || count < 0 || first > INT64_MAX - count) {
    return absl::InvalidArgumentError(
        absl::StrCat(kName, ": sequences [", first, ", +", count, ") must not be negative"));
  }
  std::vector<int64_t> offsets(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) offsets[static_cast<size_t>(k)] = TrainOffset(first + k);
  return Gather(offsets);
}

absl::StatusOr<GptBatch> ByteCorpus::Microbatch(const BatchLayout& layout, int64_t step,
                                                int64_t microbatch, int64_t dp_rank) const {
  absl::StatusOr<int64_t> first = FirstSequenceOf(kName, layout, step, microbatch, dp_rank);
  if (!first.ok()) return first.status();
  return Sequences(*first, layout.micro_batch);
}

int64_t ByteCorpus::EvalCount() const { return eval_bytes() / (options_.seq_len + 1); }

absl::StatusOr<GptBatch> ByteCorpus::EvalSequences(int64_t first, int64_t count) const {
  const int64_t available = EvalCount();
  if (first < 0 || count < 0 || first > available - count) {
    return absl::InvalidArgumentError(absl::StrCat(kName, ": evaluation sequences [", first, ", +",
                                                   count, ") are outside the ", available,
                                                   " the held-out ", eval_bytes(), " bytes hold"));
  }
  // Back to back from the start of the held-out part: fixed, and none overlaps.
  std::vector<int64_t> offsets(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j) {
    offsets[static_cast<size_t>(j)] = train_bytes_ + (first + j) * (options_.seq_len + 1);
  }
  return Gather(offsets);
}

}  // namespace loom
