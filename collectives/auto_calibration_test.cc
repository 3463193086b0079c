#include "collectives/auto_calibration.h"

#include <sys/stat.h>
#include <utime.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "core/status_macros.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using Source = AutoCalibration::Source;

constexpr int kRanks = 4;

// Hosts are emulated by name: rank r says it runs on hosts[r].
struct Ranks {
  std::vector<absl::StatusOr<AutoCalibration>> results;
  // Each rank's choice for an all-reduce at each of a few sizes, after the call.
  std::vector<std::vector<Algorithm>> choices;
  std::vector<std::string> explained;  // rank r's explanation at 64 MiB
};

Ranks CalibrateAll(const std::vector<std::string>& hosts, const AutoCalibrationOptions& base) {
  Ranks run;
  run.results.assign(kRanks, absl::UnknownError("not run"));
  run.choices.resize(kRanks);
  run.explained.resize(kRanks);
  absl::StatusOr<std::shared_ptr<InprocGroup>> group = InprocGroup::Create(kRanks);
  EXPECT_THAT(group, IsOk());
  if (!group.ok()) return run;
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<Transport>> endpoint = (*group)->Endpoint(r);
      if (!endpoint.ok()) { run.results[r] = endpoint.status(); return; }
      CommunicatorOptions options;
      options.ranks_per_node = 2;
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          Communicator::Create(std::move(*endpoint), options);
      if (!comm.ok()) { run.results[r] = comm.status(); return; }
      AutoCalibrationOptions mine = base;
      mine.host_name = hosts[r];
      run.results[r] = AutoCalibrate(**comm, mine);
      for (size_t bytes : {size_t{1} << 10, size_t{1} << 16, size_t{1} << 22, size_t{1} << 26}) {
        run.choices[r].push_back((*comm)->Explain(CollectiveKind::kAllReduce, bytes).chosen);
      }
      run.explained[r] = (*comm)->Explain(CollectiveKind::kAllReduce, size_t{1} << 26).ToString();
    });
  }
  for (auto& thread : threads) thread.join();
  return run;
}

class AutoCalibrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/auto_calibration_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    options_.cache_dir = dir_;
    options_.curve_sizes = {size_t{4} << 10, size_t{64} << 10, size_t{1} << 20};
    options_.budget = absl::Milliseconds(400);
  }
  std::string dir_;
  AutoCalibrationOptions options_;
  const std::vector<std::string> two_hosts_ = {"hA", "hA", "hB", "hB"};
};

void ExpectAgreement(const Ranks& run) {
  for (int r = 0; r < kRanks; ++r) ASSERT_THAT(run.results[r], IsOk()) << "rank " << r;
  for (int r = 1; r < kRanks; ++r) {
    EXPECT_EQ(run.results[r]->model.Serialize(), run.results[0]->model.Serialize()) << r;
    EXPECT_EQ(run.results[r]->source, run.results[0]->source) << r;
    EXPECT_EQ(run.choices[r], run.choices[0]) << "rank " << r << " chose otherwise";
  }
}

TEST_F(AutoCalibrationTest, OneHostKeepsTheFormulasAndWritesNothing) {
  const Ranks run = CalibrateAll({"h", "h", "h", "h"}, options_);
  ExpectAgreement(run);
  EXPECT_EQ(run.results[0]->source, Source::kFormula);
  EXPECT_EQ(run.results[0]->hosts, 1);
  EXPECT_EQ(run.results[0]->model.Serialize(), CostModel::Default().Serialize());
  EXPECT_THAT(run.explained[0], HasSubstr("formula)"));
  struct stat info;
  EXPECT_NE(stat(dir_.c_str(), &info), 0) << "a one-host run made " << dir_;
}

