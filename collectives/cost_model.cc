#include "collectives/cost_model.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "collectives/algorithm_registry.h"
#include "collectives/binomial_tree.h"
#include "collectives/direct.h"
#include "collectives/halving_doubling.h"
#include "collectives/hierarchical.h"
#include "core/posix.h"
#include "core/status_macros.h"

namespace loom {
namespace {

constexpr size_t kPipelineChunkBytes = size_t{256} << 10;

int CeilLog2(int n) {
  int rounds = 0;
  while ((1 << rounds) < n) ++rounds;
  return rounds;
}

int FloorPowerOfTwo(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

// Link: the alpha and beta a flat algorithm sees. A ring or tree over several nodes
// runs at the pace of its slowest hop, so flat algorithms spanning nodes are priced
// with the inter-node constants.
struct Link {
  double alpha;
  double beta;
};

// Terms: what the formulas say of `ranks` ranks and `bytes` per rank.
struct Terms {
  Terms(int ranks, size_t bytes)
      : n(ranks),
        s(static_cast<double>(bytes)),
        log_n(CeilLog2(ranks)),
        p(FloorPowerOfTwo(ranks)),
        log_p(CeilLog2(FloorPowerOfTwo(ranks))),
        folded(FloorPowerOfTwo(ranks) != ranks),
        part((n - 1) / n) {}
  double n, s, log_n;
  double p, log_p;  // the largest power of two <= n, and its log
  bool folded;      // n is not a power of two
  double part;      // the fraction of the data a rank does not own
};

// FlatAllReduceSeconds: the formula of `algorithm`'s all-reduce of `bytes` per rank
// over `ranks` ranks that all see `link` (no node phases; `gamma` per reduced byte).
double FlatAllReduceSeconds(Algorithm algorithm, size_t bytes, int ranks, Link link, double g) {
  if (ranks <= 1) return 0.0;
  const auto [n, s, log_n, p, log_p, folded, part] = Terms(ranks, bytes);
  const double a = link.alpha, b = link.beta;
  switch (algorithm) {
    case Algorithm::kHalvingDoubling:
      if (const int m = collectives_internal::HalvingDoublingRadix(ranks, bytes); m > 1) {
        // The radix step (halving_doubling.h): halving and doubling over blocks of
        // n / m ranks, and direct's all-reduce of a slot on m ranks between them.
        const int q_int = ranks / m;
        const double q = q_int, mm = m, slot = s / q;
        const double direct =
            collectives_internal::DirectAllReduceInTwoShots(m, bytes / static_cast<size_t>(q_int))
                ? 2 * (mm - 1) * a + 2 * (mm - 1) / mm * slot * b + (mm - 1) / mm * slot * g
                : (mm - 1) * (a + slot * b + slot * g);
        return 2 * CeilLog2(q_int) * a + 2 * (q - 1) / q * s * b + (q - 1) / q * s * g + direct;
      }
      // Folded: a pair swaps halves before and after (halving_doubling.h).
      return 2 * log_p * a + 2 * (p - 1) / p * s * b + (p - 1) / p * s * g +
             (folded ? 2 * (a + 0.5 * s * b) + 0.5 * s * g : 0.0);
    case Algorithm::kDoubleBinaryTree: return 2 * log_n * a + 2 * s * b + s * g;
    // The reduce and the broadcast are pipelined against each other, so the
    // root's links carry its log n children's data both ways at once.
    case Algorithm::kBinomialTree:
      switch (collectives_internal::BinomialAllReduceTrees(ranks, bytes)) {
        case 1: break;
        case 2:
          // Two trees over half the data each (binomial_tree.h): rank 0's link
          // carries its log n children's halves in tree one and its parent's in two.
          return 2 * log_n * a + (log_n + 1) / 2 * s * b + log_n / 2 * s * g;
        default:
          // A tree rooted at every rank over 1 / n of the data: every rank is at
          // every position once, so its link carries what the ring's does.
          return 2 * log_n * a + 2 * part * s * b + part * s * g;
      }
      return 2 * log_n * a + log_n * s * (b + g);
    case Algorithm::kDirect:
      if (collectives_internal::DirectAllReduceInTwoShots(ranks, bytes)) {
        return 2 * (n - 1) * a + 2 * part * s * b + part * s * g;
      }
      return (n - 1) * (a + s * b + s * g);
    case Algorithm::kRing:
    default: return 2 * (n - 1) * a + 2 * part * s * b + part * s * g;
  }
}

std::string FormatSeconds(double seconds) {
  if (seconds < 1e-3) return absl::StrFormat("%.1f us", seconds * 1e6);
  if (seconds < 1) return absl::StrFormat("%.2f ms", seconds * 1e3);
  return absl::StrFormat("%.3f s", seconds);
}

std::string FormatBytes(size_t bytes) {
  if (bytes >= (size_t{1} << 30) && bytes % (size_t{1} << 30) == 0) return absl::StrCat(bytes >> 30, " GiB");
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) return absl::StrCat(bytes >> 20, " MiB");
  if (bytes >= (size_t{1} << 10) && bytes % (size_t{1} << 10) == 0) return absl::StrCat(bytes >> 10, " KiB");
  return absl::StrCat(bytes, " B");
}

constexpr const char* kKeys[] = {"alpha_s", "beta_s_per_byte", "gamma_s_per_byte",
                                 "inter_node_alpha_s", "inter_node_beta_s_per_byte"};

double* Field(CostModel::Constants& c, int i) {
  double* fields[] = {&c.alpha, &c.beta, &c.gamma, &c.inter_node_alpha, &c.inter_node_beta};
  return fields[i];
}

}  // namespace

std::string Explanation::ToString() const {
  std::string out = absl::StrCat(CollectiveKindName(kind), " ", FormatBytes(bytes), " on ", ranks,
                                 " ranks");
  if (ranks_per_node > 0 && ranks_per_node < ranks) {
    absl::StrAppend(&out, " (", ranks_per_node, " per node)");
  }
  absl::StrAppend(&out, ": ", AlgorithmName(chosen));
  for (size_t i = 0; i < predictions.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? " (predicted " : (i == 1 ? "; " : ", "),
                    i == 0 ? "" : absl::StrCat(AlgorithmName(predictions[i].first), " "),
                    FormatSeconds(predictions[i].second),
                    i == 0 ? (measured ? ", measured)" : ", formula)") : "");
  }
  return out;
}

