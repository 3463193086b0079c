#include "collectives/calibration.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectives/reduce/reduce_kernels.h"
#include "core/status_macros.h"

namespace loom {
namespace {

// RoundTrip returns the mean seconds of a ping-pong of `bytes` (at least 8) between
// rank 0 and `partner`; other ranks return 0 without taking part. One unmeasured trip
// first (page faults and connection set-up are not latency); with `seconds` > 0 its
// time cuts the measured trips to about that long (3 at least, `trips` at most).
// Every ping carries the trips still to come, so the partner needs no agreement first.
absl::StatusOr<double> RoundTrip(Communicator& comm, int partner, size_t bytes, int trips,
                                 double seconds) {
  if (comm.rank() != 0 && comm.rank() != partner) return 0.0;
  std::vector<std::byte> buffer(std::max(bytes, sizeof(uint64_t)));
  const BufferView view(buffer.data(), buffer.size(), DType::kU8);
  if (comm.rank() != 0) {
    uint64_t to_come = 0;
    do {
      LOOM_RETURN_IF_ERROR(comm.Recv(view, 0));
      std::memcpy(&to_come, buffer.data(), sizeof(to_come));
      LOOM_RETURN_IF_ERROR(comm.Send(view, 0));
    } while (to_come > 1);
    return 0.0;
  }
  auto trip = [&](uint64_t to_come) -> absl::Status {
    std::memcpy(buffer.data(), &to_come, sizeof(to_come));
    LOOM_RETURN_IF_ERROR(comm.Send(view, partner));
    return comm.Recv(view, partner);
  };
  absl::Time start = absl::Now();
  LOOM_RETURN_IF_ERROR(trip(/*to_come=*/2));  // more follow: the count is not known yet
  const double warm = absl::ToDoubleSeconds(absl::Now() - start);
  int64_t n = std::max(1, trips);
  if (seconds > 0) {
    n = std::clamp<int64_t>(std::llround(seconds / std::max(warm, 1e-9)), std::min<int64_t>(3, n), n);
  }
  start = absl::Now();
  for (int64_t i = n; i > 0; --i) LOOM_RETURN_IF_ERROR(trip(static_cast<uint64_t>(i)));
  return absl::ToDoubleSeconds(absl::Now() - start) / static_cast<double>(n);
}

}  // namespace

namespace {

absl::Status CheckMeasurableKind(const char* who, CollectiveKind kind) {
  if (kind != CollectiveKind::kAllReduce && kind != CollectiveKind::kReduceScatter &&
      kind != CollectiveKind::kAllGather && kind != CollectiveKind::kBroadcast) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": ", CollectiveKindName(kind),
        " is not all_reduce, reduce_scatter, all_gather or broadcast"));
  }
  return absl::OkStatus();
}

// TimedCalls: one collective of `kind` moving `bytes` (as CostModel::Predict counts
// them) in f32, run by whichever algorithm is asked, on buffers made once. Calibrate
// runs every candidate of a size on the same buffers.
class TimedCalls {
 public:
  TimedCalls(Communicator& comm, CollectiveKind kind, size_t bytes) : comm_(comm), kind_(kind) {
    const size_t n = static_cast<size_t>(comm.size());
    const bool blocks = kind == CollectiveKind::kReduceScatter || kind == CollectiveKind::kAllGather;
    const size_t count = std::max<size_t>(1, bytes / sizeof(float) / (blocks ? n : 1));
    input_.assign(kind == CollectiveKind::kReduceScatter ? n * count : count, 1.0f);
    output_.resize(kind == CollectiveKind::kAllGather ? n * count : count);
  }

  absl::Status Once(Algorithm algorithm) {
    CallOptions call;
    call.algorithm = algorithm;
    const ConstBufferView in = ConstBufferView::Of(absl::MakeConstSpan(input_));
    const BufferView out = BufferView::Of(absl::MakeSpan(output_));
    switch (kind_) {
      case CollectiveKind::kAllReduce: return comm_.AllReduce(in, out, ReduceOp::kSum, call);
      case CollectiveKind::kReduceScatter: return comm_.ReduceScatter(in, out, ReduceOp::kSum, call);
      case CollectiveKind::kAllGather: return comm_.AllGather(in, out, call);
      default: return comm_.Broadcast(in, out, /*root=*/0, call);
    }
  }

