// log.profile through the real program: a tiny run writes trace.json (the Chrome trace format) with
// the categories that ran, whose ops and phases fit in their steps, and profile.txt; mixed
// precision shows its casts; a pipeline of two ranks gives two rows; a run without the key writes
// neither; profiling changes no loss.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "train/profile_report.h"

namespace fs = std::filesystem;
using tessera::testing::CliResult;
using tessera::testing::prepare_test_dataset;
using tessera::testing::read_file;
using tessera::testing::run_tessera;
using tessera::testing::train_losses_of;

namespace {

fs::path g_root;

const std::string kModel =
    "--model.n_layer 2 --model.n_head 2 --model.n_embd 32 --model.seq_len 32 --train.batch_size 4 "
    "--train.micro_batch_size 2 --train.steps 4 --train.eval_every 0 --train.eval_batches 1 "
    "--train.sample_tokens 0 --optim.warmup_steps 2 --log.progress plain --log.every 1 --log.peak_gflops 1000";

CliResult train(const fs::path& out, const std::string& extra, int ranks = 1) {
  const std::string launcher = ranks == 1 ? "" : "launch -n " + std::to_string(ranks) + " -- ";
  return run_tessera(launcher + "train --data.dir " + (g_root / "data").string() + " --train.out_dir " + out.string() +
                     " " + kModel + " " + extra);
}

class ProfiledRuns : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("ASAN_OPTIONS", "detect_leaks=0", 0);  // the pipeline run is launched under mpirun
    g_root = fs::temp_directory_path() / ("tessera_profile_" + std::to_string(::getpid()));
    const CliResult r = prepare_test_dataset(g_root.string(), 30000, 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(g_root); }
};

TEST(ProfileWindow, StepsTwoToFourOrTheOnlyStep) {
  using tessera::train::profiles_step;
  EXPECT_FALSE(profiles_step(1, 10));  // the first pays one-time costs
  EXPECT_TRUE(profiles_step(2, 10));
  EXPECT_TRUE(profiles_step(4, 10));
  EXPECT_FALSE(profiles_step(5, 10));
  EXPECT_TRUE(profiles_step(1, 1));
  EXPECT_TRUE(profiles_step(2, 2));
  EXPECT_EQ(tessera::train::profile_window(2, 4), "steps 2-4");
  EXPECT_EQ(tessera::train::profile_window(7, 7), "step 7");
  EXPECT_EQ(tessera::train::profile_window(-1, -1), "no step");
  // A resumed run counts from its first step after the checkpoint.
  const tessera::train::RunProfile resumed(true, 100, 200);
  EXPECT_FALSE(resumed.profiles(101));
  EXPECT_TRUE(resumed.profiles(102));
  EXPECT_TRUE(resumed.profiles(104));
  EXPECT_FALSE(resumed.profiles(105));
  EXPECT_FALSE(tessera::train::RunProfile(false, 0, 10).profiles(2));
}

struct Trace {
  std::vector<nlohmann::json> steps;   // "step" events
  std::vector<nlohmann::json> events;  // the rest of the complete events
  std::set<std::string> categories;
  std::set<int> pids;
};

Trace read_trace(const fs::path& path) {
  const nlohmann::json j = nlohmann::json::parse(read_file(path.string()));  // throws when it is not JSON
  Trace t;
  for (const nlohmann::json& e : j.at("traceEvents")) {
    t.pids.insert(e.at("pid").get<int>());
    if (e.at("ph") != "X") continue;
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
    if (e.at("cat") == "step") {
      t.steps.push_back(e);
    } else {
      t.categories.insert(e.at("cat").get<std::string>());
      t.events.push_back(e);
    }
  }
  return t;
}

bool inside(const nlohmann::json& e, const nlohmann::json& step) {
  return e.at("pid") == step.at("pid") && e.at("args").at("step") == step.at("args").at("step");
}

