// schedule: generates (or loads) a pipeline schedule, simulates it and prints it as a
// table, as PyTorch pipelining's CSV, as a Chrome trace (Perfetto) or as an SVG
// timeline, always with its bubble ratio and peak activations.
//
//   ./bazelw run //tools:schedule -- --schedule=1f1b --ranks=4 --microbatches=8
//   schedule --schedule=interleaved_1f1b --ranks=4 --microbatches=8 --virtual=2 --verify
//   schedule --schedule=zb_v --ranks=4 --microbatches=8 --format=svg --out=zb_v.svg
//   schedule --schedule=1f1b --lower --format=csv > 1f1b.csv
//   schedule --load=1f1b.csv --format=chrome --costs=F=1,B=2,latency=0.1 > trace.json
//
// Where things go: the table format prints everything (grid, summary, verification)
// to stdout. The csv, chrome and svg formats print the export to stdout and the
// summary to stderr, so that stdout stays a valid file; with --out the export goes
// to the file and the summary to stdout.
//
// Exit status (tools/cli.h): 0; 1 when the schedule fails verification (or the
// simulator refuses it) or writing --out fails midway; 2 for bad flags, stray
// arguments, an unreadable or malformed file, or an --out that cannot be opened.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "core/checked_size.h"
#include "core/status_macros.h"
#include "pipeline/chrome_trace.h"
#include "pipeline/generators.h"
#include "pipeline/lowering.h"
#include "pipeline/schedule.h"
#include "pipeline/schedule_csv.h"
#include "pipeline/simulator.h"
#include "pipeline/svg_timeline.h"
#include "pipeline/verifier.h"
#include "tools/cli.h"
#include "topology/parallel_config.h"

ABSL_FLAG(std::string, schedule, "",
          "Schedule to generate: gpipe, 1f1b, interleaved_1f1b, zb_h1 or zb_v (hyphens work "
          "too). Required unless --load is given.");
ABSL_FLAG(int64_t, ranks, 4, "Pipeline ranks p of a generated schedule.");
ABSL_FLAG(int64_t, microbatches, 8, "Microbatches m of a generated schedule.");
ABSL_FLAG(int64_t, virtual, 0,
          "Stages per rank v: interleaved_1f1b takes any v >= 1 (m must be a multiple of p), "
          "zb_v 2, the others 1. 0 picks the schedule's usual value (2 for interleaved_1f1b "
          "and zb_v, else 1).");
ABSL_FLAG(std::string, costs, "F=1,B=2,I=1,W=1,latency=0",
          "Simulation costs per stage, in any time unit: F, B, I, W and the point-to-point "
          "latency, comma separated; keys left out keep these defaults.");
ABSL_FLAG(std::string, format, "table",
          "Output: table (grid and summary), csv (PyTorch pipelining's schedule CSV), chrome "
          "(Chrome trace JSON for Perfetto / chrome://tracing) or svg (timeline picture).");
ABSL_FLAG(bool, verify, false,
          "Verify the schedule (complete, in dependency order, no deadlock under buffered and "
          "rendezvous semantics) and print the result; exit 1 if it fails.");
ABSL_FLAG(bool, lower, false,
          "Show the lowered schedule (with SEND/RECV actions) in the table and csv formats.");
ABSL_FLAG(std::string, load, "",
          "Read the schedule from this PyTorch-style CSV instead of generating one; the ranks, "
          "stage layout and microbatches come from the file.");
ABSL_FLAG(std::string, out, "", "Write the output to this file instead of stdout.");
ABSL_FLAG(double, time_unit_us, 1000,
          "chrome format: microseconds per time unit of --costs (1000: a cost of 1 is 1 ms).");
ABSL_FLAG(double, svg_width, 1200, "svg format: picture width in pixels (200 to 100000).");