// The first run over two hosts measures and saves; the second loads the same model
// from the file, measuring nothing; a file too old, for other hosts, or unreadable
// is measured over.
TEST_F(AutoCalibrationTest, MeasuresOnceThenLoadsTheCacheUntilItIsStale) {
  options_.calibrations_merged = 1;
  const Ranks first = CalibrateAll(two_hosts_, options_);
  ExpectAgreement(first);
  const AutoCalibration& measured = *first.results[0];
  EXPECT_EQ(measured.source, Source::kMeasured) << measured.ToString();
  EXPECT_EQ(measured.hosts, 2);
  EXPECT_EQ(measured.ranks_per_host, 2);
  EXPECT_THAT(measured.key, HasSubstr("hA,hA,hB,hB"));
  EXPECT_EQ(measured.save_error, "");
  EXPECT_THAT(measured.ToString(), HasSubstr(absl::StrCat("saved to ", measured.path)));
  EXPECT_FALSE(measured.model.curve(CollectiveKind::kAllReduce, Algorithm::kRing, kRanks, 2).empty());
  EXPECT_THAT(first.explained[0], HasSubstr("measured)"));

  const Ranks second = CalibrateAll(two_hosts_, options_);
  ExpectAgreement(second);
  EXPECT_EQ(second.results[0]->source, Source::kCache) << second.results[0]->ToString();
  EXPECT_EQ(second.results[0]->model.Serialize(), measured.model.Serialize());
  EXPECT_EQ(second.choices[0], first.choices[0]);
  EXPECT_EQ(second.results[0]->path, measured.path);

  // Other hosts: another key, another file.
  const Ranks other = CalibrateAll({"hA", "hA", "hC", "hC"}, options_);
  ExpectAgreement(other);
  EXPECT_EQ(other.results[0]->source, Source::kMeasured);
  EXPECT_NE(other.results[0]->path, measured.path);

  // Stale: the file's time set two days back, against a one-day limit.
  AutoCalibrationOptions day = options_;
  day.max_age = absl::Hours(24);
  const time_t old = absl::ToTimeT(absl::Now() - absl::Hours(48));
  struct utimbuf times = {old, old};
  ASSERT_EQ(utime(measured.path.c_str(), &times), 0);
  const Ranks stale = CalibrateAll(two_hosts_, day);
  ExpectAgreement(stale);
  EXPECT_EQ(stale.results[0]->source, Source::kMeasured);

  // Damaged: measured over (and rewritten, so the next run loads it).
  { std::ofstream(measured.path) << "# key: " << measured.key << "\nalpha banana\n"; }
  const Ranks damaged = CalibrateAll(two_hosts_, options_);
  ExpectAgreement(damaged);
  EXPECT_EQ(damaged.results[0]->source, Source::kMeasured);
  const Ranks again = CalibrateAll(two_hosts_, options_);
  ExpectAgreement(again);
  EXPECT_EQ(again.results[0]->source, Source::kCache);
}

// CacheSections reads the calibrations a cache file holds ("#calibration K: " lines).
std::vector<CostModel> CacheSections(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> texts;
  for (std::string line; std::getline(in, line);) {
    const std::string prefix = "#calibration ";
    if (line.rfind(prefix, 0) != 0) continue;
    const size_t colon = line.find(": ");
    const size_t k = std::stoul(line.substr(prefix.size(), colon - prefix.size()));
    if (k > texts.size()) texts.resize(k);
    texts[k - 1] += line.substr(colon + 2) + "\n";
  }
  std::vector<CostModel> models;
  for (const std::string& text : texts) {
    absl::StatusOr<CostModel> model = CostModel::Parse(text);
    EXPECT_THAT(model, IsOk()) << text;
    if (model.ok()) models.push_back(*model);
  }
  return models;
}