CostModel CostModel::Default() { return CostModel(Constants{}); }

absl::StatusOr<CostModel> CostModel::FromConstants(const Constants& constants) {
  Constants copy = constants;
  for (int i = 0; i < 5; ++i) {
    const double value = *Field(copy, i);
    if (!std::isfinite(value) || value <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cost model constant ", kKeys[i], " = ", value, " is not finite and positive"));
    }
  }
  CostModel model(constants);
  model.constants_given_ = true;
  return model;
}

double LowerMedian(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t middle = (values.size() - 1) / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(middle), values.end());
  return values[middle];
}

absl::StatusOr<CostModel> CostModel::Median(absl::Span<const CostModel> models) {
  if (models.empty()) return absl::InvalidArgumentError("CostModel::Median of no models");
  for (size_t i = 0; i < models.size(); ++i) {
    if (!models[i].constants_given()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CostModel::Median: model ", i, " of ", models.size(), " has the default constants, not measured ones"));
    }
  }
  Constants constants;
  for (int field = 0; field < 5; ++field) {
    std::vector<double> values;
    for (const CostModel& model : models) {
      Constants copy = model.constants_;
      values.push_back(*Field(copy, field));
    }
    *Field(constants, field) = LowerMedian(std::move(values));
  }
  LOOM_ASSIGN_OR_RETURN(CostModel median, FromConstants(constants));
  // Every curve any model has, in the order they first appear; each size's time
  // over the models that measured it.
  for (const CostModel& model : models) {
    for (const Measured& measured : model.curves_) {
      if (!median.curve(measured.kind, measured.algorithm, measured.ranks, measured.ranks_per_node).empty()) {
        continue;
      }
      std::map<size_t, std::vector<double>> times;
      for (const CostModel& other : models) {
        for (const auto& [bytes, seconds] :
             other.curve(measured.kind, measured.algorithm, measured.ranks, measured.ranks_per_node)) {
          times[bytes].push_back(seconds);
        }
      }
      Curve points;
      for (auto& [bytes, seconds] : times) points.emplace_back(bytes, LowerMedian(std::move(seconds)));
      LOOM_RETURN_IF_ERROR(median.SetCurve(measured.kind, measured.algorithm, measured.ranks,
                                           measured.ranks_per_node, std::move(points)));
    }
  }
  return median;
}