namespace loom {
namespace {

constexpr int kBadInput = 2;
constexpr int kBadSchedule = 1;
// The largest schedule generated, in actions (ranks x microbatches x stages per
// rank x 4).
constexpr int64_t kMaxActions = 10'000'000;

enum class Format { kTable, kCsv, kChrome, kSvg };

absl::StatusOr<Format> ParseFormat(const std::string& text) {
  if (text == "table") return Format::kTable;
  if (text == "csv") return Format::kCsv;
  if (text == "chrome") return Format::kChrome;
  if (text == "svg") return Format::kSvg;
  return absl::InvalidArgumentError(
      absl::StrCat("--format=", text, " is not table, csv, chrome or svg"));
}

// ParseCosts reads "F=1,B=2,I=1,W=1,latency=0" on top of the defaults and returns the
// costs with their canonical spelling, which the summary and the picture show.
absl::StatusOr<std::pair<SimulationCosts, std::string>> ParseCosts(const std::string& text) {
  SimulationCosts costs;
  for (const absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    const std::vector<absl::string_view> parts = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (parts.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("--costs: \"", item, "\" is not key=value (e.g. F=1,B=2,I=1,W=1,latency=0)"));
    }
    const std::string key = std::string(absl::StripAsciiWhitespace(parts[0]));
    double value = 0;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(parts[1]), &value) || !std::isfinite(value) ||
        value < 0) {
      return absl::InvalidArgumentError(absl::StrCat("--costs: ", key, "=", parts[1],
                                                     " is not a finite number >= 0"));
    }
    const std::string upper = absl::AsciiStrToUpper(key);
    if (upper == "F") {
      costs.uniform.forward = value;
    } else if (upper == "B") {
      costs.uniform.backward = value;
    } else if (upper == "I") {
      costs.uniform.backward_input = value;
    } else if (upper == "W") {
      costs.uniform.backward_weight = value;
    } else if (upper == "LATENCY") {
      costs.p2p_latency = value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--costs: unknown key \"", key, "\" in \"", item, "\"; expected F, B, I, W or latency"));
    }
  }
  const StageCosts& u = costs.uniform;
  std::string spelled = absl::StrFormat("F=%g B=%g I=%g W=%g latency=%g", u.forward, u.backward,
                                        u.backward_input, u.backward_weight, costs.p2p_latency);
  return std::make_pair(costs, spelled);
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read --load=", path, ": ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot write --out=", path, ": ", std::strerror(errno)));
  }
  out << text;
  out.close();
  if (!out) {
    return absl::InvalidArgumentError(absl::StrCat("writing --out=", path, " failed"));
  }
  return absl::OkStatus();
}

// FileStem returns "1f1b" for "dir/1f1b.csv", to name a loaded schedule.
std::string FileStem(absl::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash != absl::string_view::npos) path.remove_prefix(slash + 1);
  absl::ConsumeSuffix(&path, ".csv");
  return std::string(path);
}

absl::StatusOr<Schedule> Generate() {
  const std::string name = absl::GetFlag(FLAGS_schedule);
  if (name.empty()) {
    return absl::InvalidArgumentError(
        "--schedule or --load is required, e.g. --schedule=1f1b --ranks=4 --microbatches=8");
  }
  absl::StatusOr<PipelineScheduleKind> kind =
      ParsePipelineSchedule(absl::StrReplaceAll(name, {{"_", "-"}}));
  if (!kind.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--schedule=", name, " is not gpipe, 1f1b, interleaved_1f1b, zb_h1 or zb_v"));
  }
  const int64_t ranks = absl::GetFlag(FLAGS_ranks);
  const int64_t microbatches = absl::GetFlag(FLAGS_microbatches);
  int64_t virtual_stages = absl::GetFlag(FLAGS_virtual);
  if (ranks < 1) return absl::InvalidArgumentError(absl::StrCat("--ranks=", ranks, " must be >= 1"));
  if (microbatches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--microbatches=", microbatches, " must be >= 1"));
  }
  if (virtual_stages < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--virtual=", virtual_stages, " must be >= 1 (or 0 for the schedule's usual value)"));
  }
  if (virtual_stages == 0) {
    virtual_stages = *kind == PipelineScheduleKind::kInterleaved1F1B ||
                             *kind == PipelineScheduleKind::kZeroBubbleV
                         ? 2
                         : 1;
  }
  // Every rank holds a forward and up to three backward actions per microbatch
  // and stage; a schedule past kMaxActions is not one to print, and its vectors
  // could not be allocated.
  absl::StatusOr<int64_t> actions = CheckedMul({{"--ranks", ranks},
                                                {"--microbatches", microbatches},
                                                {"--virtual", virtual_stages},
                                                {"actions per stage and microbatch", 4}});
  if (!actions.ok()) return actions.status();
  if (*actions > kMaxActions) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--ranks=", ranks, " x --microbatches=", microbatches, " x --virtual=", virtual_stages,
        " make up to ", *actions, " actions; at most ", kMaxActions));
  }
  return MakeSchedule(*kind, ranks, microbatches, virtual_stages);
}