// The first three jobs each measure, and each leaves the cache the median of the
// calibrations so far (each kept beside it); the fourth loads it. A file written
// before caches held their calibrations counts as one; one whose count and sections
// disagree is measured over.
TEST_F(AutoCalibrationTest, ThreeCalibrationsMergeByTheirMedianThenTheCacheIsRead) {
  ASSERT_EQ(options_.calibrations_merged, 3);  // the default
  std::vector<std::string> models;
  for (int job = 1; job <= 3; ++job) {
    SCOPED_TRACE(absl::StrCat("job ", job));
    const Ranks run = CalibrateAll(two_hosts_, options_);
    ExpectAgreement(run);
    const AutoCalibration& result = *run.results[0];
    EXPECT_EQ(result.source, Source::kMeasured) << result.ToString();
    EXPECT_EQ(result.calibrations, job);
    const std::vector<CostModel> sections = CacheSections(result.path);
    ASSERT_EQ(sections.size(), static_cast<size_t>(job));
    for (size_t k = 0; k + 1 < sections.size(); ++k) {
      EXPECT_EQ(sections[k].Serialize(), models[k]) << "calibration " << k + 1 << " was rewritten";
    }
    LOOM_ASSERT_OK_AND_ASSIGN(const CostModel median, CostModel::Median(sections));
    EXPECT_EQ(result.model.Serialize(), median.Serialize());
    if (job > 1) {
      EXPECT_THAT(result.ToString(), HasSubstr(absl::StrCat("(the median of ", job, " calibrations)")));
    }
    models.push_back(sections.back().Serialize());
  }
  const Ranks fourth = CalibrateAll(two_hosts_, options_);
  ExpectAgreement(fourth);
  const AutoCalibration& read = *fourth.results[0];
  EXPECT_EQ(read.source, Source::kCache) << read.ToString();
  EXPECT_EQ(read.calibrations, 3);
  EXPECT_THAT(read.ToString(), HasSubstr("(the median of 3 calibrations)"));

  // A file of the key and a model alone (written before caches held their
  // calibrations): one calibration, to which the next job adds its own.
  const std::string key = read.key;
  { std::ofstream(read.path) << "# key: " << key << "\n" << models[0]; }
  const Ranks after_old = CalibrateAll(two_hosts_, options_);
  ExpectAgreement(after_old);
  EXPECT_EQ(after_old.results[0]->source, Source::kMeasured);
  EXPECT_EQ(after_old.results[0]->calibrations, 2);
  const std::vector<CostModel> sections = CacheSections(read.path);
  ASSERT_EQ(sections.size(), 2u);
  EXPECT_EQ(sections[0].Serialize(), models[0]);

  // Three calibrations said, two there: measured over, as the first.
  {
    std::ifstream in(read.path);
    std::stringstream text;
    text << in.rdbuf();
    std::string contents = text.str();
    const size_t count = contents.find("# calibrations: 2");
    ASSERT_NE(count, std::string::npos);
    contents.replace(count, 17, "# calibrations: 3");
    std::ofstream(read.path) << contents;
  }
  const Ranks disagreeing = CalibrateAll(two_hosts_, options_);
  ExpectAgreement(disagreeing);
  EXPECT_EQ(disagreeing.results[0]->source, Source::kMeasured);
  EXPECT_EQ(disagreeing.results[0]->calibrations, 1);

  AutoCalibrationOptions none = options_;
  none.calibrations_merged = 0;
  const Ranks refused = CalibrateAll(two_hosts_, none);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_THAT(refused.results[r], StatusIs(absl::StatusCode::kInvalidArgument,
                                             HasSubstr("calibrations_merged 0")));
  }
}

// Every all-reduce curve reaches 4x the largest size: the finalists measured there,
// the others grown from their last point as the least of the finalists grew, and
// at least linearly, so a curve carried on is not compared with measured points at
// sizes none of it measured.
TEST_F(AutoCalibrationTest, EveryCurveReachesTheFinalistsSize) {
  const Ranks run = CalibrateAll(two_hosts_, options_);
  ExpectAgreement(run);
  const CostModel& model = run.results[0]->model;
  int curves = 0;
  for (const auto& [algorithm, seconds] :
       model.Explain(CollectiveKind::kAllReduce, size_t{1} << 20, kRanks, 2, true).predictions) {
    const auto curve = model.curve(CollectiveKind::kAllReduce, algorithm, kRanks, 2);
    if (curve.empty()) continue;
    ++curves;
    SCOPED_TRACE(AlgorithmName(algorithm));
    ASSERT_GE(curve.size(), 2u);
    EXPECT_EQ(curve.back().first, size_t{4} << 20);
    EXPECT_EQ(curve[curve.size() - 2].first, size_t{1} << 20);
    EXPECT_GT(curve.back().second, 0);
  }
  EXPECT_GE(curves, 2);
}

