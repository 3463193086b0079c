// CostModel: the alpha-beta-gamma model the adaptive selector uses to pick an
// algorithm per (collective, bytes, ranks, node layout), with constants measured on
// the machine (Calibrate, in calibration.h) and saved to / loaded from a small text
// file, so a job does not re-measure at every start.
//
//   alpha: seconds per message (latency, synchronization);
//   beta:  seconds per byte a rank sends (bandwidth);
//   gamma: seconds per byte a rank reduces (reduction kernel speed);
// with separate alpha and beta between nodes for the hierarchical algorithm. The
// predicted time of each algorithm is its textbook cost (Thakur, Rabenseifner and
// Gropp 2005; Chan et al. 2007) in these constants; the selector takes the minimum.
// Where a formula and a link disagree (TCP between hosts, a rate-limited link, the
// engine's own collectives, which follow no formula Loom knows), measured curves
// take over: an algorithm's time measured on the communicator itself at a few sizes
// (Calibrate with `curve_sizes`), read log-log between them. Algorithm::kNative
// (MPI's, NCCL's collectives) is priced by its curve alone, and competes only where
// the caller allows it (Explain's `allow_native`: the transport has them, and the
// communicator is not deterministic).
//
// Example:
//   CostModel model = CostModel::Default();
//   Explanation why = model.Explain(CollectiveKind::kAllReduce, /*bytes=*/64 << 20,
//                                   /*ranks=*/8, /*ranks_per_node=*/0);
//   why.chosen;          // Algorithm::kRing
//   why.ToString();      // "all_reduce 64 MiB on 8 ranks: ring (predicted 31.2 ms);
//                        //  halving_doubling 31.5 ms, double_binary_tree 45 ms, ..."
//   LOOM_RETURN_IF_ERROR(model.Save("/tmp/loom_cost_model.txt"));
//   LOOM_ASSIGN_OR_RETURN(CostModel same, CostModel::Load("/tmp/loom_cost_model.txt"));
#ifndef LOOM_COLLECTIVES_COST_MODEL_H_
#define LOOM_COLLECTIVES_COST_MODEL_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "collectives/collective_kind.h"

namespace loom {

// LowerMedian: the middle value, the lower of the two middle ones for an even count
// (so the lower of two); 0 for none. (A calibration's point is the lower median of
// its batches, and CostModel::Median merges calibrations by it.)
double LowerMedian(std::vector<double> values);

// Explanation: why the selector picked an algorithm.
struct Explanation {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  size_t bytes = 0;
  int ranks = 1;
  int ranks_per_node = 0;
  Algorithm chosen = Algorithm::kRing;
  // Whether the chosen algorithm was priced by a measured curve (else by formula).
  bool measured = false;
  // Every candidate with its predicted seconds, fastest first.
  std::vector<std::pair<Algorithm, double>> predictions;

  std::string ToString() const;
};

// How close (relative) two measured prices must be for Explain to call them a tie.
inline constexpr double kMeasuredTie = 0.05;
// How much faster than Loom's measured algorithms the engine's own (native) must be
// priced to be chosen: its speed changes from process to process.
inline constexpr double kNativeTie = 0.2;
// A tie at a size is judged over the measured sizes within this factor of it too.
inline constexpr size_t kTieNeighborhood = 4;

class CostModel {
 public:
  // The constants, in seconds and seconds per byte.
  struct Constants {
    double alpha = 2e-6;
    double beta = 1.0 / 5e9;
    double gamma = 1.0 / 10e9;
    double inter_node_alpha = 20e-6;
    double inter_node_beta = 1.0 / 1e9;
  };

  // Default returns rough constants for shared memory on one host, used until a
  // calibration run replaces them.
  static CostModel Default();
  // FromConstants validates them: InvalidArgument naming a constant that is not
  // finite and positive.
  static absl::StatusOr<CostModel> FromConstants(const Constants& constants);

  // Median: the model whose every constant and measured curve point is the lower
  // median (the middle one; the lower of the two middle ones for an even count) of
  // those of `models` that have it: several calibrations of the same layout, each one
  // draw of the machine's weather (AutoCalibrate merges its launches so). A curve
  // takes every size any of them measured. InvalidArgument for no models, or for a
  // model whose constants were not measured or given.
  static absl::StatusOr<CostModel> Median(absl::Span<const CostModel> models);

