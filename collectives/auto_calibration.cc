#include "collectives/auto_calibration.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
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
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "collectives/algorithm_registry.h"
#include "collectives/calibration.h"
#include "collectives/node_layout.h"
#include "core/atomic_file.h"
#include "core/status_macros.h"

namespace loom {
namespace {

// The first line of a cache file names its key; the model's own text follows.
constexpr char kKeyPrefix[] = "# key: ";
// The seconds of the fixed measurements (round trips, the kernel), about, at 2 Gbit/s.
constexpr double kFixedSeconds = 0.1;

// FNV-1a: a short, stable file name for a key.
uint64_t Fnv1a(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

// MakeDirs creates `dir` and its parents (mode 0755).
absl::Status MakeDirs(const std::string& dir) {
  for (size_t slash = 1; slash != std::string::npos;) {
    slash = dir.find('/', slash + 1);
    const std::string prefix = dir.substr(0, slash);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::InternalError(absl::StrCat("mkdir ", prefix, ": ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

// ReadCache returns the model text of `path` if it was written for `key` no longer
// than `max_age` ago (its age in *age); empty otherwise.
std::string ReadCache(const std::string& path, const std::string& key, absl::Duration max_age,
                      absl::Duration* age) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) return "";
  *age = absl::Now() - absl::FromTimeT(info.st_mtime);
  if (*age > max_age) return "";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string contents = text.str();
  const std::string first_line = contents.substr(0, contents.find('\n'));
  if (first_line != absl::StrCat(kKeyPrefix, key)) return "";
  return contents;
}

// BroadcastText gives every rank rank 0's `text` (empty included).
absl::Status BroadcastText(Communicator& comm, std::string* text) {
  CallOptions by_ring;
  by_ring.algorithm = Algorithm::kRing;  // fixed: the model is what is being agreed
  int64_t length[1] = {static_cast<int64_t>(text->size())};
  LOOM_RETURN_IF_ERROR(comm.Broadcast(absl::MakeSpan(length), /*root=*/0, by_ring));
  if (length[0] == 0) {
    text->clear();
    return absl::OkStatus();
  }
  // (Never memcpy to an empty vector's null data(): the compiler may take the pointer
  // for non-null and drop the emptiness test after it; rank 0 then ran a broadcast
  // the others skipped.)
  std::vector<uint8_t> bytes(static_cast<size_t>(length[0]));
  if (comm.rank() == 0) std::memcpy(bytes.data(), text->data(), bytes.size());
  LOOM_RETURN_IF_ERROR(comm.Broadcast(absl::MakeSpan(bytes), /*root=*/0, by_ring));
  text->assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return absl::OkStatus();
}

// A cache file's lines after the key: "# calibrations: N", the merged model, and each
// calibration's own model, its lines behind "#calibration K: " (comments to
// CostModel::Parse, so the merged model parses from the whole text).
constexpr char kCalibrationsPrefix[] = "# calibrations: ";
constexpr char kCalibrationLinePrefix[] = "#calibration ";

// CachedCalibrations returns the models of the calibrations a cache file's `text`
// merged, in order: the text itself for a file written before files held them (one
// calibration), none for a file whose count and sections disagree or do not parse.
std::vector<CostModel> CachedCalibrations(const std::string& text) {
  int count = 0;
  std::vector<std::string> each;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::ConsumePrefix(&line, kCalibrationsPrefix)) {
      if (!absl::SimpleAtoi(line, &count)) return {};
    } else if (absl::ConsumePrefix(&line, kCalibrationLinePrefix)) {
      const size_t colon = line.find(": ");
      size_t k = 0;
      if (colon == absl::string_view::npos || !absl::SimpleAtoi(line.substr(0, colon), &k) || k == 0 ||
          k > each.size() + 1) {
        return {};
      }
      if (k > each.size()) each.emplace_back();
      absl::StrAppend(&each[k - 1], line.substr(colon + 2), "\n");
    }
  }
  if (count == 0 && each.empty()) each.push_back(text);
  if (count != 0 && static_cast<size_t>(count) != each.size()) return {};
  std::vector<CostModel> models;
  for (const std::string& one : each) {
    absl::StatusOr<CostModel> model = CostModel::Parse(one);
    if (!model.ok()) return {};
    models.push_back(*std::move(model));
  }
  return models;
}

// CacheText: the file AutoCalibrate writes for `key`: the model, the median of
// `calibrations`, then each of those.
std::string CacheText(const std::string& key, const CostModel& model,
                      const std::vector<CostModel>& calibrations) {
  std::string text = absl::StrCat(kKeyPrefix, key, "\n", kCalibrationsPrefix, calibrations.size(), "\n",
                                  model.Serialize());
  for (size_t k = 0; k < calibrations.size(); ++k) {
    for (absl::string_view line : absl::StrSplit(calibrations[k].Serialize(), '\n', absl::SkipEmpty())) {
      absl::StrAppend(&text, kCalibrationLinePrefix, k + 1, ": ", line, "\n");
    }
  }
  return text;
}

// How far past the largest curve size the finalists are measured, and how close to
// the best there an algorithm must be to be one.
constexpr size_t kFinalFactor = 4;
// Points measured again (MeasureAgain): the batches, their length, and the share of
// the budget they may take. A batch of 10 ms of back-to-back calls outlasts what a
// link's token bucket carries at memory speed after an idle moment (4 ms of the rate
// in tools/cluster's links), and the later batches find it drained; the median of
// three is then the link's own time.
constexpr int kAgainBatches = 3;
constexpr double kAgainBatchSeconds = 0.01;
constexpr double kAgainShareOfBudget = 0.15;
constexpr double kFinalistSlack = 1.10;
// The calls each finalist is measured with there (their mean).
constexpr int kFinalistCalls = 2;
// What such a call takes against its price (its curve carried on linearly, a lower
// bound): the first calls at a new size took up to 1.6 times it across 3 emulated
// hosts (89..165 ms against 94..97 ms medians at 16 MiB).
constexpr double kFinalistCallOverPrice = 1.5;

// ExtendTheFinalists adds one point at kFinalFactor x `top` to every all-reduce
// curve: measured for the algorithms within kFinalistSlack of the best at `top`
// (the finalists), derived for the others (below). Where the link is the limit an
// algorithm's losses can show only at the large sizes (halving-doubling at 0.96 of
// the ring at 4 MiB measured 0.67 at 16 MiB over 2 Gbit/s), and the curves would
// extend the 4 MiB figures. Two calls each, averaged, with no warm-up (each ran at
// `top` already): the mean, since an algorithm whose time varies from call to call
// costs its mean in a job (halving-doubling's first 16 MiB call took 71 ms, its
// mean 97 ms). Only
// the cheapest finalists whose two calls fit in what is left of the budget
// (`seconds_left`, this rank's; the least over the ranks decides) are measured, two
// at least (PlanFinalists). One call each was tried: single 16 MiB calls over
// the 2 Gbit/s link took 89..165 ms where the same algorithms' medians were 94..97,
// and auto chose an unmeasured algorithm at 0.87 of the best.
absl::Status ExtendTheFinalists(Communicator& comm, size_t top, double seconds_left,
                                CostModel* model) {
  const int n = comm.size();
  const int per_node = comm.options().ranks_per_node;
  std::vector<std::pair<Algorithm, CostModel::Curve>> curves;
  double best = std::numeric_limits<double>::infinity();
  for (const auto& [algorithm, seconds] : model->Explain(CollectiveKind::kAllReduce, top, n,
                                                         per_node, /*allow_native=*/true)
                                              .predictions) {
    const auto curve = model->curve(CollectiveKind::kAllReduce, algorithm, n, per_node);
    if (curve.empty()) continue;
    best = std::min(best, seconds);
    curves.emplace_back(algorithm, CostModel::Curve(curve.begin(), curve.end()));
  }
  // Every rank has the same model (Calibrate agreed on it), so every rank picks
  // the same finalists in the same order.
  std::vector<Algorithm> finalists;
  for (const auto& [algorithm, curve] : curves) {
    if (curve.back().second <= kFinalistSlack * best) finalists.push_back(algorithm);
  }
  if (finalists.empty()) return absl::OkStatus();
  // A call's price at the larger size: its curve carried on (at least linearly).
  std::map<Algorithm, double> price;
  for (const auto& [algorithm, seconds] :
       model->Explain(CollectiveKind::kAllReduce, top * kFinalFactor, n, per_node,
                      /*allow_native=*/true)
           .predictions) {
    price[algorithm] = seconds;
  }
  std::vector<std::pair<Algorithm, double>> priced;
  for (Algorithm algorithm : finalists) {
    priced.emplace_back(algorithm, kFinalistCallOverPrice * price[algorithm]);
  }
  double left[1] = {seconds_left};
  CallOptions direct;
  direct.algorithm = Algorithm::kDirect;  // one round: the link may be long
  LOOM_RETURN_IF_ERROR(comm.AllReduce(absl::MakeSpan(left), ReduceOp::kMin, direct));
  const std::vector<Algorithm> measured = PlanFinalists(std::move(priced), left[0]);
  std::vector<double> seconds;
  for (Algorithm algorithm : measured) {
    LOOM_ASSIGN_OR_RETURN(const double took,
                          MeasureCall(comm, CollectiveKind::kAllReduce, algorithm,
                                      top * kFinalFactor, /*batches=*/1, /*batch_seconds=*/0,
                                      /*warm=*/false, kFinalistCalls));
    seconds.push_back(took);
  }
  CallOptions by_ring;
  by_ring.algorithm = Algorithm::kRing;
  // The slowest rank's time, as Calibrate's curves (calibration.cc).
  LOOM_RETURN_IF_ERROR(comm.AllReduce(absl::MakeSpan(seconds), ReduceOp::kMax, by_ring));
  // The curves not measured there grow from `top` as the least of the measured
  // ones did, and at least linearly. A curve carried on linearly would be compared
  // with measured points that carry what a link does to the first calls of a new
  // size: on the 2 Gbit/s link two 16 MiB calls took 119..138 ms where the
  // algorithms' medians were 94..97 (4 x their 4 MiB points), and auto chose the
  // double binary tree, 13% slower than the best at 4 MiB and not measured at 16,
  // at 0.86 of the best.
  double growth = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < measured.size(); ++i) {
    for (const auto& [algorithm, curve] : curves) {
      if (algorithm == measured[i]) growth = std::min(growth, seconds[i] / curve.back().second);
    }
  }
  growth = std::max(growth, static_cast<double>(kFinalFactor));
  for (auto& [algorithm, curve] : curves) {
    const auto it = std::find(measured.begin(), measured.end(), algorithm);
    const double at_top = curve.back().second;
    curve.emplace_back(top * kFinalFactor,
                       it != measured.end() ? seconds[static_cast<size_t>(it - measured.begin())]
                                            : at_top * growth);
    LOOM_RETURN_IF_ERROR(model->SetCurve(CollectiveKind::kAllReduce, algorithm, n, per_node, curve));
  }
  return absl::OkStatus();
}


}  // namespace

namespace {

// The measured all-reduce curves of a layout and the floor drawn from them
// (FloorAtTheLargestRate): no point below `top` is faster than per_byte x its bytes.
struct LinkFloor {
  std::vector<std::pair<Algorithm, CostModel::Curve>> curves;
  size_t top = 0;
  double per_byte = 0;
  bool drawn = false;  // false: no curve of two points or more