// A cache directory that cannot be made is reported in the result, and the run
// still gets its measured model.
TEST_F(AutoCalibrationTest, AnUnwritableCacheIsReportedNotFatal) {
  { std::ofstream(dir_) << "a file where the directory should be\n"; }
  AutoCalibrationOptions options = options_;
  options.cache_dir = dir_ + "/sub";
  const Ranks run = CalibrateAll(two_hosts_, options);
  ExpectAgreement(run);
  EXPECT_EQ(run.results[0]->source, Source::kMeasured);
  EXPECT_THAT(run.results[0]->save_error, HasSubstr(dir_));
  EXPECT_THAT(run.results[0]->ToString(), HasSubstr("not saved"));
  std::remove(dir_.c_str());
}

// The finalists' larger calls fit what is left of the budget: two calls each, the
// cheapest first, as many as fit, two at least.
TEST(PlanFinalistsTest, TheCheapestTwiceAsManyAsFitTwoAtLeast) {
  using A = Algorithm;
  const std::vector<std::pair<A, double>> prices = {
      {A::kRing, 0.125}, {A::kDirect, 0.0625}, {A::kHalvingDoubling, 0.25}};
  struct Case {
    double left;
    std::vector<A> measured;
  };
  for (const Case& c : std::vector<Case>{
           {1.000, {A::kDirect, A::kRing, A::kHalvingDoubling}},  // 2 x 0.4375 fits
           {0.875, {A::kDirect, A::kRing, A::kHalvingDoubling}},  // exactly
           {0.870, {A::kDirect, A::kRing}},                       // 2 x 0.1875 fits
           {0.100, {A::kDirect, A::kRing}},                       // two at least
           {-0.50, {A::kDirect, A::kRing}}}) {                    // over the budget already
    SCOPED_TRACE(absl::StrCat("left ", c.left, " s"));
    EXPECT_EQ(PlanFinalists(prices, c.left), c.measured);
  }
  EXPECT_EQ(PlanFinalists({{A::kRing, 0.3}}, 0.0), std::vector<A>{A::kRing});
  EXPECT_TRUE(PlanFinalists({}, 1.0).empty());
  // Equal prices keep the order they came in (every rank plans alike).
  EXPECT_EQ(PlanFinalists({{A::kRing, 0.1}, {A::kDirect, 0.1}}, 1.0),
            (std::vector<A>{A::kRing, A::kDirect}));
}

// The calibration across 3 emulated hosts that chose halving-doubling at 256 KiB
// (auto_calibration.h), as curves on 3 ranks of 1 a node: at 256 KiB
// halving-doubling and native are under the floor and direct is the fastest credible
// point; at 512 KiB only the double tree has a point, under it; at 1 MiB
// halving-doubling and direct are under and the ring is credible. Nothing at 4 KiB
// or at the largest size.
CostModel TheThreeHostCalibration() {
  using A = Algorithm;
  const auto K = CollectiveKind::kAllReduce;
  CostModel model = CostModel::Default();
  const size_t k4 = 4 << 10, k256 = 256 << 10, k512 = 512 << 10, m1 = 1 << 20, m4 = 4 << 20;
  EXPECT_THAT(model.SetCurve(K, A::kRing, 3, 1,
                             {{k4, 199e-6}, {k256, 1.475e-3}, {m1, 5.87e-3}, {m4, 23.9e-3}}),
              IsOk());
  EXPECT_THAT(model.SetCurve(K, A::kHalvingDoubling, 3, 1,
                             {{k4, 277e-6}, {k256, 1.04e-3}, {m1, 5.61e-3}, {m4, 23.5e-3}}),
              IsOk());
  EXPECT_THAT(model.SetCurve(K, A::kDirect, 3, 1,
                             {{k4, 65e-6}, {k256, 1.47e-3}, {m1, 5.79e-3}, {m4, 23.5e-3}}),
              IsOk());
  EXPECT_THAT(model.SetCurve(K, A::kNative, 3, 1, {{k4, 164e-6}, {k256, 0.5e-3}, {m4, 59.7e-3}}),
              IsOk());
  EXPECT_THAT(model.SetCurve(K, A::kDoubleBinaryTree, 3, 1,
                             {{k4, 150e-6}, {k512, 1e-3}, {m4, 26e-3}}),
              IsOk());
  return model;
}

