#include "tools/training/train_flags.h"

#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

// Sets flags by name (they are defined in train_flags.cc) for one test; the
// FlagSaver puts every flag back afterwards.
class TrainFlagsTest : public ::testing::Test {
 protected:
  void Set(std::initializer_list<std::pair<const char*, const char*>> flags) {
    for (const auto& [name, value] : flags) {
      absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
      ASSERT_NE(flag, nullptr) << name;
      std::string error;
      ASSERT_TRUE(flag->ParseFrom(value, &error)) << name << "=" << value << ": " << error;
    }
  }
  absl::StatusOr<TrainCommand> Command(std::vector<std::string> args = {}) {
    args.insert(args.begin(), "train");
    argv_.clear();
    for (std::string& arg : args) argv_.push_back(arg.data());
    args_ = std::move(args);
    return TrainCommandFromFlags(static_cast<int>(argv_.size()), argv_.data());
  }

 private:
  absl::FlagSaver saver_;
  std::vector<std::string> args_;
  std::vector<char*> argv_;
};

TEST_F(TrainFlagsTest, DefaultsAreTheJobsDefaults) {
  absl::StatusOr<TrainCommand> command = Command();
  LOOM_ASSERT_OK(command.status());
  const TrainJobOptions defaults;
  EXPECT_EQ(command->options.dp, defaults.dp);
  EXPECT_EQ(command->options.tp, defaults.tp);
  EXPECT_EQ(command->options.pp, defaults.pp);
  EXPECT_EQ(command->options.zero, defaults.zero);
  EXPECT_EQ(command->options.steps, defaults.steps);
  EXPECT_EQ(command->options.model.vocab, 64);  // the Markov chain's
  EXPECT_EQ(command->launch.transport, RankTransport::kThreads);
  EXPECT_EQ(command->launch.heartbeat_timeout, absl::Seconds(10));
  EXPECT_TRUE(command->outputs.compare_reference);
  EXPECT_TRUE(command->plan_line.empty());
}

TEST_F(TrainFlagsTest, ValuesReachTheOptions) {
  Set({{"dp", "1"}, {"tp", "1"}, {"pp", "3"}, {"layers", "7"}, {"microbatches", "6"},
       {"zero", "1"}, {"persist_below", "64K"}, {"schedule", "zb-h1"}, {"dtype", "bf16"},
       {"transport", "shm"}, {"job_id", "run_7"}, {"heartbeat_timeout", "2s"},
       {"summary_json", "/tmp/s.json"}, {"lr_min", "1e-4"}, {"checkpoint_dir", "/tmp/c"},
       {"max_restarts", "2"}, {"elastic_dp", "true"}, {"min_ranks", "2"}});
  absl::StatusOr<TrainCommand> command = Command();
  LOOM_ASSERT_OK(command.status());
  const TrainJobOptions& o = command->options;
  EXPECT_EQ(o.pp, 3);
  EXPECT_EQ(o.model.layers, 7);
  EXPECT_EQ(o.zero, 1);
  EXPECT_EQ(o.persist_below_bytes, 65536);
  EXPECT_EQ(o.schedule, PipelineScheduleKind::kZeroBubbleH1);
  EXPECT_EQ(o.dtype, DType::kBF16);
  ASSERT_TRUE(o.lr_min.has_value());
  EXPECT_FLOAT_EQ(*o.lr_min, 1e-4f);
  EXPECT_EQ(command->launch.transport, RankTransport::kShm);
  EXPECT_EQ(command->launch.job_id, "run_7");
  EXPECT_EQ(command->launch.heartbeat_timeout, absl::Seconds(2));
  EXPECT_EQ(command->launch.max_restarts, 2);
  EXPECT_TRUE(command->launch.elastic_dp);
  EXPECT_EQ(command->launch.min_ranks, 2);
  EXPECT_EQ(command->outputs.summary_json, "/tmp/s.json");
}