absl::StatusOr<Schedule> Load(const std::string& path) {
  if (!absl::GetFlag(FLAGS_schedule).empty()) {
    return absl::InvalidArgumentError(absl::StrCat("give --schedule=", absl::GetFlag(FLAGS_schedule),
                                                   " or --load=", path, ", not both"));
  }
  LOOM_ASSIGN_OR_RETURN(const std::string text, ReadFile(path));
  CsvLoadOptions options;
  options.name = FileStem(path);
  absl::StatusOr<Schedule> schedule = LoadScheduleCsv(text, options);
  if (!schedule.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", schedule.status().message()));
  }
  return schedule;
}

std::string Ratio(double ratio) {
  return absl::StrFormat("%.4f (%.2f%%)", ratio, 100 * ratio);
}

// Summary is the simulator's result as a table: the overall bubble, then each
// rank's busy and idle time, bubble and peak in-flight activations.
std::string Summary(const Schedule& schedule, const SimulationResult& run,
                    const std::string& costs) {
  const int64_t m = schedule.num_microbatches;
  std::string text = absl::StrCat(schedule.name, ": ", schedule.layout.ToString(), ", ", m,
                                  m == 1 ? " microbatch" : " microbatches", "; costs ", costs, "\n");
  absl::StrAppendFormat(&text, "makespan %g, bubble ratio %s\n", run.makespan,
                        Ratio(run.bubble_ratio));
  bool split = false;
  for (const RankTimeline& r : run.ranks) {
    split = split || r.peak_activations_before_input_grad != r.peak_activations;
  }
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"rank", "busy", "idle", "bubble ratio", "peak activations"});
  if (split) rows.back().push_back("peak until I");
  for (size_t rank = 0; rank < run.ranks.size(); ++rank) {
    const RankTimeline& r = run.ranks[rank];
    rows.push_back({absl::StrCat(rank), absl::StrFormat("%g", r.busy),
                    absl::StrFormat("%g", r.idle), Ratio(r.bubble_ratio),
                    absl::StrCat(r.peak_activations)});
    if (split) rows.back().push_back(absl::StrCat(r.peak_activations_before_input_grad));
  }
  std::vector<size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line.append(widths[c] - row[c].size() + 2, ' ');
    }
    absl::StrAppend(&text, line, "\n");
  }
  return text;
}

// Outputs of one run: the export and the summary (with the verification line).
struct Outputs {
  std::string body;
  std::string summary;
};