// Within each step, the ops (which never nest) and the interpreter's phases (which never overlap)
// each take no more than the step.
void expect_within_steps(const Trace& t) {
  for (const nlohmann::json& step : t.steps) {
    const double start = step.at("ts").get<double>(), end = start + step.at("dur").get<double>();
    double ops = 0, phases = 0;
    for (const nlohmann::json& e : t.events) {
      if (!inside(e, step)) continue;
      EXPECT_GE(e.at("ts").get<double>(), start - 1) << e.dump();
      EXPECT_LE(e.at("ts").get<double>() + e.at("dur").get<double>(), end + 1) << e.dump();
      const std::string name = e.at("name");
      if (name.starts_with("ops::")) ops += e.at("dur").get<double>();
      if (name == "forward" || name == "backward" || name == "optimizer step" || name == "pipeline send" ||
          name == "pipeline receive") {
        phases += e.at("dur").get<double>();
      }
    }
    EXPECT_GT(ops, 0.0) << step.dump();
    EXPECT_LE(ops, step.at("dur").get<double>()) << step.dump();
    EXPECT_LE(phases, step.at("dur").get<double>()) << step.dump();
  }
}

TEST_F(ProfiledRuns, OneProcessWritesATraceOfItsCategoriesAndLosesNoBit) {
  const fs::path profiled = g_root / "profiled", plain = g_root / "plain";
  const CliResult a = train(profiled, "--log.profile true");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const CliResult b = train(plain, "");
  ASSERT_EQ(b.exit_code, 0) << b.output;

  // The table at the end of the run and in the run folder.
  EXPECT_NE(a.output.find("profile of rank 0, steps 2-4"), std::string::npos) << a.output;
  EXPECT_NE(a.output.find("gemm"), std::string::npos) << a.output;
  const std::string table = read_file((profiled / "profile.txt").string());
  for (const char* row : {"gemm", "attention", "norm", "elementwise", "cast", "embedding", "loss", "communication",
                          "optimizer", "other", "mean of 3 steps"}) {
    EXPECT_NE(table.find(row), std::string::npos) << row << "\n" << table;
  }

  const Trace t = read_trace(profiled / "trace.json");
  EXPECT_EQ(t.steps.size(), 3u);
  EXPECT_EQ(t.pids, std::set<int>{0});
  for (const char* category : {"gemm", "norm", "optimizer", "attention", "elementwise", "embedding", "loss"}) {
    EXPECT_TRUE(t.categories.contains(category)) << category;
  }
  expect_within_steps(t);

  // Without the key, no trace; with it, the same losses bit for bit.
  EXPECT_FALSE(fs::exists(plain / "trace.json"));
  EXPECT_FALSE(fs::exists(plain / "profile.txt"));
  const std::vector<double> with = train_losses_of((profiled / "metrics.jsonl").string());
  const std::vector<double> without = train_losses_of((plain / "metrics.jsonl").string());
  ASSERT_EQ(with.size(), 4u);
  EXPECT_EQ(with, without);
}

// Under mixed precision the weights' bf16 working copies are made in the step: casts.
TEST_F(ProfiledRuns, MixedPrecisionShowsItsCasts) {
  const fs::path out = g_root / "bf16";
  const CliResult r = train(out, "--log.profile true --precision.compute bf16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Trace t = read_trace(out / "trace.json");
  EXPECT_TRUE(t.categories.contains("cast"));
  EXPECT_TRUE(t.categories.contains("gemm"));
  expect_within_steps(t);
}

TEST_F(ProfiledRuns, EveryPipelineRankHasItsOwnRow) {
  const fs::path out = g_root / "pp2";
  const CliResult r = train(out, "--log.profile true --parallel.pp 2", 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Trace t = read_trace(out / "trace.json");
  EXPECT_EQ(t.pids, (std::set<int>{0, 1}));
  std::map<int, int> steps;
  for (const nlohmann::json& s : t.steps) ++steps[s.at("pid").get<int>()];
  EXPECT_EQ(steps[0], 3);
  EXPECT_EQ(steps[1], 3);
  EXPECT_TRUE(t.categories.contains("communication"));  // the transfers between the stages
  expect_within_steps(t);
  const std::string table = read_file((out / "profile.txt").string());
  EXPECT_NE(table.find("profile of rank 1"), std::string::npos) << table;
}

}  // namespace