  double At(size_t bytes) const { return per_byte * static_cast<double>(bytes); }
  bool Under(size_t bytes, double seconds) const { return bytes < top && seconds < At(bytes); }
};

LinkFloor DrawFloor(int ranks, int ranks_per_node, const CostModel& model) {
  LinkFloor floor;
  std::vector<Algorithm> algorithms = AlgorithmsFor(CollectiveKind::kAllReduce);
  algorithms.push_back(Algorithm::kNative);  // the engine's own, where it was measured
  for (const Algorithm algorithm : algorithms) {
    const auto curve = model.curve(CollectiveKind::kAllReduce, algorithm, ranks, ranks_per_node);
    if (curve.size() >= 2) {
      floor.curves.emplace_back(algorithm, CostModel::Curve(curve.begin(), curve.end()));
    }
  }
  if (floor.curves.empty()) return floor;
  // The largest size every curve reaches and the least time there; the most time
  // any curve took at its smallest size.
  size_t top = std::numeric_limits<size_t>::max();
  for (const auto& [algorithm, curve] : floor.curves) top = std::min(top, curve.back().first);
  double fastest_at_top = std::numeric_limits<double>::infinity();
  double latency = 0;
  for (const auto& [algorithm, curve] : floor.curves) {
    latency = std::max(latency, curve.front().second);
    for (const auto& [bytes, seconds] : curve) {
      if (bytes == top) fastest_at_top = std::min(fastest_at_top, seconds);
    }
  }
  if (!std::isfinite(fastest_at_top) || top == 0) return floor;
  // Under alpha + beta x bytes an algorithm's time at `bytes` is at least its beta x
  // bytes, and no algorithm's beta is below (fastest_at_top - its alpha) / top, its
  // alpha being at most what it took at its smallest size.
  floor.top = top;
  floor.per_byte = std::max(0.0, fastest_at_top - latency) / static_cast<double>(top);
  floor.drawn = true;
  return floor;
}

bool Contains(absl::Span<const CurvePoint> points, Algorithm algorithm, size_t bytes) {
  return std::any_of(points.begin(), points.end(), [&](const CurvePoint& point) {
    return point.algorithm == algorithm && point.bytes == bytes;
  });
}

}  // namespace

std::vector<CurvePoint> PointsToMeasureAgain(int ranks, int ranks_per_node,
                                             const CostModel& model) {
  const LinkFloor floor = DrawFloor(ranks, ranks_per_node, model);
  std::vector<CurvePoint> points;
  if (!floor.drawn) return points;
  // Every size with a point under the floor: those points, and the fastest credible
  // one there (the point they would be priced as).
  std::map<size_t, std::vector<Algorithm>> under;
  std::map<size_t, std::pair<double, Algorithm>> fastest_credible;
  for (const auto& [algorithm, curve] : floor.curves) {
    for (const auto& [bytes, seconds] : curve) {
      if (floor.Under(bytes, seconds)) {
        under[bytes].push_back(algorithm);
      } else if (bytes < floor.top) {
        auto [it, fresh] = fastest_credible.emplace(bytes, std::make_pair(seconds, algorithm));
        if (!fresh && seconds < it->second.first) it->second = {seconds, algorithm};
      }
    }
  }
  for (const auto& [bytes, algorithms] : under) {
    for (const Algorithm algorithm : algorithms) points.push_back({algorithm, bytes});
    const auto credible = fastest_credible.find(bytes);
    if (credible != fastest_credible.end()) points.push_back({credible->second.second, bytes});
  }
  return points;
}

absl::StatusOr<std::vector<CurvePoint>> MeasureAgain(Communicator& comm,
                                                     absl::Span<const CurvePoint> points,
                                                     double allowance, CostModel* model) {
  const int n = comm.size();
  const int per_node = comm.options().ranks_per_node;
  std::vector<CurvePoint> planned;
  double spent = 0;
  for (const CurvePoint& point : points) {
    double price = 0;
    for (const auto& [bytes, seconds] :
         model->curve(CollectiveKind::kAllReduce, point.algorithm, n, per_node)) {
      if (bytes == point.bytes) price = seconds;
    }
    // The warm call, the timed one, and the batches (each at least one call).
    spent += 2 * price + kAgainBatches * std::max(kAgainBatchSeconds, price);
    if (spent > allowance) break;
    planned.push_back(point);
  }
  if (planned.empty()) return planned;
  std::vector<double> seconds;
  for (const CurvePoint& point : planned) {
    LOOM_ASSIGN_OR_RETURN(const double took,
                          MeasureCall(comm, CollectiveKind::kAllReduce, point.algorithm,
                                      point.bytes, kAgainBatches, kAgainBatchSeconds,
                                      /*warm=*/true));
    seconds.push_back(took);
  }
  CallOptions by_ring;
  by_ring.algorithm = Algorithm::kRing;
  LOOM_RETURN_IF_ERROR(comm.AllReduce(absl::MakeSpan(seconds), ReduceOp::kMax, by_ring));
  for (size_t i = 0; i < planned.size(); ++i) {
    const auto measured =
        model->curve(CollectiveKind::kAllReduce, planned[i].algorithm, n, per_node);
    CostModel::Curve curve(measured.begin(), measured.end());
    for (auto& [bytes, at] : curve) {
      if (bytes == planned[i].bytes) at = seconds[i];
    }
    LOOM_RETURN_IF_ERROR(model->SetCurve(CollectiveKind::kAllReduce, planned[i].algorithm, n,
                                         per_node, curve));
  }
  return planned;
}

absl::Status FloorAtTheLargestRate(int ranks, int ranks_per_node, CostModel* model,
                                   absl::Span<const CurvePoint> measured_again) {
  LinkFloor floor = DrawFloor(ranks, ranks_per_node, *model);
  if (!floor.drawn) return absl::OkStatus();
  auto trusted = [&](Algorithm algorithm, size_t bytes, double seconds) {
    return !floor.Under(bytes, seconds) || Contains(measured_again, algorithm, bytes);
  };
  // The least credible point (at or above the floor, or measured again) at each size.
  std::map<size_t, double> least_credible;
  for (const auto& [algorithm, curve] : floor.curves) {
    for (const auto& [bytes, seconds] : curve) {
      if (!trusted(algorithm, bytes, seconds)) continue;
      auto [it, fresh] = least_credible.emplace(bytes, seconds);
      if (!fresh) it->second = std::min(it->second, seconds);
    }
  }
  for (auto& [algorithm, curve] : floor.curves) {
    bool raised = false;
    for (auto& [bytes, seconds] : curve) {
      if (trusted(algorithm, bytes, seconds)) continue;
      // Not a measurement of the algorithm, only of the link's slack: it ties with
      // the fastest credible point there (or sits on the floor where none is), and
      // the tie is judged by its neighbours.
      const auto credible = least_credible.find(bytes);
      seconds = credible != least_credible.end() ? credible->second : floor.At(bytes);
      raised = true;
    }
    if (raised) {
      LOOM_RETURN_IF_ERROR(model->SetCurve(CollectiveKind::kAllReduce, algorithm, ranks,
                                           ranks_per_node, curve));
    }
  }
  return absl::OkStatus();
}

std::vector<Algorithm> PlanFinalists(std::vector<std::pair<Algorithm, double>> prices,
                                     double seconds_left) {
  std::stable_sort(prices.begin(), prices.end(),
                   [](const auto& a, const auto& b) { return a.second < b.second; });
  std::vector<Algorithm> measured;
  double spent = 0;
  for (const auto& [algorithm, seconds] : prices) {
    spent += kFinalistCalls * seconds;
    if (measured.size() >= 2 && spent > seconds_left) break;
    measured.push_back(algorithm);
  }
  return measured;
}

std::string CostModelCacheDir() {
  if (const char* dir = std::getenv("LOOM_CACHE_DIR"); dir != nullptr && *dir != '\0') return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return absl::StrCat(xdg, "/loom");
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return absl::StrCat(home, "/.cache/loom");
  }
  return "/tmp/loom-cache";
}