namespace {

// OneNodeAsZero: ranks_per_node 0 and ranks_per_node >= ranks both mean one node.
int OneNodeAsZero(int ranks, int ranks_per_node) {
  return ranks_per_node <= 0 || ranks_per_node >= ranks ? 0 : ranks_per_node;
}

}  // namespace

absl::Status CostModel::SetCurve(CollectiveKind kind, Algorithm algorithm, int ranks,
                                 int ranks_per_node, Curve points) {
  ranks_per_node = OneNodeAsZero(ranks, ranks_per_node);
  const std::string what = absl::StrCat("curve of ", AlgorithmName(algorithm), " ",
                                        CollectiveKindName(kind), " on ", ranks, " ranks");
  if (algorithm != Algorithm::kNative) LOOM_RETURN_IF_ERROR(FindAlgorithm(kind, algorithm).status());
  if (ranks < 2) return absl::InvalidArgumentError(absl::StrCat(what, ": needs 2 ranks or more"));
  std::sort(points.begin(), points.end());
  if (points.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has ", points.size(), " points; needs 2"));
  }
  for (size_t i = 0; i < points.size(); ++i) {
    if (!std::isfinite(points[i].second) || points[i].second <= 0 || points[i].first == 0 ||
        (i > 0 && points[i].first == points[i - 1].first)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": point ", points[i].first, " bytes, ", points[i].second,
          " s is not a new positive size with a finite positive time"));
    }
  }
  for (Measured& measured : curves_) {
    if (measured.kind == kind && measured.algorithm == algorithm && measured.ranks == ranks &&
        measured.ranks_per_node == ranks_per_node) {
      measured.points = std::move(points);
      return absl::OkStatus();
    }
  }
  curves_.push_back(Measured{kind, algorithm, ranks, ranks_per_node, std::move(points)});
  return absl::OkStatus();
}

absl::Span<const std::pair<size_t, double>> CostModel::curve(CollectiveKind kind,
                                                             Algorithm algorithm, int ranks,
                                                             int ranks_per_node) const {
  ranks_per_node = OneNodeAsZero(ranks, ranks_per_node);
  for (const Measured& measured : curves_) {
    if (measured.kind == kind && measured.algorithm == algorithm && measured.ranks == ranks &&
        measured.ranks_per_node == ranks_per_node) {
      return measured.points;
    }
  }
  return {};
}

namespace {

// Interpolate reads `curve` at `bytes`, straight between its neighbours on log-log
// axes (time grows as a power of size between two measured sizes); beyond the ends,
// the nearest segment continues, its growth kept at least flat below the first point
// and at least linear above the last: a large message's time is alpha + beta * bytes,
// whose growth tends to linear, so a segment flattened by noise or latency (direct's
// 1 to 4 MiB rose as bytes^0.93 across 3 hosts, and extended so it priced 64 MiB
// at half its time) must not be carried on. A segment that falls holds a smaller
// size's point that noise raised (a call does not get faster as it grows), so up to
// its larger size it is priced flat at the larger size's time, the bound that gives
// the smaller: over gloo a stalled 4 KiB point of direct (1.56 ms; its runs took
// 0.23..0.46) had priced it so up to 64 KiB, where it was measured at 0.33 ms, and
// auto ran the binomial tree there at 0.57 of direct (2 emulated hosts).
double Interpolate(absl::Span<const std::pair<size_t, double>> curve, size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  const double x = std::log(static_cast<double>(bytes));
  size_t hi = 1;
  while (hi + 1 < curve.size() && curve[hi].first < bytes) ++hi;
  const double x0 = std::log(static_cast<double>(curve[hi - 1].first));
  const double x1 = std::log(static_cast<double>(curve[hi].first));
  const double y0 = std::log(curve[hi - 1].second), y1 = std::log(curve[hi].second);
  const double slope = std::max(0.0, (y1 - y0) / (x1 - x0));
  if (bytes > curve.back().first) return std::exp(y1 + std::max(1.0, slope) * (x - x1));
  if (y1 < y0) return std::exp(y1);
  return std::exp(y0 + slope * (x - x0));
}

}  // namespace