// Run does the work; on failure `exit_code` says whose fault it was.
absl::StatusOr<Outputs> Run(int& exit_code) {
  exit_code = kBadInput;
  LOOM_ASSIGN_OR_RETURN(const Format format, ParseFormat(absl::GetFlag(FLAGS_format)));
  LOOM_ASSIGN_OR_RETURN(const auto parsed_costs, ParseCosts(absl::GetFlag(FLAGS_costs)));
  const SimulationCosts& costs = parsed_costs.first;
  const std::string& costs_text = parsed_costs.second;
  const std::string load = absl::GetFlag(FLAGS_load);
  LOOM_ASSIGN_OR_RETURN(Schedule schedule, load.empty() ? Generate() : Load(load));

  // From here on a failure is the schedule's, not the command line's.
  exit_code = kBadSchedule;
  std::string verified;
  if (absl::GetFlag(FLAGS_verify)) {
    const absl::Status status = Verify(schedule);
    if (!status.ok()) {
      return absl::Status(status.code(),
                          absl::StrCat("verification failed: ", status.message()));
    }
    verified = absl::StrCat(
        "verified: ", schedule.name, " (", schedule.NumActions(),
        " actions) computes every forward and backward once, in dependency order, and is "
        "deadlock free under buffered and rendezvous semantics\n");
  }
  Schedule shown = schedule;
  if (absl::GetFlag(FLAGS_lower) && !schedule.HasCommunication()) {
    LOOM_ASSIGN_OR_RETURN(shown, Lower(schedule));
  }
  absl::StatusOr<SimulationResult> run = Simulate(shown, costs);
  if (!run.ok()) {
    // Costs were checked by ParseCosts; what is left is the schedule itself.
    return absl::Status(run.status().code(),
                        absl::StrCat("cannot simulate the schedule: ", run.status().message()));
  }

  Outputs outputs;
  outputs.summary = absl::StrCat(Summary(shown, *run, costs_text), verified);
  exit_code = kBadInput;
  switch (format) {
    case Format::kTable:
      outputs.body = absl::StrCat(shown.ToString(), "\n");
      break;
    case Format::kCsv:
      outputs.body = ScheduleToCsv(shown);
      break;
    case Format::kChrome: {
      ChromeTraceOptions options;
      options.microseconds_per_unit = absl::GetFlag(FLAGS_time_unit_us);
      absl::StatusOr<std::string> trace = ToChromeTrace(shown, *run, options);
      if (!trace.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--time_unit_us: ", trace.status().message()));
      }
      outputs.body = *std::move(trace);
      break;
    }
    case Format::kSvg: {
      SvgTimelineOptions options;
      options.width = absl::GetFlag(FLAGS_svg_width);
      options.subtitle = absl::StrCat("costs ", costs_text);
      absl::StatusOr<std::string> svg = ToSvgTimeline(shown, *run, options);
      if (!svg.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("--svg_width: ", svg.status().message()));
      }
      outputs.body = *std::move(svg);
      break;
    }
  }
  return outputs;
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Generates or loads a pipeline schedule, simulates it and prints it.\n"
      "  schedule --schedule=gpipe|1f1b|interleaved_1f1b|zb_h1|zb_v --ranks=P --microbatches=M\n"
      "           [--virtual=V] [--costs=F=1,B=2,I=1,W=1,latency=0] [--verify] [--lower]\n"
      "           [--format=table|csv|chrome|svg] [--out=FILE]\n"
      "  schedule --load=FILE.csv [same output flags]");
  const absl::StatusOr<std::vector<char*>> args = loom::cli::ParseFlags(argc, argv);
  if (!args.ok()) return loom::cli::Fail("schedule", args.status());
  if (absl::Status s = loom::cli::CheckNoArguments(*args); !s.ok()) {
    return loom::cli::Fail("schedule", s);
  }
  const std::string out = absl::GetFlag(FLAGS_out);
  if (absl::Status s = loom::cli::CheckOutputPath("--out", out); !s.ok()) {
    return loom::cli::Fail("schedule", s);
  }
  int exit_code = 0;
  const absl::StatusOr<loom::Outputs> outputs = loom::Run(exit_code);
  if (!outputs.ok()) return loom::cli::Fail("schedule", outputs.status(), exit_code);
  const bool table = absl::GetFlag(FLAGS_format) == "table";
  if (!out.empty()) {
    const std::string file = table ? outputs->body + outputs->summary : outputs->body;
    const absl::Status written = loom::WriteFile(out, file);
    if (!written.ok()) return loom::cli::Fail("schedule", written, loom::cli::kExitRuntime);
    std::cout << outputs->summary << "wrote " << out << " (" << file.size() << " bytes)\n";
  } else if (table) {
    std::cout << outputs->body << outputs->summary;
  } else {
    std::cout << outputs->body;
    std::cout.flush();
    std::cerr << outputs->summary;
  }
  return 0;
}