  const Constants& constants() const { return constants_; }
  // Whether the constants were measured or given (FromConstants, Parse: a
  // calibration's or a user's), not Default()'s rough guesses. Only such a model's
  // link sizes the trees' window (Communicator: CallContext::agreed_path).
  bool constants_given() const { return constants_given_; }

  // A measured curve: an algorithm's time per call at a few sizes (bytes as Predict
  // counts them, seconds), on the layout (ranks, ranks per node) and links the model
  // was calibrated on; it prices that layout only (a group split from the job keeps
  // the formulas).
  using Curve = std::vector<std::pair<size_t, double>>;
  // SetCurve prices `algorithm` for `kind` on `ranks` ranks, `ranks_per_node` per
  // node (0, or ranks or more: one node), by `points` (sorted here) instead of its
  // formula. InvalidArgument for fewer than two ranks or points, a size repeated or
  // zero, a time that is not finite and positive, or an algorithm `kind` lacks.
  absl::Status SetCurve(CollectiveKind kind, Algorithm algorithm, int ranks, int ranks_per_node,
                        Curve points);
  // curve returns the measured curve of (`kind`, `algorithm`) on that layout, empty
  // if none.
  absl::Span<const std::pair<size_t, double>> curve(CollectiveKind kind, Algorithm algorithm,
                                                    int ranks, int ranks_per_node) const;

  // Predict returns the model's seconds for `algorithm` running `kind` where each
  // rank contributes `bytes` (all_reduce / broadcast / reduce: the vector;
  // reduce_scatter / all_to_all: the whole input; all_gather / gather: the whole
  // output) on `ranks` ranks, `ranks_per_node` per node (0: one node).
  // A measured curve, where there is one, gives the time instead of the formula.
  // InvalidArgument when the algorithm does not implement the collective;
  // FailedPrecondition for kNative on a kind with no measured curve.
  absl::StatusOr<double> Predict(CollectiveKind kind, Algorithm algorithm, size_t bytes,
                                 int ranks, int ranks_per_node) const;

  // Explain prices every algorithm that implements `kind` and can run on this
  // layout, and native too where `allow_native` and a measured native curve of
  // `kind` exist, and picks the fastest (ties go to Loom's algorithms, then to the
  // earlier in AlgorithmsFor). Where the fastest is priced by a measured curve, the
  // measured algorithms within kMeasuredTie of it tie (within kNativeTie where it
  // is native, which takes a tie only where no Loom algorithm is in it): one point's
  // noise is as large as that. Of the tied, those
  // whose curves end short of this size and of another's end drop out (their price
  // here is an extension, not a measurement). Each of the tied is
  // scored over this size and the measured sizes within kTieNeighborhood of it
  // (the mean of its prices' ratios to the best of the tied there; of an all-reduce
  // that runs by nodes from kNodeAwareBytes, only the sizes on this size's side of
  // it, where the same form runs), and the tie goes
  // to the earliest in AlgorithmsFor of those within kMeasuredTie of the best score.
  // The chosen one comes first in `predictions`.
  Explanation Explain(CollectiveKind kind, size_t bytes, int ranks, int ranks_per_node,
                      bool allow_native = false) const;

  // Serialize / Parse: "key value" lines, '#' comments, and a line "curve <kind>
  // <algorithm> <ranks> <ranks per node> <bytes>:<seconds>,..." per measured curve; Parse rejects unknown or
  // missing keys and malformed curves with InvalidArgument naming the line.
  std::string Serialize() const;
  static absl::StatusOr<CostModel> Parse(absl::string_view text);
  // Save writes Serialize() to `path`; Load reads and parses it. Errors name the path
  // and the errno text.
  absl::Status Save(const std::string& path) const;
  static absl::StatusOr<CostModel> Load(const std::string& path);

 private:
  explicit CostModel(const Constants& constants) : constants_(constants) {}
  bool measured(CollectiveKind kind, Algorithm algorithm, int ranks, int ranks_per_node) const;
  // TieBreak returns the index in `predictions` (sorted, fastest first; the first is
  // measured) of the tie's winner, as Explain describes.
  size_t TieBreak(CollectiveKind kind, size_t bytes, int ranks, int ranks_per_node,
                  const std::vector<std::pair<Algorithm, double>>& predictions) const;
  Constants constants_;
  bool constants_given_ = false;
  struct Measured {
    CollectiveKind kind;
    Algorithm algorithm;
    int ranks;
    int ranks_per_node;  // 0: one node
    Curve points;
  };
  std::vector<Measured> curves_;
};

}  // namespace loom

#endif  // LOOM_COLLECTIVES_COST_MODEL_H_