  // The mean seconds of `calls` calls back to back.
  absl::StatusOr<double> Batch(Algorithm algorithm, int64_t calls) {
    const absl::Time start = absl::Now();
    for (int64_t i = 0; i < calls; ++i) LOOM_RETURN_IF_ERROR(Once(algorithm));
    return absl::ToDoubleSeconds(absl::Now() - start) / static_cast<double>(calls);
  }

 private:
  Communicator& comm_;
  const CollectiveKind kind_;
  std::vector<float> input_, output_;
};

// What a point's batches are: the calls in each (the same on every rank), and the
// timed call's seconds where it counts as the first batch.
struct BatchPlan {
  int64_t calls = 1;
  std::optional<double> first_batch;
};

// PlanBatches runs `algorithm`'s warm call (if `warm`) and, with `batch_seconds` > 0,
// one timed call, from which rank 0 sizes the batches and broadcasts their length;
// where that length is one call, the timed call is the first batch (every rank has
// the same length, so every rank counts it). With 0 a batch is `calls_per_batch`.
absl::StatusOr<BatchPlan> PlanBatches(Communicator& comm, TimedCalls& calls, Algorithm algorithm,
                                      bool warm, double batch_seconds, int calls_per_batch) {
  if (warm) LOOM_RETURN_IF_ERROR(calls.Once(algorithm));  // Buffers faulted in, connections and paths set up.
  BatchPlan plan;
  plan.calls = std::max(1, calls_per_batch);
  if (batch_seconds <= 0) return plan;
  LOOM_ASSIGN_OR_RETURN(const double first, calls.Batch(algorithm, 1));
  int64_t agreed[1] = {std::clamp<int64_t>(std::llround(batch_seconds / std::max(first, 1e-9)), 1, 1000)};
  CallOptions by_ring;
  by_ring.algorithm = Algorithm::kRing;  // fixed: the model under measurement is not used
  LOOM_RETURN_IF_ERROR(comm.Broadcast(absl::MakeSpan(agreed), /*root=*/0, by_ring));
  plan.calls = agreed[0];
  // The timed call outlasted a batch, so a batch is that one call: it counts as the
  // first. Over a link with 4 ms round trips most points are one call a batch, and
  // this cut a quarter of the automatic calibration's calls.
  if (plan.calls == 1) plan.first_batch = first;
  return plan;
}

}  // namespace

absl::StatusOr<double> MeasureCall(Communicator& comm, CollectiveKind kind, Algorithm algorithm,
                                   size_t bytes, int batches, double batch_seconds, bool warm,
                                   int calls_per_batch, int64_t* agreed_calls) {
  LOOM_RETURN_IF_ERROR(CheckMeasurableKind("MeasureCall", kind));
  TimedCalls calls(comm, kind, bytes);
  LOOM_ASSIGN_OR_RETURN(const BatchPlan plan,
                        PlanBatches(comm, calls, algorithm, warm, batch_seconds, calls_per_batch));
  if (agreed_calls != nullptr) *agreed_calls = plan.calls;
  std::vector<double> means;  // seconds per call, one per batch
  if (plan.first_batch.has_value()) means.push_back(*plan.first_batch);
  while (static_cast<int>(means.size()) < std::max(1, batches)) {
    LOOM_ASSIGN_OR_RETURN(const double mean, calls.Batch(algorithm, plan.calls));
    means.push_back(mean);
  }
  return LowerMedian(std::move(means));
}

namespace {

// Candidates returns the algorithms whose curves Calibrate measures for `kind`: those
// the selector weighs on this communicator's layout, and native where it may choose it.
std::vector<Algorithm> Candidates(const Communicator& comm, CollectiveKind kind) {
  std::vector<Algorithm> algorithms;
  for (const auto& [algorithm, seconds] : comm.Explain(kind, 1 << 20).predictions) {
    if (algorithm != Algorithm::kNative) algorithms.push_back(algorithm);
  }
  if (comm.HasNative() && !comm.options().deterministic) algorithms.push_back(Algorithm::kNative);
  return algorithms;
}

}  // namespace

