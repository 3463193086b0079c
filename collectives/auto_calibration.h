// AutoCalibrate: the cost model a communicator across hosts should choose its
// algorithms by, measured on its own hosts and links the first time, and read from a
// per-cluster cache file after that, with no flag or file from the user.
//
// Across hosts the formulas miss what TCP and the MPI or gloo engine do to each
// algorithm (a 2 Gbit/s link measured the ring at 3x halving-doubling's time where
// the formulas priced them equal), so `auto` needs measured curves; inside one host
// the formulas, whose constants were fitted on shared memory, stand.
//
// What it does (collective: every rank of the communicator calls it):
//   1. Every rank's host name is gathered; the key is the transport, the hosts in
//      rank order and the ranks per host. One host: nothing is measured, and the
//      communicator keeps the model it has (source kFormula).
//   2. Rank 0 looks for "<cache_dir>/cost_model-<key hash>.txt" written for the same
//      key no longer than `max_age` ago. Found, holding `calibrations_merged`
//      calibrations: every rank adopts rank 0's copy (source kCache). Found with
//      fewer: this job measures as in 3 and the cache becomes the median of them all.
//   3. Otherwise the constants and the all-reduce curves of every algorithm (and the
//      engine's own, where the communicator may use it) are measured at
//      `curve_sizes`, within about `budget`; points faster than the link allows
//      are measured again over longer batches (PointsToMeasureAgain, MeasureAgain)
//      and what is still under the floor then is re-priced (FloorAtTheLargestRate);
//      the finalists are measured at 4x the largest size; merged with the cache's
//      earlier calibrations (the median of each point); rank 0 writes the cache file
//      (atomic; failure to write it is reported, not fatal) and every rank adopts the
//      same model (source kMeasured).
// Every rank ends with the same model, so every rank picks the same algorithm.
//
// Example (every rank):
//   LOOM_ASSIGN_OR_RETURN(AutoCalibration calibration, AutoCalibrate(*comm));
//   LOG(INFO) << calibration.ToString();
//   // "cost model measured on 2 hosts (mpi 2 ranks, 1 per host: h1,h2) in 1.73 s
//   //  (5 points measured again), saved to /root/.cache/loom/cost_model-ec4e....txt"
//   comm->Explain(CollectiveKind::kAllReduce, 16 << 20).ToString();  // "... (measured)"
#ifndef LOOM_COLLECTIVES_AUTO_CALIBRATION_H_
#define LOOM_COLLECTIVES_AUTO_CALIBRATION_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collectives/communicator.h"
#include "collectives/cost_model.h"

namespace loom {

struct AutoCalibrationOptions {
  // Where cache files live. Empty: $LOOM_CACHE_DIR, else $XDG_CACHE_HOME/loom, else
  // $HOME/.cache/loom (created as needed). Read and written on rank 0's host only.
  std::string cache_dir;
  // This rank's host name; empty: gethostname(). (Tests emulate hosts with it.)
  std::string host_name;
  // A cache file older than this is measured again (links and hosts change).
  absl::Duration max_age = absl::Hours(7 * 24);
  // Sizes (bytes per rank) of the measured all-reduce curves, latency-bound to
  // bandwidth-bound; the model reads between them on log-log and extends the last
  // segment beyond. Two or more, each at least 4 bytes. A factor of 4 apart: with
  // nothing between 4 and 64 KiB, MPI's own all-reduce on 2 hosts x 2 ranks was read
  // at 16 KiB as 0.19 ms from its two ends, where it takes 0.27 (Open MPI changes
  // its algorithm in between): 16 of 24 calibrations chose it or direct there, at
  // 0.86..0.89 of the binomial tree; with a 16 KiB point 47 of 48 chose the tree
  // (collectives/README.md, "A curve point at 16 KiB").
  // The algorithms within 10% of the best at the largest are also measured at 4x it
  // (one 4 MiB point varies by about 5% from calibration to calibration across 2
  // emulated hosts, so 5% left the algorithm that was best at 16 MiB unmeasured
  // there), the cheapest first, as many as the budget leaves room for and two at
  // least (PlanFinalists); the other curves grow to 4x it as the least of theirs did.
  // The measurement runs each (algorithm, size) three times or more.
  std::vector<size_t> curve_sizes = {size_t{4} << 10,   size_t{16} << 10, size_t{64} << 10,
                                     size_t{256} << 10, size_t{1} << 20,  size_t{4} << 20};
  // How many jobs' calibrations the cache merges before later jobs only read it. A
  // job that finds fewer measures as well, and the cache then holds the median of
  // all of them (CostModel::Median) with each one beside it. One launch can run slow
  // from start to end: across 3 emulated hosts on 2 cores one calibration's 4 KiB
  // calls all took 2..4 times the algorithms' usual times, and the model it cached
  // chose the double tree there, at 0.60 of the best, for every job after it. The
  // median of three outvotes one such launch. 1: the first calibration is kept.
  int calibrations_merged = 3;
  // What the measurement may take; the batches are sized from it. The measurement
  // runs each (algorithm, size) at least three times, so a slow link can take longer.
  absl::Duration budget = absl::Seconds(2);
};

struct AutoCalibration {
  enum class Source { kFormula, kCache, kMeasured };
  Source source = Source::kFormula;
  CostModel model = CostModel::Default();
  int hosts = 1;
  int ranks_per_host = 0;  // 0: not the same on every host
  // "mpi 4 ranks, 2 per host, 2 per node over shm: h1,h1,h2,h2": the transport, the
  // ranks, per host (by name), the communicator's node layout, the hosts.
  std::string key;
  std::string path;        // the cache file (kCache, kMeasured)
  absl::Duration age;      // kCache: how old the file is
  absl::Duration took;     // the whole call, measurement included
  std::string save_error;  // kMeasured: why the cache file could not be written, if so
  int measured_again = 0;  // kMeasured: points measured again (PointsToMeasureAgain)
  // kMeasured, kCache: how many calibrations (this one included, when measured) the
  // model is the median of.
  int calibrations = 0;