namespace {

std::string MedianOf(int calibrations) {
  return calibrations > 1 ? absl::StrCat(" (the median of ", calibrations, " calibrations)") : "";
}

}  // namespace

std::string AutoCalibration::ToString() const {
  const std::string layout = absl::StrCat(hosts, " hosts (", key, ")");
  switch (source) {
    case Source::kFormula:
      return absl::StrCat("cost model: formulas (one host, ", key, ")");
    case Source::kCache:
      return absl::StrCat("cost model from cache, measured ", absl::FormatDuration(
                              absl::Floor(age, absl::Seconds(1))),
                          " ago on ", layout, ": ", path, MedianOf(calibrations));
    case Source::kMeasured:
      return absl::StrCat("cost model measured on ", layout, " in ",
                          absl::StrFormat("%.2f s", absl::ToDoubleSeconds(took)),
                          measured_again > 0
                              ? absl::StrCat(" (", measured_again, " points measured again)")
                              : "",
                          save_error.empty() ? absl::StrCat(", saved to ", path)
                                             : absl::StrCat(", not saved: ", save_error),
                          MedianOf(calibrations));
  }
  return "cost model: ?";
}

absl::StatusOr<AutoCalibration> AutoCalibrate(Communicator& comm,
                                              const AutoCalibrationOptions& options) {
  if (options.curve_sizes.size() < 2 ||
      *std::min_element(options.curve_sizes.begin(), options.curve_sizes.end()) < 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AutoCalibrate: curve_sizes needs two or more sizes of at least 4 bytes, got {",
        absl::StrJoin(options.curve_sizes, ", "), "}"));
  }
  if (options.budget <= absl::ZeroDuration() || options.max_age < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AutoCalibrate: budget ", absl::FormatDuration(options.budget),
                     " must be positive and max_age ", absl::FormatDuration(options.max_age),
                     " not negative"));
  }
  if (options.calibrations_merged < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AutoCalibrate: calibrations_merged ", options.calibrations_merged, " must be 1 or more"));
  }
  const absl::Time start = absl::Now();
  const int n = comm.size();
  AutoCalibration result;
  result.model = comm.options().cost_model;

  // 1. The hosts, in rank order, and the key.
  LOOM_ASSIGN_OR_RETURN(const std::vector<std::string> hosts,
                        AllGatherHostNames(comm, options.host_name));
  std::map<std::string, int> per_host;
  for (const std::string& host : hosts) ++per_host[host];
  CallOptions by_ring;
  by_ring.algorithm = Algorithm::kRing;
  result.hosts = static_cast<int>(per_host.size());
  result.ranks_per_host = per_host.begin()->second;
  for (const auto& [name, count] : per_host) {
    if (count != result.ranks_per_host) result.ranks_per_host = 0;
  }
  // The communicator's node layout too: curves belong to it (CostModel::SetCurve's
  // ranks per node), and the same hosts may run node-blind (gloo before it found its
  // hosts) or by nodes, with or without a node transport.
  const CommunicatorOptions& layout = comm.options();
  const std::string nodes =
      layout.ranks_per_node > 0
          ? absl::StrCat(", ", layout.ranks_per_node, " per node",
                         layout.node_transport != nullptr
                             ? absl::StrCat(" over ", layout.node_transport->name())
                             : "")
          : "";
  // Ranks numbered node by node (node_of_rank) run other schedules than the same
  // ranks in the caller's order: a model of one is not the other's.
  const std::vector<int>& order = comm.NodeOrder();
  const std::string numbered =
      std::is_sorted(order.begin(), order.end()) ? "" : ", numbered by node";
  result.key = absl::StrCat(comm.TransportName(), " ", n, " ranks, ", result.ranks_per_host,
                            " per host", nodes, numbered, ": ", absl::StrJoin(hosts, ","));
  if (result.hosts == 1) {
    result.took = absl::Now() - start;
    return result;
  }

  // 2. Rank 0's cache, shared.
  const std::string dir = options.cache_dir.empty() ? CostModelCacheDir() : options.cache_dir;
  result.path = absl::StrFormat("%s/cost_model-%016x.txt", dir, Fnv1a(result.key));
  std::string cached;
  if (comm.rank() == 0) cached = ReadCache(result.path, result.key, options.max_age, &result.age);
  LOOM_RETURN_IF_ERROR(BroadcastText(comm, &cached));
  // The calibrations the cache merged so far, when fewer than the options ask for:
  // this one is measured and merged with them.
  std::vector<CostModel> earlier;
  if (!cached.empty()) {
    absl::StatusOr<CostModel> model = CostModel::Parse(cached);
    // Every rank parses the same text, so every rank takes the same branch.
    if (model.ok()) earlier = CachedCalibrations(cached);
    if (!earlier.empty() && static_cast<int>(earlier.size()) >= options.calibrations_merged) {
      result.calibrations = static_cast<int>(earlier.size());
      int64_t age_ms[1] = {absl::ToInt64Milliseconds(result.age)};
      LOOM_RETURN_IF_ERROR(comm.Broadcast(absl::MakeSpan(age_ms), /*root=*/0, by_ring));
      result.age = absl::Milliseconds(age_ms[0]);
      result.source = AutoCalibration::Source::kCache;
      result.model = *std::move(model);
      comm.SetCostModel(result.model);
      result.took = absl::Now() - start;
      return result;
    }
  }

  // 3. Measure, within the budget: the all-reduce curves of every candidate, each
  // (algorithm, size) a timed call and three batches, priced by the middle one (two
  // where the link's round trips would make a third dear: curve_round_trip_seconds; a
  // warm call before each algorithm's first size; the timed call is the first batch
  // where it outlasts one: MeasureCall). The lowest of two single calls rewarded an
  // algorithm whose calls vary: halving-doubling priced at 1 MiB within the tie of
  // direct, and run at 0.87 of it. A quarter of the budget goes to the batches; the
  // calls outside them, the large sizes and the finalists' larger size take the rest.
  const size_t algorithms = comm.Explain(CollectiveKind::kAllReduce, 1 << 20).predictions.size() +
                            (comm.HasNative() && !comm.options().deterministic ? 1 : 0);
  std::vector<size_t> sizes = options.curve_sizes;
  std::sort(sizes.begin(), sizes.end());
  CalibrationOptions calibration;
  // 20 round trips: 85 ms over 4.25 ms ones, where 50 took a tenth of the budget.
  calibration.latency_round_trips = 20;
  calibration.bandwidth_bytes = size_t{1} << 20;
  calibration.bandwidth_round_trips = 4;
  // Fewer where a round trip is long (3 at least): 20 small ones over 4.3 ms round
  // trips took 90 ms, and the large ones, each a rendezvous, 110.
  calibration.latency_seconds = 0.025;
  calibration.bandwidth_seconds = 0.05;
  calibration.curve_sizes = sizes;
  calibration.curve_kinds = {CollectiveKind::kAllReduce};
  calibration.curve_batches = 3;
  // A warm call before each algorithm's first size only. A point's first call,
  // right after the smaller size's, may find the link's buffers drained and run
  // early (a 4 MiB all-reduce in 13.9 ms over a 2 Gbit/s link that needs 16.8 ms);
  // with three batches the median leaves that one call out, where the lowest of two
  // took it, and a warm call before every size cost 0.24 s of the 2 s on 3 hosts.
  calibration.curve_warm_seconds = 0;
  // Two batches where the third's round trips would cost more than a tenth of the
  // budget: over 2 ms each way (4.25 ms round trips) the calibration took 2.4 s with
  // three, 1.9 s with two; on a 2 Gbit/s link with 0.1 ms round trips three took
  // 1.5 s on 2 hosts and 1.85 s on 3.
  calibration.curve_round_trip_seconds = absl::ToDoubleSeconds(options.budget) / 10;
  // An algorithm at more than twice the best at the size before the largest is not
  // run at the largest (Calibrate's curve_prune_factor): it could not be a finalist.
  calibration.curve_prune_factor = 2;
  const double points = static_cast<double>(algorithms * sizes.size());
  calibration.curve_batch_seconds =
      std::max(0.0, absl::ToDoubleSeconds(options.budget) * 0.25 - kFixedSeconds) /
      std::max(1.0, points * calibration.curve_batches);
  LOOM_ASSIGN_OR_RETURN(result.model, Calibrate(comm, calibration));
  // Every rank has the same curves (Calibrate agreed on them): the same points to
  // measure again, and the same floors.
  const int per_node = comm.options().ranks_per_node;
  double left[1] = {absl::ToDoubleSeconds(options.budget - (absl::Now() - start))};
  CallOptions direct;
  direct.algorithm = Algorithm::kDirect;  // one round: the link may be long
  LOOM_RETURN_IF_ERROR(comm.AllReduce(absl::MakeSpan(left), ReduceOp::kMin, direct));
  LOOM_ASSIGN_OR_RETURN(
      const std::vector<CurvePoint> measured_again,
      MeasureAgain(comm, PointsToMeasureAgain(n, per_node, result.model),
                   std::min(kAgainShareOfBudget * absl::ToDoubleSeconds(options.budget),
                            left[0] / 2),
                   &result.model));
  result.measured_again = static_cast<int>(measured_again.size());
  LOOM_RETURN_IF_ERROR(FloorAtTheLargestRate(n, per_node, &result.model, measured_again));
  LOOM_RETURN_IF_ERROR(ExtendTheFinalists(
      comm, sizes.back(), absl::ToDoubleSeconds(options.budget - (absl::Now() - start)),
      &result.model));
  // This calibration merged with the cache's earlier ones: every rank has the same
  // text and the same measurement, so the same median.
  earlier.push_back(result.model);
  result.calibrations = static_cast<int>(earlier.size());
  if (earlier.size() > 1) {
    LOOM_ASSIGN_OR_RETURN(result.model, CostModel::Median(earlier));
  }
  comm.SetCostModel(result.model);
  result.source = AutoCalibration::Source::kMeasured;
  if (comm.rank() == 0) {
    absl::Status saved = MakeDirs(dir);
    if (saved.ok()) {
      saved = WriteFileAtomically(result.path, CacheText(result.key, result.model, earlier));
    }
    if (!saved.ok()) result.save_error = std::string(saved.message());
  }
  result.took = absl::Now() - start;
  return result;
}

}  // namespace loom