absl::StatusOr<CostModel> Calibrate(Communicator& comm, const CalibrationOptions& options) {
  for (CollectiveKind kind : options.curve_kinds) {
    if (kind != CollectiveKind::kAllReduce && kind != CollectiveKind::kReduceScatter &&
        kind != CollectiveKind::kAllGather && kind != CollectiveKind::kBroadcast) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Calibrate: no curve is measured for ", CollectiveKindName(kind),
          " (curve_kinds may name all_reduce, reduce_scatter, all_gather and broadcast)"));
    }
  }
  CostModel::Constants constants = CostModel::Default().constants();
  // gamma: the f32 sum kernel over a buffer too large for the caches.
  {
    const size_t floats = options.bandwidth_bytes / sizeof(float);
    std::vector<float> a(floats, 1.0f), b(floats, 2.0f);
    LOOM_RETURN_IF_ERROR(ReduceInto(ReduceOp::kSum, ConstBufferView::Of(absl::MakeSpan(a)),
                                    BufferView::Of(absl::MakeSpan(b))));
    const absl::Time start = absl::Now();
    const int reps = 5;
    for (int i = 0; i < reps; ++i) {
      LOOM_RETURN_IF_ERROR(ReduceInto(ReduceOp::kSum, ConstBufferView::Of(absl::MakeSpan(a)),
                                      BufferView::Of(absl::MakeSpan(b))));
    }
    constants.gamma = std::max(1e-13, absl::ToDoubleSeconds(absl::Now() - start) / reps /
                                          static_cast<double>(floats * sizeof(float)));
  }
  const int n = comm.size();
  if (n > 1) {
    // measure prices the link between ranks 0 and `partner` of `over` (only rank 0's
    // numbers count: they are broadcast below).
    auto measure = [&](Communicator& over, int partner, double* alpha,
                       double* beta) -> absl::Status {
      LOOM_ASSIGN_OR_RETURN(const double small,
                            RoundTrip(over, partner, 8, options.latency_round_trips,
                                      options.latency_seconds));
      LOOM_ASSIGN_OR_RETURN(const double large, RoundTrip(over, partner, options.bandwidth_bytes,
                                                          options.bandwidth_round_trips,
                                                          options.bandwidth_seconds));
      if (over.rank() == 0) {
        *alpha = std::max(1e-9, small / 2);
        *beta = std::max(1e-13, (large / 2 - *alpha) / static_cast<double>(options.bandwidth_bytes));
      }
      return absl::OkStatus();
    };
    int k = comm.options().ranks_per_node;
    // Rank 0 and the ranks after it in node order: its node's next (order[1]) and the
    // next node's first (order[k]). Rank 0 is always the first in node order.
    const std::vector<int>& order = comm.NodeOrder();
    const std::vector<int>& nodes = comm.options().node_of_rank;
    if (k == 0 && !nodes.empty()) {
      // Nodes of unequal sizes: no node layout for the model, whose one alpha and
      // beta then price every step. The ring numbered by node is held up by its
      // steps across nodes, so those are measured: rank 0 with the first rank of
      // the next node (where there is one).
      const int second = static_cast<int>(
          std::find_if(order.begin(), order.end(), [&](int r) { return nodes[r] != nodes[0]; }) -
          order.begin());
      if (second < n) {
        LOOM_RETURN_IF_ERROR(measure(comm, order[second], &constants.alpha, &constants.beta));
        k = -1;  // measured: neither branch below
      }
    }
    const bool across_nodes = k > 0 && k < n;
    // One rank a node: ranks 0 and 1 are the inter-node pair measured below, and no
    // call goes inside a node, so alpha and beta take the inter-node numbers.
    // Measuring the pair twice cost 0.2 s of the automatic calibration's 2 s over
    // 2 ms links (20 round trips of 4.3 ms, and the large ones).
    const bool one_rank_a_node =
        across_nodes && k == 1 && comm.options().node_transport == nullptr;
    if (one_rank_a_node || k < 0) {
      // (measured below, or above for nodes of unequal sizes)
    } else if (comm.options().node_transport != nullptr) {
      // Inside a node the hierarchical algorithm runs over the node transport, so
      // that is where alpha and beta are measured: between the first two ranks of
      // every node at once (rank 0 keeps node 0's numbers).
      CommunicatorOptions node_options;
      node_options.timeout = comm.options().timeout;
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> node,
                            Communicator::Create(comm.options().node_transport, node_options));
      if (node->size() > 1) LOOM_RETURN_IF_ERROR(measure(*node, 1, &constants.alpha, &constants.beta));
    } else {
      LOOM_RETURN_IF_ERROR(measure(comm, order[1], &constants.alpha, &constants.beta));
    }
    if (across_nodes) {
      LOOM_RETURN_IF_ERROR(
          measure(comm, order[k], &constants.inter_node_alpha, &constants.inter_node_beta));
      if (one_rank_a_node) {
        constants.alpha = constants.inter_node_alpha;
        constants.beta = constants.inter_node_beta;
      }
    } else {
      constants.inter_node_alpha = constants.alpha;
      constants.inter_node_beta = constants.beta;
    }
  }
  // Everyone adopts rank 0's constants: identical models make identical choices
  // (and the curves below decide their warm calls from them alike).
  std::vector<double> values = {constants.alpha, constants.beta, constants.gamma,
                                constants.inter_node_alpha, constants.inter_node_beta};
  LOOM_RETURN_IF_ERROR(comm.Broadcast(absl::MakeSpan(values), /*root=*/0));
  constants.alpha = values[0];
  constants.beta = values[1];
  constants.gamma = values[2];
  constants.inter_node_alpha = values[3];
  constants.inter_node_beta = values[4];
  LOOM_ASSIGN_OR_RETURN(CostModel model, CostModel::FromConstants(constants));
  // The trees size their window from the communicator's model (the one path every
  // rank holds alike: CallContext::agreed_path), so the curves are measured under
  // the constants just measured, as a job that installs this model will run them.
  // The caller's model is put back after.
  const CostModel callers_model = comm.options().cost_model;
  comm.SetCostModel(model);
  absl::Cleanup put_back = [&comm, &callers_model] { comm.SetCostModel(callers_model); };
  // Measured curves, where asked for.
  const bool curves = n > 1 && options.curve_sizes.size() >= 2;
  const int per_node = comm.options().ranks_per_node;
  std::vector<double> measured;
  if (curves) {
    // A warm call before every size, where the constants say those calls fit in
    // curve_warm_seconds: without one, a point's first counted call is the first at
    // its size, and one that starts after a pause can find the link's buffers empty
    // (a 4 MiB all-reduce timed at 13.9 ms over a link that needs 16.8 ms for it,
    // across hosts behind tc tbf: the ring was chosen at 0.86 of direct at 1 MiB).
    bool warm_every_size = options.curve_warm_seconds < 0;
    int batches = options.curve_batches;
    if (!warm_every_size) {
      double warm_seconds = 0;
      for (CollectiveKind kind : options.curve_kinds) {
        for (size_t i = 1; i < options.curve_sizes.size(); ++i) {
          for (const auto& [algorithm, seconds] :
               model.Explain(kind, options.curve_sizes[i], n, per_node, /*allow_native=*/true)
                   .predictions) {
            warm_seconds += seconds;
          }
        }
      }
      warm_every_size = warm_seconds <= options.curve_warm_seconds;
    }
    if (options.curve_round_trip_seconds > 0 && batches > 2) {
      double points = 0;
      for (CollectiveKind kind : options.curve_kinds) {
        points += static_cast<double>(Candidates(comm, kind).size() * options.curve_sizes.size());
      }
      if (points * batches * 2 * constants.inter_node_alpha > options.curve_round_trip_seconds) {
        batches = 2;
      }
    }
    const bool ascending = std::is_sorted(options.curve_sizes.begin(), options.curve_sizes.end());
    const bool prune = options.curve_prune_factor > 0 && ascending;
    for (CollectiveKind kind : options.curve_kinds) {
      // What carries from one size to the next, per candidate: whether its next
      // point starts with a warm call (a warm call before an algorithm's first size
      // sets up its connections and paths; before every size, as above, where that
      // fits), the calls its batches had (once a size's batch is one call, agreed
      // by rank 0's broadcast, a larger one's is too: its batches are single calls
      // with no timed call or broadcast first; over 4 ms round trips those cost
      // about 5 ms a point), and its points so far.
      struct Candidate {
        Algorithm algorithm = Algorithm::kRing;
        bool warm = true;
        int64_t calls = 0;
        size_t last_bytes = 0;
        std::vector<double> points;
      };
      std::vector<Candidate> candidates;
      for (Algorithm algorithm : Candidates(comm, kind)) {
        Candidate candidate;
        candidate.algorithm = algorithm;
        candidates.push_back(std::move(candidate));
      }
      for (size_t i = 0; i < options.curve_sizes.size(); ++i) {
        const size_t bytes = options.curve_sizes[i];
        std::vector<size_t> run;  // the candidates measured at this size
        if (prune && i > 0 && i + 1 == options.curve_sizes.size() &&
            bytes > options.curve_sizes[i - 1]) {
          // curve_prune_factor, decided on every rank alike: on the slowest rank's
          // prices of the size before (direct: one round).
          std::vector<double> previous;
          for (const Candidate& candidate : candidates) previous.push_back(candidate.points.back());
          CallOptions agree;
          agree.algorithm = Algorithm::kDirect;
          LOOM_RETURN_IF_ERROR(comm.AllReduce(absl::MakeSpan(previous), ReduceOp::kMax, agree));
          const double least = *std::min_element(previous.begin(), previous.end());
          for (size_t c = 0; c < candidates.size(); ++c) {
            if (previous[c] > least && previous[c] > options.curve_prune_factor * least) {
              candidates[c].points.push_back(previous[c] * static_cast<double>(bytes) /
                                             static_cast<double>(options.curve_sizes[i - 1]));
            } else {
              run.push_back(c);
            }
          }
        } else {
          for (size_t c = 0; c < candidates.size(); ++c) run.push_back(c);
        }
        TimedCalls calls(comm, kind, bytes);
        std::vector<BatchPlan> plans(candidates.size());
        std::vector<std::vector<double>> means(candidates.size());
        for (size_t c : run) {
          Candidate& candidate = candidates[c];
          const bool one_call = candidate.calls == 1 && bytes >= candidate.last_bytes;
          LOOM_ASSIGN_OR_RETURN(plans[c], PlanBatches(comm, calls, candidate.algorithm, candidate.warm,
                                                      one_call ? 0.0 : options.curve_batch_seconds,
                                                      /*calls_per_batch=*/1));
          if (plans[c].first_batch.has_value()) means[c].push_back(*plans[c].first_batch);
          candidate.calls = plans[c].calls;
          candidate.warm = warm_every_size;
          candidate.last_bytes = bytes;
        }
        // The batches take turns: round b runs one batch of each candidate, starting
        // b candidates further along, so that a slow stretch of the machine falls on
        // every candidate alike, not on the one measured in it. Measured one
        // candidate after another, across emulated hosts on 2 cores, 13 of 132
        // choices at 4..64 KiB (33 calibrations, gloo and mpi, 2 and 3 hosts) were
        // an algorithm 10% or more slower than the best there (halving-doubling or
        // the double tree at 4..16 KiB); taking turns, 1 of 132 (collectives/README.md,
        // "The calibration's batches take turns").
        const int rounds = std::max(1, batches);
        for (int round = 0; round < rounds; ++round) {
          for (size_t k = 0; k < run.size(); ++k) {
            const size_t c = run[(static_cast<size_t>(round) + k) % run.size()];
            if (static_cast<int>(means[c].size()) >= rounds) continue;
            LOOM_ASSIGN_OR_RETURN(const double mean, calls.Batch(candidates[c].algorithm, plans[c].calls));
            means[c].push_back(mean);
          }
        }
        for (size_t c : run) candidates[c].points.push_back(LowerMedian(std::move(means[c])));
      }
      for (const Candidate& candidate : candidates) {
        measured.insert(measured.end(), candidate.points.begin(), candidate.points.end());
      }
    }
  }
  // A call's price is its slowest rank's time. One rank alone can be early: over 4
  // ms round trips rank 0 timed the binomial tree's 4 KiB all-reduce at 2.3 ms
  // (its peer's part was on its way when its call began) where the peer took 4.3
  // ms, and auto picked it at 0.6 of direct. Max is exact, so every rank gets the
  // same numbers.
  if (!measured.empty()) {
    CallOptions by_ring;
    by_ring.algorithm = Algorithm::kRing;  // fixed: the model under measurement is not used
    LOOM_RETURN_IF_ERROR(comm.AllReduce(absl::MakeSpan(measured), ReduceOp::kMax, by_ring));
  }
  if (curves) {
    size_t next = 0;
    for (CollectiveKind kind : options.curve_kinds) {
      for (Algorithm algorithm : Candidates(comm, kind)) {
        CostModel::Curve curve;
        for (size_t bytes : options.curve_sizes) curve.emplace_back(bytes, measured[next++]);
        LOOM_RETURN_IF_ERROR(model.SetCurve(kind, algorithm, n, comm.options().ranks_per_node,
                                            std::move(curve)));
      }
    }
  }
  return model;
}

}  // namespace loom