absl::StatusOr<double> CostModel::Predict(CollectiveKind kind, Algorithm algorithm, size_t bytes,
                                          int ranks, int ranks_per_node) const {
  if (const auto measured = curve(kind, algorithm, ranks, ranks_per_node); !measured.empty()) {
    return Interpolate(measured, bytes);  // measured on 2 ranks or more
  }
  if (algorithm == Algorithm::kNative) {
    return absl::FailedPreconditionError(
        absl::StrCat("no measured curve of native ", CollectiveKindName(kind), " on ", ranks,
                     " ranks (", ranks_per_node, " per node) in the cost model"));
  }
  LOOM_RETURN_IF_ERROR(FindAlgorithm(kind, algorithm).status());
  if (ranks < 1) return absl::InvalidArgumentError(absl::StrCat("cost of ", ranks, " ranks"));
  const Constants& c = constants_;
  const bool multi_node = ranks_per_node > 0 && ranks_per_node < ranks;
  const Link flat = multi_node ? Link{c.inter_node_alpha, c.inter_node_beta} : Link{c.alpha, c.beta};
  const auto [n, s, log_n, p, log_p, folded, part] = Terms(ranks, bytes);
  const double a = flat.alpha, b = flat.beta, g = c.gamma;
  if (ranks == 1) return 0.0;

  switch (kind) {
    case CollectiveKind::kAllReduce: {
      // The node-aware forms (hierarchical.h): a ring reduce-scatter and all-gather
      // inside each node, and the all-reduce of 1 / k of the data between nodes.
      const bool by_nodes =
          algorithm == Algorithm::kHierarchical
              ? multi_node && ranks % ranks_per_node == 0
              : AllReduceRunsByNodes(algorithm) &&
                    collectives_internal::AllReduceByNodes(ranks, ranks_per_node, bytes);
      if (by_nodes) {
        const double k = ranks_per_node, intra = (k - 1) / k;
        const Algorithm across =
            algorithm == Algorithm::kHierarchical ? Algorithm::kRing : algorithm;
        return 2 * (k - 1) * c.alpha + 2 * intra * s * c.beta + intra * s * g +
               FlatAllReduceSeconds(across, bytes / static_cast<size_t>(ranks_per_node),
                                    ranks / ranks_per_node,
                                    Link{c.inter_node_alpha, c.inter_node_beta}, g);
      }
      // Hierarchical on one node runs the flat ring.
      return FlatAllReduceSeconds(
          algorithm == Algorithm::kHierarchical ? Algorithm::kRing : algorithm, bytes, ranks, flat, g);
    }
    case CollectiveKind::kReduceScatter:
      switch (algorithm) {
        case Algorithm::kRing: return (n - 1) * a + part * s * (b + g);
        case Algorithm::kHalvingDoubling:
          return log_p * a + (p - 1) / p * s * (b + g) + (folded ? 2 * a + s * (b + g) : 0.0);
        case Algorithm::kDirect: return (n - 1) * a + part * s * (b + g);
        default: break;
      }
      break;
    case CollectiveKind::kAllGather:
      switch (algorithm) {
        case Algorithm::kRing: return (n - 1) * a + part * s * b;
        case Algorithm::kHalvingDoubling:
          return log_p * a + (p - 1) / p * s * b + (folded ? 2 * a + s * b : 0.0);
        case Algorithm::kDirect: return (n - 1) * a + part * s * b;
        default: break;
      }
      break;
    case CollectiveKind::kBroadcast:
      switch (algorithm) {
        case Algorithm::kRing: {
          const double chunks = std::max(1.0, std::ceil(s / kPipelineChunkBytes));
          return (n - 2 + chunks) * (a + s / chunks * b);
        }
        case Algorithm::kBinomialTree: return log_n * (a + s * b);
        case Algorithm::kDirect: return (n - 1) * (a + s * b);
        default: break;
      }
      break;
    case CollectiveKind::kReduce:
      switch (algorithm) {
        case Algorithm::kRing: return 2 * (n - 1) * a + 2 * part * s * b + part * s * g;
        case Algorithm::kBinomialTree: return log_n * (a + s * b + s * g);
        case Algorithm::kDirect: return (n - 1) * (a + s * b + s * g);
        default: break;
      }
      break;
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kAllToAllV: return (n - 1) * (a + s / n * b);
    case CollectiveKind::kGather:
    case CollectiveKind::kScatter:
      return (algorithm == Algorithm::kBinomialTree ? log_n : n - 1) * a + part * s * b;
    case CollectiveKind::kBarrier: return (n - 1) * a;
    case CollectiveKind::kSendRecv: return a + s * b;
  }
  return absl::InternalError(absl::StrCat("no cost formula for ", AlgorithmName(algorithm), " ",
                                          CollectiveKindName(kind)));
}

