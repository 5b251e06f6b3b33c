// ZeRO-Offload's delayed parameter update through `tessera train`: exact before its start step under
// every layout, one step stale after it (the same run under every layout, as the synchronous runs
// are), resumed bit for bit from a checkpoint, and refused where its update would communicate.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace fs = std::filesystem;
using namespace tessera::testing;

namespace {

fs::path g_root;
fs::path g_dataset;

const std::string kModel =
    "--model.n_layer 3 --model.n_head 2 --model.n_embd 32 --model.seq_len 32 --model.dropout 0.1 "
    "--train.batch_size 8 --train.micro_batch_size 2 --train.eval_every 0 --train.eval_batches 2 "
    "--train.sample_tokens 0 --optim.warmup_steps 2 --optim.lr 0.003 --log.progress plain --log.every 1 "
    "--log.peak_gflops 1000 --train.steps 8 --checkpoint.every 4 --parallel.bucket_mb 0.01";

std::string train_args(const fs::path& out, const std::string& extra) {
  return "train --data.dir " + g_dataset.string() + " --train.out_dir " + out.string() + " " + kModel + " " + extra;
}

class DelayedUpdateRuns : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("ASAN_OPTIONS", "detect_leaks=0", 0);  // the launched jobs run under mpirun
    g_root = fs::temp_directory_path() / ("tessera_delayed_" + std::to_string(::getpid()));
    g_dataset = g_root / "data";
    CliResult r = prepare_test_dataset(g_root.string(), 40000, 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(g_root); }
};

// optim.delayed_update_after: after the checkpoint of step 4 (which applies any update running, so
// that step 5 would read the newest weights whatever ran before).
constexpr int kStart = 4;

// Steps 1..kStart + 1 read weights every update before them made: the same losses as the
// synchronous run, bit for bit. Step kStart + 2 reads the weights before step kStart + 1's update.
TEST_F(DelayedUpdateRuns, ExactBeforeItsStartThenOneStepStaleAlikeUnderEveryLayout) {
  const std::string delayed = fmt::format(" --optim.delayed_update_after {}", kStart);
  struct Layout {
    std::string name;
    int ranks;
    std::string keys;
  } layouts[] = {
      {"one", 1, ""},
      {"dp2_zero1", 2, "--parallel.dp 2 --parallel.zero_stage 1"},
      {"dp2_zero3", 2, "--parallel.dp 2 --parallel.zero_stage 3"},
      {"pp2", 2, "--parallel.pp 2 --parallel.stage_layers 1 2"},
      {"tp2", 2, "--parallel.tp 2"},
      {"one_bf16", 1, "--precision.compute bf16"},
      {"one_offloaded_state", 1, "--memory.offload_optimizer nvme --memory.offload_chunk_mb 0.05"},
  };
  std::vector<double> one_delayed;
  for (const Layout& l : layouts) {
    SCOPED_TRACE(l.name);
    const std::string launcher = l.ranks == 1 ? "" : fmt::format("launch -n {} -- ", l.ranks);
    const fs::path sync = g_root / (l.name + "_sync"), late = g_root / (l.name + "_delayed");
    CliResult a = run_tessera(launcher + train_args(sync, l.keys));
    ASSERT_EQ(a.exit_code, 0) << a.output;
    CliResult b = run_tessera(launcher + train_args(late, l.keys + delayed));
    ASSERT_EQ(b.exit_code, 0) << b.output;
    const std::vector<double> want = train_losses_of((sync / "metrics.jsonl").string());
    const std::vector<double> got = train_losses_of((late / "metrics.jsonl").string());
    ASSERT_EQ(got.size(), 8u);
    ASSERT_EQ(want.size(), 8u);
    for (int i = 0; i <= kStart; ++i) EXPECT_EQ(got[i], want[i]) << "step " << i + 1;
    // One update late: a different loss, by more than the layouts' rounding differs.
    EXPECT_GT(std::abs(got[kStart + 1] - want[kStart + 1]), 1e-4 * want[kStart + 1]);
    if (l.name == "one") {
      one_delayed = got;
    } else if (l.name != "one_bf16") {
      // The delayed run is the same run under every layout, as the synchronous one is.
      ASSERT_EQ(one_delayed.size(), got.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_NEAR(got[i], one_delayed[i], 1e-5 * one_delayed[i]) << "step " << i + 1;
      }
    }
    // The wait for the previous step's update is reported with every step after the start.
    std::ifstream in(late / "metrics.jsonl");
    std::string line;
    int reported = 0;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j["kind"] == "train" && j.contains("update_wait_seconds")) {
        EXPECT_GE(j["update_wait_seconds"].get<double>(), 0.0);
        ++reported;
      }
    }
    EXPECT_EQ(reported, 8);
  }
}