// A point faster per byte than the fastest call at the largest size (less the most
// time at the smallest size) is priced as the fastest credible point at its size,
// or at that floor where none is; points at or above it, the largest size, other
// layouts and a kind other than all-reduce are left as measured
// (TheThreeHostCalibration).
TEST(FloorAtTheLargestRateTest, RaisesOnlyWhatTheLinkCouldNotCarry) {
  using A = Algorithm;
  const auto K = CollectiveKind::kAllReduce;
  CostModel model = TheThreeHostCalibration();
  const size_t k4 = 4 << 10, k256 = 256 << 10, k512 = 512 << 10, m1 = 1 << 20, m4 = 4 << 20;
  // Another layout and another kind, just as fast per byte: not this call's business.
  ASSERT_THAT(model.SetCurve(K, A::kRing, 2, 1, {{k4, 1e-6}, {k256, 1e-6}, {m4, 1e-3}}), IsOk());
  ASSERT_THAT(model.SetCurve(CollectiveKind::kAllGather, A::kRing, 3, 1,
                             {{k4, 1e-6}, {k256, 1e-6}, {m4, 1e-3}}),
              IsOk());
  // 512 KiB: no point is credible there (only the double tree's): the floor itself.
  ASSERT_THAT(FloorAtTheLargestRate(3, 1, &model), IsOk());

  // 23.5 ms at 4 MiB, less the most at 4 KiB (halving-doubling, 277 us): 5.54 ns a byte.
  const double floor_256k = (23.5e-3 - 277e-6) / 16;  // 1.451 ms
  const double floor_1m = (23.5e-3 - 277e-6) / 4;     // 5.81 ms
  auto at = [&](A algorithm, size_t bytes) {
    for (const auto& [size, seconds] : model.curve(K, algorithm, 3, 1)) {
      if (size == bytes) return seconds;
    }
    return -1.0;
  };
  ASSERT_LT(floor_256k, 1.47e-3);
  ASSERT_GT(floor_1m, 5.79e-3);
  // 1.04 ms: priced as direct's 1.47, the fastest credible point there.
  EXPECT_DOUBLE_EQ(at(A::kHalvingDoubling, k256), 1.47e-3);
  EXPECT_DOUBLE_EQ(at(A::kNative, k256), 1.47e-3);               // the engine's too
  EXPECT_DOUBLE_EQ(at(A::kRing, k256), 1.475e-3);                // above: as measured
  EXPECT_DOUBLE_EQ(at(A::kDirect, k256), 1.47e-3);
  // At 1 MiB only the ring's 5.87 ms is credible: halving-doubling's 5.61 and
  // direct's 5.79 are priced as it.
  EXPECT_DOUBLE_EQ(at(A::kHalvingDoubling, m1), 5.87e-3);
  EXPECT_DOUBLE_EQ(at(A::kDirect, m1), 5.87e-3);
  EXPECT_DOUBLE_EQ(at(A::kRing, m1), 5.87e-3);
  EXPECT_DOUBLE_EQ(at(A::kHalvingDoubling, k4), 277e-6);         // under the floor's 23 us
  EXPECT_DOUBLE_EQ(at(A::kHalvingDoubling, m4), 23.5e-3);        // the largest: as measured
  EXPECT_DOUBLE_EQ(at(A::kDoubleBinaryTree, k512), 2 * floor_256k);
  EXPECT_DOUBLE_EQ(model.curve(K, A::kRing, 2, 1)[1].second, 1e-6);
  EXPECT_DOUBLE_EQ(model.curve(CollectiveKind::kAllGather, A::kRing, 3, 1)[1].second, 1e-6);
  // No measured curve: nothing to do.
  CostModel formulas = CostModel::Default();
  EXPECT_THAT(FloorAtTheLargestRate(3, 1, &formulas), IsOk());
}