bool CostModel::measured(CollectiveKind kind, Algorithm algorithm, int ranks,
                         int ranks_per_node) const {
  return !curve(kind, algorithm, ranks, ranks_per_node).empty();
}

size_t CostModel::TieBreak(CollectiveKind kind, size_t bytes, int ranks, int ranks_per_node,
                           const std::vector<std::pair<Algorithm, double>>& predictions) const {
  // The tied: the measured within kMeasuredTie of the fastest, or within
  // kNativeTie where the fastest is native. Native only when no Loom algorithm
  // ties: its speed changes from process to process (across 2 emulated hosts its
  // 16 MiB all-reduce took 72 or 123 ms, its 64 KiB one 0.53 ms in its own runs and
  // 0.62..1.29 ms in others, where a calibration had priced it 11% under direct).
  const bool native_fastest = predictions.front().first == Algorithm::kNative;
  const double limit =
      predictions.front().second * (1 + (native_fastest ? kNativeTie : kMeasuredTie));
  std::vector<size_t> tied;
  for (size_t i = 0; i < predictions.size() && predictions[i].second <= limit; ++i) {
    if (!measured(kind, predictions[i].first, ranks, ranks_per_node)) continue;
    // Past the ordinary tie only Loom's algorithms tie with native.
    if (predictions[i].second > predictions.front().second * (1 + kMeasuredTie) &&
        predictions[i].first == Algorithm::kNative) {
      continue;
    }
    tied.push_back(i);
  }
  const bool loom_ties = std::any_of(tied.begin(), tied.end(), [&](size_t i) {
    return predictions[i].first != Algorithm::kNative;
  });
  if (loom_ties) {
    tied.erase(std::remove_if(tied.begin(), tied.end(),
                              [&](size_t i) { return predictions[i].first == Algorithm::kNative; }),
               tied.end());
  }
  // Beyond an algorithm's last measured size its price is an extension, not a
  // measurement: of the tied, only those measured nearest this size stay. (The
  // automatic calibration measures its 16 MiB point only for the finalists at 4 MiB;
  // halving-doubling, 6% over direct there, came within the tie of direct's
  // measured 16 MiB by extension and was chosen, and ran at 0.95 of it.)
  auto reach = [&](size_t i) {
    const auto points = curve(kind, predictions[i].first, ranks, ranks_per_node);
    return std::min(points.back().first, bytes);
  };
  size_t farthest = 0;
  for (size_t i : tied) farthest = std::max(farthest, reach(i));
  tied.erase(std::remove_if(tied.begin(), tied.end(), [&](size_t i) { return reach(i) < farthest; }),
             tied.end());
  if (tied.size() < 2) return tied.empty() ? 0 : tied.front();
  // The sizes that judge the tie: this one and every measured size of the tied
  // within a factor kTieNeighborhood of it. An algorithm's standing against the
  // others changes slowly with the size, and one point's noise is as large as the
  // tie: across 2 emulated hosts halving-doubling and direct were priced 5.02 and
  // 5.19 ms at 1 MiB, while 256 KiB and 4 MiB priced direct 15% and 24% lower, and
  // over many calls direct ran 1 MiB 13% faster.
  // Only sizes where the all-reduces run the form they run at this one: with several
  // ranks on each node, direct and the trees run by nodes from kNodeAwareBytes and
  // flat below it, two different algorithms under one name. (On 2 hosts x 2 ranks
  // the binomial tree's flat 16 KiB, the fastest there by 1.2x, carried its tie with
  // direct at 64 KiB, where its node-aware form runs 1.3x slower than direct's.)
  const bool form_changes = std::any_of(tied.begin(), tied.end(), [&](size_t i) {
    return kind == CollectiveKind::kAllReduce && AllReduceRunsByNodes(predictions[i].first);
  });
  const auto same_form = [&](size_t size) {
    return !form_changes ||
           collectives_internal::AllReduceByNodes(ranks, ranks_per_node, size) ==
               collectives_internal::AllReduceByNodes(ranks, ranks_per_node, bytes);
  };
  std::vector<size_t> sizes = {bytes};
  for (size_t i : tied) {
    for (const auto& [size, seconds] : curve(kind, predictions[i].first, ranks, ranks_per_node)) {
      if (size * kTieNeighborhood >= bytes && size <= bytes * kTieNeighborhood && same_form(size)) {
        sizes.push_back(size);
      }
    }
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  // Each one's score: its price over the best of the tied at each size, summed (the
  // same sizes for all, so the sum orders as the mean).
  std::vector<double> score(tied.size(), 0.0);
  for (size_t size : sizes) {
    std::vector<double> price(tied.size());
    double best = std::numeric_limits<double>::infinity();
    for (size_t t = 0; t < tied.size(); ++t) {
      const absl::StatusOr<double> seconds =
          Predict(kind, predictions[tied[t]].first, size, ranks, ranks_per_node);
      price[t] = seconds.ok() ? *seconds : std::numeric_limits<double>::infinity();
      best = std::min(best, price[t]);
    }
    if (!std::isfinite(best)) continue;
    for (size_t t = 0; t < tied.size(); ++t) {
      score[t] += std::isfinite(price[t]) ? price[t] / std::max(best, 1e-12) : 2.0;
    }
  }
  // The earliest in AlgorithmsFor of those within kMeasuredTie of the lowest score:
  // where the other sizes do not tell them apart either, a fixed order, so that the
  // choice does not flip with the noise.
  const double lowest = *std::min_element(score.begin(), score.end());
  const std::vector<Algorithm> order = AlgorithmsFor(kind);
  auto rank_of = [&](Algorithm algorithm) {
    const auto it = std::find(order.begin(), order.end(), algorithm);
    return it == order.end() ? order.size() : static_cast<size_t>(it - order.begin());
  };
  size_t winner = tied.size();
  for (size_t t = 0; t < tied.size(); ++t) {
    if (score[t] > lowest * (1 + kMeasuredTie)) continue;
    if (winner == tied.size() ||
        rank_of(predictions[tied[t]].first) < rank_of(predictions[tied[winner]].first)) {
      winner = t;
    }
  }
  return tied[winner];
}

Explanation CostModel::Explain(CollectiveKind kind, size_t bytes, int ranks, int ranks_per_node,
                               bool allow_native) const {
  Explanation why;
  why.kind = kind;
  why.bytes = bytes;
  why.ranks = ranks;
  why.ranks_per_node = ranks_per_node;
  const bool multi_node = ranks_per_node > 0 && ranks_per_node < ranks && ranks % ranks_per_node == 0;
  for (Algorithm algorithm : AlgorithmsFor(kind)) {
    // Hierarchical only differs from the ring where there are nodes to span with
    // more than one rank each (at one rank per node it is the ring between nodes).
    if (algorithm == Algorithm::kHierarchical && (!multi_node || ranks_per_node == 1)) continue;
    absl::StatusOr<double> seconds = Predict(kind, algorithm, bytes, ranks, ranks_per_node);
    if (seconds.ok()) why.predictions.emplace_back(algorithm, *seconds);
  }
  // Native goes last, so that a tie keeps Loom's algorithm (stable sort).
  if (allow_native && !curve(kind, Algorithm::kNative, ranks, ranks_per_node).empty()) {
    why.predictions.emplace_back(Algorithm::kNative,
                                 *Predict(kind, Algorithm::kNative, bytes, ranks, ranks_per_node));
  }
  std::stable_sort(why.predictions.begin(), why.predictions.end(),
                   [](const auto& x, const auto& y) { return x.second < y.second; });
  if (why.predictions.empty()) return why;
  // Measured curves carry the noise of their measurement (an algorithm that ran fast
  // in the calibration's calls ran 1.7x slower in the next process, across hosts), so
  // the measured within kMeasuredTie of the fastest tie, and a tie is broken by more
  // measurements than the one at this size: TieBreak.
  size_t pick = 0;
  if (measured(kind, why.predictions.front().first, ranks, ranks_per_node)) {
    pick = TieBreak(kind, bytes, ranks, ranks_per_node, why.predictions);
  }
  std::rotate(why.predictions.begin(), why.predictions.begin() + pick,
              why.predictions.begin() + pick + 1);
  why.chosen = why.predictions.front().first;
  why.measured = !curve(kind, why.chosen, ranks, ranks_per_node).empty();
  return why;
}

std::string CostModel::Serialize() const {
  Constants copy = constants_;
  std::string out = "# Loom collectives cost model (alpha-beta-gamma), seconds and seconds per byte\n";
  for (int i = 0; i < 5; ++i) absl::StrAppend(&out, kKeys[i], " ", absl::StrFormat("%.6g", *Field(copy, i)), "\n");
  for (const Measured& measured : curves_) {
    absl::StrAppend(&out, "curve ", CollectiveKindName(measured.kind), " ",
                    AlgorithmName(measured.algorithm), " ", measured.ranks, " ",
                    measured.ranks_per_node, " ");
    for (size_t i = 0; i < measured.points.size(); ++i) {
      absl::StrAppend(&out, i == 0 ? "" : ",", measured.points[i].first, ":",
                      absl::StrFormat("%.6g", measured.points[i].second));
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

absl::StatusOr<CostModel> CostModel::Parse(absl::string_view text) {
  Constants constants;
  bool seen[5] = {false, false, false, false, false};
  std::vector<std::pair<int, std::string>> curves;  // (line number, line)
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    const std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (!fields.empty() && fields[0] == "curve") {
      curves.emplace_back(line_number, std::string(line));
      continue;
    }
    int key = -1;
    for (int i = 0; i < 5; ++i) {
      if (!fields.empty() && fields[0] == kKeys[i]) key = i;
    }
    double value = 0;
    if (fields.size() != 2 || key < 0 || !absl::SimpleAtod(fields[1], &value)) {
      return absl::InvalidArgumentError(absl::StrCat("cost model line ", line_number, " \"", line,
                                                     "\" is not \"<key> <number>\" with a known key"));
    }
    *Field(constants, key) = value;
    seen[key] = true;
  }
  for (int i = 0; i < 5; ++i) {
    if (!seen[i]) return absl::InvalidArgumentError(absl::StrCat("cost model lacks ", kKeys[i]));
  }
  LOOM_ASSIGN_OR_RETURN(CostModel model, FromConstants(constants));
  for (const auto& [number, curve_line] : curves) {
    const auto bad = [number = number, &curve_line = curve_line](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("cost model line ", number, " \"", curve_line,
                       "\" is not \"curve <kind> <algorithm> <ranks> <ranks per node> "
                       "<bytes>:<seconds>,...\": ", why));
    };
    const std::vector<absl::string_view> fields =
        absl::StrSplit(curve_line, ' ', absl::SkipEmpty());
    int ranks = 0, ranks_per_node = 0;
    if (fields.size() != 6) return bad("six fields expected");
    if (!absl::SimpleAtoi(fields[3], &ranks) || !absl::SimpleAtoi(fields[4], &ranks_per_node)) {
      return bad("ranks and ranks per node are integers");
    }
    const absl::StatusOr<CollectiveKind> kind = ParseCollectiveKind(fields[1]);
    if (!kind.ok()) return bad(kind.status().message());
    const absl::StatusOr<Algorithm> algorithm = ParseAlgorithm(fields[2]);
    if (!algorithm.ok()) return bad(algorithm.status().message());
    Curve points;
    for (absl::string_view point : absl::StrSplit(fields[5], ',')) {
      const std::vector<absl::string_view> pair = absl::StrSplit(point, ':');
      uint64_t bytes = 0;
      double seconds = 0;
      if (pair.size() != 2 || !absl::SimpleAtoi(pair[0], &bytes) ||
          !absl::SimpleAtod(pair[1], &seconds)) {
        return bad(absl::StrCat("point \"", point, "\""));
      }
      points.emplace_back(bytes, seconds);
    }
    if (const absl::Status set =
            model.SetCurve(*kind, *algorithm, ranks, ranks_per_node, std::move(points));
        !set.ok()) {
      return bad(set.message());
    }
  }
  return model;
}

absl::Status CostModel::Save(const std::string& path) const {
  std::ofstream file(path, std::ios::trunc);
  file << Serialize();
  file.close();
  if (!file) {
    return absl::UnavailableError(absl::StrCat("writing cost model to ", path, ": ", StrError(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<CostModel> CostModel::Load(const std::string& path) {
  std::ifstream file(path);
  if (!file) {
    return absl::NotFoundError(absl::StrCat("reading cost model ", path, ": ", StrError(errno)));
  }
  std::stringstream text;
  text << file.rdbuf();
  absl::StatusOr<CostModel> model = Parse(text.str());
  if (!model.ok()) {
    return absl::Status(model.status().code(), absl::StrCat(path, ": ", model.status().message()));
  }
  return model;
}

}  // namespace loom