// Each bad command line: one InvalidArgument naming the flag and the value.
TEST_F(TrainFlagsTest, BadValuesAreOneLineNamingTheFlag) {
  struct Case {
    std::vector<std::pair<const char*, const char*>> flags;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{"pp", "0"}}, "each must be >= 1"},
      {{{"transport", "tcp"}}, "--transport tcp is not threads, shm or mpi"},
      {{{"schedule", "2f2b"}}, "--schedule"},
      {{{"dtype", "f16"}}, "--dtype f16 is not f32 or bf16"},
      {{{"prefetch_depth", "65"}}, "--prefetch_depth 65 is not in [0, 64]"},
      {{{"persist_below", "lots"}}, "--persist_below"},
      {{{"lr_min", "low"}}, "--lr_min=low is not a number"},
      {{{"job_id", "x"}}, "--job_id x is for --transport shm, not threads"},
      {{{"transport", "shm"}, {"job_id", "a/b"}}, "--job_id"},
      {{{"heartbeat_timeout", "soon"}}, "--heartbeat_timeout soon is not a duration"},
      {{{"heartbeat_timeout", "1ms"}}, "--heartbeat_timeout"},
      {{{"max_restarts", "101"}}, "--max_restarts 101 is not in [0, 100]"},
      {{{"max_restarts", "1"}}, "--max_restarts 1 needs --checkpoint_dir"},
      {{{"max_restarts", "1"}, {"checkpoint_dir", "/tmp/c"}},
       "--max_restarts is for --transport shm"},
      {{{"elastic_dp", "true"}}, "--elastic_dp needs --max_restarts"},
      {{{"resume", "true"}}, "--resume needs --checkpoint_dir"},
      {{{"resume", "true"}, {"checkpoint_dir", "/a"}, {"resume_from", "/b"}},
       "--resume continues from --checkpoint_dir"},
      {{{"offload_config", "optimizer=cpu"}, {"offload", "none"}},
       "--offload_config replaces --offload"},
      {{{"cp_comm", "ring"}, {"attention_gflops", "9"}}, "--attention_gflops is for --cp_comm=auto"},
      {{{"cost_model", "/nonexistent/model.txt"}}, "--cost_model /nonexistent/model.txt: "},
      {{{"attention_gflops", "0"}}, "--attention_gflops 0 must be > 0"},
      {{{"cost_model_calibrations", "0"}},
       "--cost_model_calibrations=0: the cache merges 1 calibration or more"},
      {{{"device_attention", "tiled"}},
       "--device_attention tiled is not auto, materialized or flash"},
      {{{"global_batch", "8"}}, "--global_batch and --plan_calibration go with --plan"},
      {{{"plan", "4"}, {"transport", "shm"}}, "--plan is for --transport threads"},
  };
  for (const Case& c : cases) {
    absl::FlagSaver saver;
    std::string flags;
    for (const auto& [name, value] : c.flags) absl::StrAppend(&flags, " --", name, "=", value);
    SCOPED_TRACE(flags);
    Set({});
    for (const auto& [name, value] : c.flags) Set({{name, value}});
    const absl::StatusOr<TrainCommand> command = Command();
    EXPECT_THAT(command.status(),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(c.message)));
    if (!command.ok()) {
      EXPECT_FALSE(absl::StrContains(command.status().message(), "\n"))
          << command.status().message();
    }
  }
}

// --plan chooses the mesh: one the user gave on the command line is refused, even
// at its default value.
TEST_F(TrainFlagsTest, PlanRefusesTheFlagsItChooses) {
  Set({{"plan", "2"}, {"dp", "2"}});
  EXPECT_THAT(Command({"--plan=2", "--dp=2"}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--plan chooses --dp; leave it out")));
}

TEST_F(TrainFlagsTest, CpCommAutoSaysWhy) {
  Set({{"cp", "2"}, {"tp", "1"}, {"pp", "1"}});
  absl::StatusOr<TrainCommand> command = Command();
  LOOM_ASSERT_OK(command.status());
  EXPECT_TRUE(absl::StartsWith(command->cp_comm_why, "auto, ")) << command->cp_comm_why;
  Set({{"cp_comm", "a2a"}});
  command = Command();
  LOOM_ASSERT_OK(command.status());
  EXPECT_EQ(command->options.cp_comm, CpComm::kAllToAll);
  EXPECT_EQ(command->cp_comm_why, "given by --cp_comm");
}

// --cost_model is the model of the job's communicators, with any --cp_comm.
TEST_F(TrainFlagsTest, CostModelFileIsTheJobsModel) {
  const std::string path = ::testing::TempDir() + "/train_flags_cost_model.txt";
  LOOM_ASSERT_OK(CostModel::Default().Save(path));
  Set({{"cost_model", path.c_str()}, {"cost_model_cache", "/somewhere"},
       {"cost_model_calibrations", "1"}});
  absl::StatusOr<TrainCommand> command = Command();
  LOOM_ASSERT_OK(command.status());
  EXPECT_EQ(command->options.cost_model, path);
  EXPECT_EQ(command->options.cost_model_cache, "/somewhere");
  EXPECT_EQ(command->options.cost_model_calibrations, 1);
  LOOM_ASSERT_OK_AND_ASSIGN(const std::optional<CostModel> model,
                            LoadJobCostModel(command->options));
  ASSERT_TRUE(model.has_value());
  EXPECT_EQ(model->Serialize(), CostModel::Default().Serialize());
}

// The usage is generated from the flags: every flag with its real default.
TEST_F(TrainFlagsTest, UsageListsEveryFlagWithItsDefault) {
  const std::string usage = TrainUsage();
  for (const char* expected : {"[--steps=100]", "[--dp=2]", "[--zero=3]", "[--transport=threads]",
                               "[--heartbeat_timeout=10s]", "[--persist_below=0]",
                               "[--summary_json=...]"}) {
    EXPECT_THAT(usage, HasSubstr(expected));
  }
  EXPECT_THAT(usage, ::testing::Not(HasSubstr("--steps=60")));
}

}  // namespace
}  // namespace loom