std::set<std::pair<size_t, Algorithm>> AsSet(const std::vector<CurvePoint>& points) {
  std::set<std::pair<size_t, Algorithm>> set;
  for (const CurvePoint& point : points) set.emplace(point.bytes, point.algorithm);
  return set;
}

TEST(PointsToMeasureAgainTest, ThoseUnderTheFloorAndTheCredibleOneTheyWouldBePricedAs) {
  using A = Algorithm;
  const CostModel model = TheThreeHostCalibration();
  const std::vector<CurvePoint> points = PointsToMeasureAgain(3, 1, model);
  const size_t k256 = 256 << 10, k512 = 512 << 10, m1 = 1 << 20;
  const std::set<std::pair<size_t, Algorithm>> expected = {
      {k256, A::kHalvingDoubling}, {k256, A::kNative}, {k256, A::kDirect},
      {k512, A::kDoubleBinaryTree},
      {m1, A::kHalvingDoubling},   {m1, A::kDirect},   {m1, A::kRing}};
  EXPECT_EQ(AsSet(points), expected);
  EXPECT_EQ(points.size(), expected.size());  // each once
  for (size_t i = 1; i < points.size(); ++i) {
    EXPECT_LE(points[i - 1].bytes, points[i].bytes) << "smallest size first, at " << i;
  }
  // Another layout: nothing measured there.
  EXPECT_TRUE(PointsToMeasureAgain(2, 1, model).empty());
  EXPECT_TRUE(PointsToMeasureAgain(3, 1, CostModel::Default()).empty());
}

// A point measured again stays as measured even under the floor, and counts as
// credible: what is still under the floor and was not measured again is priced as it.
TEST(FloorAtTheLargestRateTest, PointsMeasuredAgainAreTakenAsTheyAre) {
  using A = Algorithm;
  const auto K = CollectiveKind::kAllReduce;
  CostModel model = TheThreeHostCalibration();
  const size_t k256 = 256 << 10, m1 = 1 << 20;
  // Measured again: halving-doubling's 256 KiB at 1.30 ms, still under the floor
  // (1.451 ms); direct's at 1.46.
  auto set_point = [&](A algorithm, size_t at, double seconds) {
    const auto measured = model.curve(K, algorithm, 3, 1);
    CostModel::Curve curve(measured.begin(), measured.end());
    for (auto& [bytes, value] : curve) {
      if (bytes == at) value = seconds;
    }
    ASSERT_THAT(model.SetCurve(K, algorithm, 3, 1, curve), IsOk());
  };
  set_point(A::kHalvingDoubling, k256, 1.30e-3);
  set_point(A::kDirect, k256, 1.46e-3);
  const std::vector<CurvePoint> again = {{A::kHalvingDoubling, k256}, {A::kDirect, k256}};
  ASSERT_THAT(FloorAtTheLargestRate(3, 1, &model, again), IsOk());
  auto at = [&](A algorithm, size_t bytes) {
    for (const auto& [size, seconds] : model.curve(K, algorithm, 3, 1)) {
      if (size == bytes) return seconds;
    }
    return -1.0;
  };
  EXPECT_DOUBLE_EQ(at(A::kHalvingDoubling, k256), 1.30e-3);  // as measured again
  EXPECT_DOUBLE_EQ(at(A::kDirect, k256), 1.46e-3);
  EXPECT_DOUBLE_EQ(at(A::kNative, k256), 1.30e-3);  // not measured again: the least credible
  EXPECT_DOUBLE_EQ(at(A::kRing, k256), 1.475e-3);
  // 1 MiB was not measured again: priced as before, as the ring's credible 5.87 ms.
  EXPECT_DOUBLE_EQ(at(A::kHalvingDoubling, m1), 5.87e-3);
  EXPECT_DOUBLE_EQ(at(A::kDirect, m1), 5.87e-3);
}

