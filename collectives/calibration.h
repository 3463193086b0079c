// Calibrate: measures the cost model's constants on the machine the communicator
// runs on, so the adaptive selector prices algorithms with real numbers.
//   alpha: half the round trip of an 8-byte message between ranks 0 and 1 (over the
//          node transport, local ranks 0 and 1, where the options name one);
//   beta:  from the round trip of a large message (minus alpha), per byte;
//   gamma: the f32 sum kernel's time per byte, on rank 0;
//   inter-node alpha and beta: as alpha and beta, between rank 0 and the first rank
//   of the next node when the communicator has several nodes (else copies of
//   alpha and beta);
//   curves (only with `curve_sizes`): rank 0's mean time per call of every
//   algorithm that can run all_reduce, reduce_scatter, all_gather and broadcast on
//   this layout, and of the transport's own collectives (native: MPI's) where it
//   has them and the communicator is not deterministic, at each size; the selector
//   then prices them by what they took on this very layout and link rather than
//   by formula (across hosts the formulas miss TCP's and the engine's behaviour).
// Rank 0 measures with its partners and broadcasts the constants, so every rank
// ends with the same model and hence makes the same choices.
//
// Example (every rank):
//   LOOM_ASSIGN_OR_RETURN(CostModel model, Calibrate(*comm));
//   if (comm->rank() == 0) LOOM_RETURN_IF_ERROR(model.Save("loom_cost_model.txt"));
//   // later, in the job: options.cost_model = *CostModel::Load("loom_cost_model.txt");
#ifndef LOOM_COLLECTIVES_CALIBRATION_H_
#define LOOM_COLLECTIVES_CALIBRATION_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/communicator.h"
#include "collectives/cost_model.h"

namespace loom {

struct CalibrationOptions {
  int latency_round_trips = 200;
  size_t bandwidth_bytes = size_t{4} << 20;
  int bandwidth_round_trips = 10;
  // Positive: the latency (bandwidth) round trips are cut to about this many seconds,
  // as the unmeasured first trip times one, 3 at least. Over 4.3 ms round trips the
  // automatic calibration's 20 small ones took a twentieth of its 2 s.
  double latency_seconds = 0;
  double bandwidth_seconds = 0;
  // Sizes (bytes, as CostModel::Predict counts them) of the measured curves; empty
  // (the default): the formulas alone. Each (kind, algorithm, size) runs
  // `curve_batches` batches of calls, each about `curve_batch_seconds` long (at least
  // one call), and keeps the lower median of their means (as MeasureCall); at each
  // size the candidates' batches take turns (one of each, then the next round), so
  // that a slow stretch of the machine weighs on every candidate alike. A curve up
  // to 64 MiB over a 2 Gbit/s link takes minutes: measure once, Save, and Load.
  std::vector<size_t> curve_sizes;
  // The collectives whose curves are measured (the others keep their formulas).
  std::vector<CollectiveKind> curve_kinds = {CollectiveKind::kAllReduce,
                                             CollectiveKind::kReduceScatter,
                                             CollectiveKind::kAllGather,
                                             CollectiveKind::kBroadcast};
  int curve_batches = 3;
  double curve_batch_seconds = 0.02;
  // Negative: a warm call before every (kind, algorithm, size). Otherwise one only
  // before each algorithm's first size, and before the others too when the measured
  // constants price those calls (every candidate at every size but the first, as
  // CostModel::Explain predicts them) within this many seconds. Over a 4 ms round
  // trip they cost a third of the automatic calibration's 2 s (auto_calibration.h).
  double curve_warm_seconds = -1;
  // Positive: curve_batches is cut to 2 (the lower of two) where the batches' round
  // trips, priced by the measured constants (2 x inter_node_alpha a batch, every
  // candidate at every size), would take longer than this. Over 4 ms round trips a
  // third batch cost the automatic calibration 0.5 s of its 2 s; on a short link it
  // costs the calls alone. Otherwise every point runs curve_batches.
  double curve_round_trip_seconds = -1;
  // Positive, with ascending curve_sizes: an algorithm whose price at the size before
  // the largest is more than this many times the least of the candidates there (all
  // ranks' slowest, agreed) is not run at the largest (the least always is); that point
  // is priced as its previous one times the ratio of the sizes (time proportional to
  // bytes: under alpha + beta x bytes no algorithm's time grows faster, so the price
  // is not below what the call would take). Two times the best at 1 MiB is at least
  // 1.27 times it at 4 MiB under the same model, so such an algorithm could not have
  // been within 10% there either (auto_calibration.h measures those further). Over 2
  // ms links the binomial tree's, the double tree's and Open MPI's own 4 MiB calls
  // took 0.7 s of the automatic calibration's 3.1 s on 3 hosts. 0: every size runs.
  double curve_prune_factor = 0;
};

// MeasureCall returns the seconds of one call of `kind` (all_reduce, reduce_scatter,
// all_gather or broadcast; InvalidArgument otherwise) by `algorithm` moving `bytes`
// (as CostModel::Predict counts them) in f32, as this rank measured it: after a warm
// call (unless `warm` is false: the caller ran the algorithm already), the lower
// median of the means of `batches` batches (LowerMedian: with 3, the middle one), so
// that a stall of the machine or the network in one batch does not price an
// algorithm out (a 4 KiB all-reduce measured 1.4 ms once, against 19 us typical,
// across emulated hosts), and one lucky batch does not price it in: the lowest of
// two single calls priced halving-doubling's 1 MiB all-reduce at 4.85 ms across 2
// emulated hosts, where it took 5.66 ms a call over many (direct: 4.9 and 4.9), and
// auto chose it at 0.87 of direct. With `batch_seconds` > 0 rank 0
// sizes the batches from one more timed call and broadcasts their length, so every
// rank runs the same calls; where that length is one call, the timed call is the
// first batch. With 0 each batch is `calls` calls. `agreed_calls`, when given, is
// set to the calls a batch had (the same on every rank). Collective.
absl::StatusOr<double> MeasureCall(Communicator& comm, CollectiveKind kind, Algorithm algorithm,
                                   size_t bytes, int batches, double batch_seconds,
                                   bool warm = true, int calls = 1,
                                   int64_t* agreed_calls = nullptr);

// Calibrate is collective: every rank of `comm` calls it. Returns the measured
// model (rank 0's constants; each curve point the slowest rank's time), or the
// communicator's error. A single-rank communicator measures gamma
// only and keeps the default alpha and beta.
absl::StatusOr<CostModel> Calibrate(Communicator& comm, const CalibrationOptions& options = {});

}  // namespace loom

#endif  // LOOM_COLLECTIVES_CALIBRATION_H_
