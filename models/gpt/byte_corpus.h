// ByteCorpus: byte-level language modelling on real text (vocabulary 256: any file
// of bytes is data). The files are memory-mapped, read-only and shared by every rank
// of a host through the page cache, and read as one concatenation; its last
// `eval_fraction` is held out for evaluation.
//
// Training sequence k starts at an offset of the training part drawn from (seed, k)
// alone, so batches cut as batch.h says are the same on every mesh with the same
// global batch, and a resumed run sees what the uninterrupted one saw. Evaluation
// sequence j is the j-th of a fixed set spread evenly over the held-out part. A
// sequence of seq_len tokens reads seq_len + 1 bytes: its targets are the tokens
// shifted by one. Sequences may run across the boundary between two files.
//
// Example:
//   ByteCorpusOptions options;
//   options.paths = {"README.md", "DESIGN.md"};
//   options.seq_len = 64;                         // eval_fraction 0.05, seed 7
//   LOOM_ASSIGN_OR_RETURN(ByteCorpus corpus, ByteCorpus::Open(options));
//   corpus.train_bytes() + corpus.eval_bytes();   // the two files' sizes together
//   LOOM_ASSIGN_OR_RETURN(GptBatch b, corpus.Microbatch(layout, step, microbatch, dp_rank));
//   LOOM_ASSIGN_OR_RETURN(GptBatch held_out, corpus.EvalSequences(0, 16));
//   ByteCorpus::Open({.paths = {"/nonexistent"}, .seq_len = 64})
//   // NotFound: "ByteCorpus: cannot open /nonexistent: No such file or directory"
#ifndef LOOM_MODELS_GPT_BYTE_CORPUS_H_
#define LOOM_MODELS_GPT_BYTE_CORPUS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "models/gpt/batch.h"

namespace loom {

struct ByteCorpusOptions {
  std::vector<std::string> paths;  // read in this order, as one text
  int64_t seq_len = 32;            // tokens per sequence, >= 1
  double eval_fraction = 0.05;     // held out at the end, in [0, 0.5]
  uint64_t seed = 7;               // draws the training sequences' offsets
};

class ByteCorpus {
 public:
  // Open maps the files. NotFound / PermissionDenied (with the errno text) for a file
  // that cannot be opened; InvalidArgument naming the path for one that is not a
  // regular file or is empty, naming the sizes when the training part or a non-empty
  // held-out part is shorter than one sequence (seq_len + 1 bytes), and for no paths,
  // seq_len < 1 or eval_fraction outside [0, 0.5].
  static absl::StatusOr<ByteCorpus> Open(const ByteCorpusOptions& options);

  ByteCorpus(ByteCorpus&&) noexcept;
  ByteCorpus& operator=(ByteCorpus&&) noexcept;
  ~ByteCorpus();

  int64_t vocab() const { return 256; }
  int64_t train_bytes() const { return train_bytes_; }
  int64_t eval_bytes() const { return total_bytes_ - train_bytes_; }
  const ByteCorpusOptions& options() const { return options_; }

  // TrainOffset: where training sequence k starts in the concatenation.
  int64_t TrainOffset(int64_t k) const;
  // Sequences returns training sequences [first, first + count). InvalidArgument for
  // a negative first or count.
  absl::StatusOr<GptBatch> Sequences(int64_t first, int64_t count) const;
  // Microbatch returns the training sequences of (step, microbatch, dp_rank), cut as
  // batch.h says; its errors are FirstSequenceOf's.
  absl::StatusOr<GptBatch> Microbatch(const BatchLayout& layout, int64_t step, int64_t microbatch,
                                      int64_t dp_rank) const;

  // EvalCount: how many distinct evaluation sequences the held-out part holds (its
  // sequences do not overlap); 0 when nothing is held out.
  int64_t EvalCount() const;
  // EvalSequences returns evaluation sequences [first, first + count).
  // InvalidArgument unless 0 <= first and first + count <= EvalCount().
  absl::StatusOr<GptBatch> EvalSequences(int64_t first, int64_t count) const;

 private:
  struct Mapping {
    const std::byte* data = nullptr;
    int64_t bytes = 0;
    int64_t start = 0;  // offset of its first byte in the concatenation
  };

  ByteCorpus() = default;
  void Release();
  // Read copies bytes [offset, offset + count) of the concatenation as tokens.
  void Read(int64_t offset, int64_t count, int64_t* tokens) const;
  GptBatch Gather(const std::vector<int64_t>& offsets) const;

  ByteCorpusOptions options_;
  std::vector<Mapping> mappings_;
  int64_t total_bytes_ = 0;
  int64_t train_bytes_ = 0;
};

}  // namespace loom

#endif  // LOOM_MODELS_GPT_BYTE_CORPUS_H_