// MeasureAgain on 4 in-process ranks: the planned points (those that fit in the
// allowance, in order) take new, positive times, the same on every rank; the other
// points and curves are left as they were.
TEST(MeasureAgainTest, MeasuresWhatFitsAndEveryRankAgrees) {
  using A = Algorithm;
  const auto K = CollectiveKind::kAllReduce;
  const size_t k4 = 4 << 10, k64 = 64 << 10, m1 = 1 << 20;
  // Prices made up and far from what the calls take, so a measured point shows.
  CostModel base = CostModel::Default();
  ASSERT_THAT(base.SetCurve(K, A::kRing, kRanks, 0, {{k4, 1.0}, {k64, 1.0}, {m1, 1.0}}), IsOk());
  ASSERT_THAT(base.SetCurve(K, A::kDirect, kRanks, 0, {{k4, 1e-9}, {k64, 1e-9}, {m1, 1.0}}),
              IsOk());
  const std::vector<CurvePoint> points = {{A::kDirect, k4}, {A::kDirect, k64}, {A::kRing, k64}};
  // Each of the first two is reckoned at 3 x 10 ms (their prices are tiny); the
  // ring's 64 KiB at 2 x 1 s + 3 x 1 s: 0.07 s lets the first two in, not the third.
  const double allowance = 0.07;
  std::vector<CostModel> models(kRanks, base);
  std::vector<absl::StatusOr<std::vector<CurvePoint>>> measured(kRanks,
                                                                absl::UnknownError("not run"));
  absl::StatusOr<std::shared_ptr<InprocGroup>> group = InprocGroup::Create(kRanks);
  ASSERT_THAT(group, IsOk());
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<Transport>> endpoint = (*group)->Endpoint(r);
      if (!endpoint.ok()) { measured[r] = endpoint.status(); return; }
      absl::StatusOr<std::unique_ptr<Communicator>> comm =
          Communicator::Create(std::move(*endpoint), CommunicatorOptions{});
      if (!comm.ok()) { measured[r] = comm.status(); return; }
      measured[r] = MeasureAgain(**comm, points, allowance, &models[r]);
    });
  }
  for (auto& thread : threads) thread.join();
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_THAT(measured[r], IsOk()) << "rank " << r;
    ASSERT_EQ(measured[r]->size(), 2u) << "rank " << r;
    EXPECT_EQ((*measured[r])[0].bytes, k4);
    EXPECT_EQ((*measured[r])[1].bytes, k64);
    EXPECT_EQ((*measured[r])[1].algorithm, A::kDirect);
    EXPECT_EQ(models[r].Serialize(), models[0].Serialize()) << "rank " << r << " disagrees";
  }
  const auto direct = models[0].curve(K, A::kDirect, kRanks, 0);
  ASSERT_EQ(direct.size(), 3u);
  EXPECT_GT(direct[0].second, 1e-9);  // measured: a real call takes longer than 1 ns
  EXPECT_LT(direct[0].second, 1.0);
  EXPECT_GT(direct[1].second, 1e-9);
  EXPECT_LT(direct[1].second, 1.0);
  EXPECT_DOUBLE_EQ(direct[2].second, 1.0);  // not planned
  for (const auto& [bytes, seconds] : models[0].curve(K, A::kRing, kRanks, 0)) {
    EXPECT_DOUBLE_EQ(seconds, 1.0) << bytes;  // did not fit
  }
}

TEST_F(AutoCalibrationTest, BadOptionsAreRefusedNamingThem) {
  AutoCalibrationOptions one_size = options_;
  one_size.curve_sizes = {size_t{1} << 20};
  EXPECT_THAT(CalibrateAll(two_hosts_, one_size).results[0],
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("{1048576}")));
  AutoCalibrationOptions no_time = options_;
  no_time.budget = absl::ZeroDuration();
  EXPECT_THAT(CalibrateAll(two_hosts_, no_time).results[0],
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("budget 0")));
}

}  // namespace
}  // namespace loom