// optim.delayed_update_extrapolate: the first delayed step computes on stale weights as before
// (no update's change is known yet), and from the next, on the weights extrapolated by the last
// update's change: the same losses as the stale run through step kStart + 2, then different ones,
// alike in one process and under ZeRO-2 (the extrapolation is elementwise on each rank's shard).
TEST_F(DelayedUpdateRuns, ExtrapolatedWeightsFromTheSecondDelayedStepAlikeUnderZero) {
  const std::string delayed = fmt::format(" --optim.delayed_update_after {}", kStart);
  const std::string extrapolated = delayed + " --optim.delayed_update_extrapolate true";
  const fs::path stale = g_root / "extrapolation_stale", one = g_root / "extrapolation_one",
                 zero = g_root / "extrapolation_zero2";
  CliResult a = run_tessera(train_args(stale, delayed));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  CliResult b = run_tessera(train_args(one, extrapolated));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_NE(b.output.find("computes on the weights extrapolated by the last update's change"), std::string::npos)
      << b.output;
  CliResult c = run_tessera("launch -n 2 -- " + train_args(zero, "--parallel.dp 2 --parallel.zero_stage 2" + extrapolated));
  ASSERT_EQ(c.exit_code, 0) << c.output;
  const std::vector<double> want = train_losses_of((stale / "metrics.jsonl").string());
  const std::vector<double> got = train_losses_of((one / "metrics.jsonl").string());
  const std::vector<double> sharded = train_losses_of((zero / "metrics.jsonl").string());
  ASSERT_EQ(want.size(), 8u);
  ASSERT_EQ(got.size(), 8u);
  ASSERT_EQ(sharded.size(), 8u);
  for (int i = 0; i <= kStart + 1; ++i) EXPECT_EQ(got[i], want[i]) << "step " << i + 1;
  EXPECT_GT(std::abs(got[kStart + 2] - want[kStart + 2]), 1e-4 * want[kStart + 2]);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(sharded[i], got[i], 1e-5 * got[i]) << "step " << i + 1;

  // Without a delayed update there is nothing to extrapolate: refused at start.
  CliResult refused = run_tessera(train_args(g_root / "extrapolation_refused", "--optim.delayed_update_extrapolate true"));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("optim.delayed_update_after is 0"), std::string::npos) << refused.output;
}

// A checkpoint holds the newest weights (the update running is applied before it is written), and
// a run resumed from it follows the uninterrupted one bit for bit.
TEST_F(DelayedUpdateRuns, AResumedRunFollowsTheUninterruptedOneBitwise) {
  const std::string delayed = fmt::format(" --optim.delayed_update_after {}", kStart);
  for (const std::string& keys : {std::string(""), std::string("--parallel.dp 2 --parallel.zero_stage 2")}) {
    SCOPED_TRACE(keys);
    const std::string launcher = keys.empty() ? "" : "launch -n 2 -- ";
    const std::string tag = keys.empty() ? "one" : "dp2";
    const fs::path whole = g_root / ("whole_" + tag), split = g_root / ("split_" + tag);
    CliResult a = run_tessera(launcher + train_args(whole, keys + delayed));
    ASSERT_EQ(a.exit_code, 0) << a.output;
    CliResult stopped = run_tessera(launcher + train_args(split, keys + delayed + " --train.exit_after 4"));
    ASSERT_EQ(stopped.exit_code, 3) << stopped.output;
    CliResult resumed = run_tessera(launcher + train_args(split, keys + delayed + " --checkpoint.resume latest"));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_EQ(train_losses_of((whole / "metrics.jsonl").string()), train_losses_of((split / "metrics.jsonl").string()));
    EXPECT_EQ(read_file((whole / "checkpoints" / "step_00000008" / "model.safetensors").string()),
              read_file((split / "checkpoints" / "step_00000008" / "model.safetensors").string()));
  }
}

TEST_F(DelayedUpdateRuns, AnUpdateThatWouldCommunicateIsRefused) {
  struct Refused {
    std::string keys;
    std::string says;
  } refused[] = {
      {"--optim.name lamb --optim.lr 0.01 --parallel.zero_stage 1", "its step sums per-tensor statistics"},
      {"--optim.name onebit_adam", "1-bit Adam exchanges its momentum inside its step"},
      {"--parallel.pp 2 --parallel.schedule 2bw", "two steps old"},
      {"--optim.delayed_update_after -1", "optim.delayed_update_after"},
  };
  for (const Refused& r : refused) {
    SCOPED_TRACE(r.keys);
    CliResult c = run_tessera(train_args(g_root / "refused", "--optim.delayed_update_after 2 " + r.keys));
    EXPECT_NE(c.exit_code, 0) << c.output;
    EXPECT_NE(c.output.find(r.says), std::string::npos) << c.output;
  }
  // LAMB alone (no sharding) runs delayed.
  CliResult lamb = run_tessera(train_args(g_root / "lamb", "--optim.name lamb --optim.lr 0.01 --optim.delayed_update_after 2 "
                                                            "--train.steps 4"));
  EXPECT_EQ(lamb.exit_code, 0) << lamb.output;
}

}  // namespace