  // One line for logs and reports, e.g. "cost model from cache (age 2h)...".
  std::string ToString() const;
};

// AutoCalibrate measures or loads the model as above and installs it on `comm`
// (Communicator::SetCostModel). Errors: the communicator's (a peer that fails mid
// measurement), InvalidArgument for bad options. A cache file that cannot be read
// or parsed is measured over, not an error.
absl::StatusOr<AutoCalibration> AutoCalibrate(Communicator& comm,
                                              const AutoCalibrationOptions& options = {});

// PlanFinalists: which finalists AutoCalibrate measures (of the algorithms within
// 10% of the best at the largest curve size) at 4x that size, given each one's price
// of a call there (its curve carried on) and the seconds left of the budget: the
// cheapest first, two calls each, as many as fit, and two at least (fewer only where
// there are fewer), so the choice is still between measured algorithms; returned
// cheapest first. The others keep their curves' extension.
std::vector<Algorithm> PlanFinalists(std::vector<std::pair<Algorithm, double>> prices,
                                     double seconds_left);

// A point of a measured all-reduce curve.
struct CurvePoint {
  Algorithm algorithm;
  size_t bytes = 0;
};

// FloorAtTheLargestRate re-prices each point of every measured all-reduce curve of
// `model` (on `ranks` ranks, `ranks_per_node` a node) that is faster than the link
// allows: below `bytes` times the fastest time per byte at the largest size every
// curve reaches, that time less the most any curve took at its smallest size (an
// upper bound of each algorithm's latency). Under alpha + beta x bytes no algorithm
// moves a smaller buffer faster per byte than that; across hosts a point under it
// was measured while a link's queue or token bucket, refilled while it was idle,
// carried a few calls at memory speed, or while the ranks' calls overlapped a
// batch's edges. Such a point tells nothing of how the algorithm compares, so it is
// priced as the fastest credible point at its size (the floor where there is none):
// it ties with that one, and the tie is judged by the neighbouring sizes, then by a
// fixed order, the ring first (CostModel::Explain). Across 3 emulated hosts at 2
// Gbit/s two calibrations of three priced halving-doubling's 256 KiB all-reduce at
// 1.04 and 1.12 ms, where the link's rate bounds every algorithm to 1.40 ms and its
// runs took 1.58..1.76 ms, and auto ran it at 0.86 and 0.88 of the ring; raised to
// the floor alone, a point still won by more than the tie (halving-doubling at
// 1.399 ms against the ring's credible 1.475, run at 0.91 of it). Curves of fewer
// than two points, other layouts and other kinds are left as they are. (Where a
// larger buffer costs more per byte for another reason, cache misses on one host,
// the floor is higher than the truth; AutoCalibrate runs across hosts only.)
//
// `measured_again` (PointsToMeasureAgain) are left as they are, and count as credible.
absl::Status FloorAtTheLargestRate(int ranks, int ranks_per_node, CostModel* model,
                                   absl::Span<const CurvePoint> measured_again = {});

// PointsToMeasureAgain: at each size with points FloorAtTheLargestRate would re-price
// (under the floor), those points and the fastest credible one there, smallest size
// first. AutoCalibrate measures them again over longer batches (three of about 10 ms
// after a warm call; the calibration's own batches are a few calls) within 15% of its
// budget, and takes what they measure as it is: a long run of back-to-back calls
// drains what a link carried at memory speed, so what is still under the floor then
// is the floor's error. Priced at the credible point alone, a true point could lose:
// on 2 hosts x 2 ranks halving-doubling's 64 KiB measured 0.270 ms against a floor of
// 0.271 (drawn from 4 MiB calls of 4 ranks on 2 cores), was priced as the ring's
// 0.413, and auto ran the ring at 0.66 of it. And the credible point itself can be
// the slow one: on 3 hosts the ring's 64 KiB point was 0.422 ms where every
// algorithm's runs took 0.36..0.37.
std::vector<CurvePoint> PointsToMeasureAgain(int ranks, int ranks_per_node,
                                             const CostModel& model);

// MeasureAgain measures `points` of `model`'s all-reduce curves on `comm`'s layout
// again, each over three batches of about 10 ms after a warm call, as many as fit in
// `allowance` seconds, first to last; each point's price (a warm and a timed call,
// and each batch at least one call) is reckoned from its curve, so every rank plans
// the same. Each measured point takes the slowest rank's time. Returns the points it
// measured. A collective call: every rank of `comm` calls it with the same model,
// points and allowance.
absl::StatusOr<std::vector<CurvePoint>> MeasureAgain(Communicator& comm,
                                                     absl::Span<const CurvePoint> points,
                                                     double allowance, CostModel* model);

// CostModelCacheDir returns the directory AutoCalibrate uses when options name none.
std::string CostModelCacheDir();

}  // namespace loom

#endif  // LOOM_COLLECTIVES_AUTO_CALIBRATION_H_
