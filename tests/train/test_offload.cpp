// Memory tiers through the real program: a run that offloads what its units keep to the nvme tier
// gives bitwise the losses and checkpoints of the same run without it — in one process and under
// dp 2 with ZeRO-3, pp 2 and tp 2 —, measures the activation peak its start line predicts, leaves
// no scratch files behind, and refuses an offload folder it cannot use.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <thread>

#include <cstdlib>
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
    "--train.sample_tokens 0 --optim.warmup_steps 2 --log.progress plain --log.every 1 --log.peak_gflops 1000 "
    "--train.steps 4 --parallel.bucket_mb 0.01";

std::string train_args(const fs::path& out, const std::string& extra) {
  return "train --data.dir " + g_dataset.string() + " --train.out_dir " + out.string() + " " + kModel + " " + extra;
}

class Offload : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("ASAN_OPTIONS", "detect_leaks=0", 0);  // the launched jobs run under mpirun
    g_root = fs::temp_directory_path() / ("tessera_offload_" + std::to_string(::getpid()));
    g_dataset = g_root / "data";
    CliResult r = prepare_test_dataset(g_root.string(), 40000, 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(g_root); }
};

TEST_F(Offload, OffloadedActivationsGiveTheSameRunUnderEveryLayout) {
  // `lower`: offloading lowers the peak. Not where the peak comes with no unit's activations
  // having waited two actions (stage 0 of a pipeline of one block: the first backward needs back
  // what the last forward saved), or inside a recomputed segment.
  struct Layout {
    std::string name;
    int ranks;
    std::string keys;
    std::vector<std::string> files;
    bool lower = true;
  } layouts[] = {
      {"one", 1, "", {"model.safetensors", "optimizer.rank00000.safetensors"}},
      {"dp2_zero3", 2, "--parallel.dp 2 --parallel.zero_stage 3",
       {"model.safetensors", "optimizer.rank00000.safetensors", "optimizer.rank00001.safetensors"}},
      {"pp2", 2, "--parallel.pp 2 --parallel.stage_layers 1 2", {"model.safetensors"}, false},
      {"tp2", 2, "--parallel.tp 2", {"model.safetensors"}},
      {"one_every_k", 1, "--memory.recompute every_k --memory.recompute_every 2", {"model.safetensors"}, false},
  };
  for (const Layout& l : layouts) {
    SCOPED_TRACE(l.name);
    const std::string launcher = l.ranks == 1 ? "" : fmt::format("launch -n {} -- ", l.ranks);
    const fs::path plain = g_root / (l.name + "_plain"), moved = g_root / (l.name + "_offloaded");
    CliResult a = run_tessera(launcher + train_args(plain, l.keys));
    ASSERT_EQ(a.exit_code, 0) << a.output;
    CliResult b = run_tessera(launcher + train_args(moved, l.keys + " --memory.offload_activations nvme"));
    ASSERT_EQ(b.exit_code, 0) << b.output;
    EXPECT_NE(b.output.find("memory tiers ("), std::string::npos) << b.output;
    if (l.lower) EXPECT_NE(b.output.find("wait for their backward in the nvme tier"), std::string::npos) << b.output;
    EXPECT_EQ(train_losses_of((plain / "metrics.jsonl").string()), train_losses_of((moved / "metrics.jsonl").string()));
    for (const std::string& file : l.files) {
      EXPECT_EQ(read_file((plain / "checkpoints" / "step_00000004" / file).string()),
                read_file((moved / "checkpoints" / "step_00000004" / file).string()))
          << file << " differs with the activations offloaded";
    }
    // The activation peak is what the start line predicted (the moves happen at fixed points of the
    // program), and lower than without offloading.
    const nlohmann::json measured = last_train_line((moved / "metrics.jsonl").string());
    const nlohmann::json plain_measured = last_train_line((plain / "metrics.jsonl").string());
    const nlohmann::json ranks =
        l.ranks == 1 ? nlohmann::json::array({measured["memory"]}) : measured["memory_by_rank"];
    const double predicted = predicted_activation_peak(b.output);
    if (l.keys.find("pp") == std::string::npos) {  // a pipeline's start line predicts rank 0's
      EXPECT_NEAR(ranks[0]["activations"].get<double>() / 1048576.0, predicted, 0.05) << b.output;
    }
    // The nvme tier's peak beside the compute tier's, and the resident set, in every step's line.
    EXPECT_TRUE(measured["memory"].contains("nvme")) << measured.dump();
    if (l.lower) EXPECT_GT(measured["memory"]["nvme"].get<double>(), 0.0) << measured.dump();
    EXPECT_FALSE(plain_measured["memory"].contains("nvme")) << plain_measured.dump();
    EXPECT_GT(measured["memory"]["rss"].get<double>(), measured["memory"]["peak"].get<double>()) << measured.dump();
    EXPECT_NE(b.output.find(" | nvme "), std::string::npos) << b.output;
    const double with = measured["memory"]["activations"].get<double>();
    const double without = plain_measured["memory"]["activations"].get<double>();
    if (l.lower) {
      EXPECT_LT(with, without);
    } else {
      EXPECT_LE(with, without);
    }
    // Nothing left in the offload folder but the lock files.
    for (const fs::directory_entry& e : fs::directory_iterator(moved / "offload")) {
      EXPECT_TRUE(e.path().filename().string().starts_with(".lock")) << e.path();
    }
  }
}

// The optimizer's state in the nvme tier, streamed in chunks of a few parameters: the same run, bit
// for bit, for the elementwise optimizers under sharding and the per-tensor ones without; at most
// three chunks of state in compute memory; refused where a chunked step cannot give the same bits.
TEST_F(Offload, AnOffloadedOptimizerStateGivesTheSameRun) {
  const std::string streamed = " --memory.offload_optimizer nvme --memory.offload_chunk_mb 0.05";
  struct Layout {
    std::string name;
    int ranks;
    std::string keys;
    std::vector<std::string> files;
  } layouts[] = {
      {"adamw", 1, "", {"model.safetensors", "optimizer.rank00000.safetensors"}},
      {"adamw_dp2_zero3", 2, "--parallel.dp 2 --parallel.zero_stage 3",
       {"model.safetensors", "optimizer.rank00000.safetensors", "optimizer.rank00001.safetensors"}},
      {"adamw_tp2", 2, "--parallel.tp 2", {"model.safetensors"}},
      {"sgd_pp2", 2, "--optim.name sgd --optim.lr 0.05 --optim.momentum 0.9 --parallel.pp 2 --parallel.stage_layers 1 2",
       {"model.safetensors"}},
      {"lamb", 1, "--optim.name lamb --optim.lr 0.01", {"model.safetensors", "optimizer.rank00000.safetensors"}},
      {"adafactor", 1, "--optim.name adafactor --optim.lr 0.01", {"model.safetensors", "optimizer.rank00000.safetensors"}},
      {"adam8bit", 1, "--optim.name adam8bit", {"model.safetensors", "optimizer.rank00000.safetensors"}},
  };
  for (const Layout& l : layouts) {
    SCOPED_TRACE(l.name);
    const std::string launcher = l.ranks == 1 ? "" : fmt::format("launch -n {} -- ", l.ranks);
    const fs::path plain = g_root / (l.name + "_state_plain"), moved = g_root / (l.name + "_state_offloaded");
    CliResult a = run_tessera(launcher + train_args(plain, l.keys));
    ASSERT_EQ(a.exit_code, 0) << a.output;
    CliResult b = run_tessera(launcher + train_args(moved, l.keys + streamed));
    ASSERT_EQ(b.exit_code, 0) << b.output;
    EXPECT_NE(b.output.find("the optimizer state in the nvme tier, streamed through compute memory in"),
              std::string::npos) << b.output;
    EXPECT_EQ(train_losses_of((plain / "metrics.jsonl").string()), train_losses_of((moved / "metrics.jsonl").string()));
    for (const std::string& file : l.files) {
      EXPECT_EQ(read_file((plain / "checkpoints" / "step_00000004" / file).string()),
                read_file((moved / "checkpoints" / "step_00000004" / file).string()))
          << file << " differs with the optimizer state offloaded";
    }
    const nlohmann::json with = last_train_line((moved / "metrics.jsonl").string())["memory"];
    const nlohmann::json without = last_train_line((plain / "metrics.jsonl").string())["memory"];
    // Three chunks at most in compute memory: less than the whole where the whole is more.
    const double chunk = 0.05 * 1048576.0;
    EXPECT_LE(with["optimizer"].get<double>(), without["optimizer"].get<double>()) << with.dump();
    if (without["optimizer"].get<double>() > 4 * chunk) {
      EXPECT_LT(with["optimizer"].get<double>(), without["optimizer"].get<double>()) << with.dump();
    }
    EXPECT_GE(with["nvme"].get<double>(), without["optimizer"].get<double>()) << with.dump();
  }
  // Stopped and resumed, the offloaded run is the whole one; a run without offloading resumes it.
  const fs::path whole = g_root / "adamw_state_offloaded", split = g_root / "state_split";
  ASSERT_EQ(run_tessera(train_args(split, streamed + " --train.exit_after 2")).exit_code, 3);
  CliResult resumed = run_tessera(train_args(split, streamed + " --checkpoint.resume latest"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(train_losses_of((whole / "metrics.jsonl").string()), train_losses_of((split / "metrics.jsonl").string()));
  const fs::path across = g_root / "state_across";
  ASSERT_EQ(run_tessera(train_args(across, streamed + " --train.exit_after 2")).exit_code, 3);
  CliResult in_memory = run_tessera(train_args(across, "--checkpoint.resume latest --train.allow_changes true"));
  ASSERT_EQ(in_memory.exit_code, 0) << in_memory.output;
  EXPECT_EQ(train_losses_of((whole / "metrics.jsonl").string()), train_losses_of((across / "metrics.jsonl").string()));

  for (const std::string& refused :
       {"--optim.name lamb --parallel.zero_stage 1 --parallel.dp 1", "--optim.name onebit_adam"}) {
    CliResult r = run_tessera(train_args(g_root / "refused_state", refused + streamed));
    EXPECT_NE(r.exit_code, 0) << refused;
    EXPECT_NE(r.output.find("memory.offload_optimizer"), std::string::npos) << r.output;
  }
}

// "n unit forwards recomputed per step" of the start line.
int recomputed_forwards(const std::string& output) {
  const size_t at = output.find(" unit forwards recomputed per step");
  if (at == std::string::npos) return -1;
  size_t begin = output.rfind(' ', at - 1);
  return std::stoi(output.substr(begin + 1, at - begin - 1));
}

// Offloading and recomputation planned together (memory.offload_activations = "auto" with the
// optimal policy): at five budgets between the least one and no recomputation's peak, the plan
// recomputes no more than the optimal policy alone, strictly less where offloading fits what
// recomputation would have rebuilt, and the activation peak measured is the one predicted.
TEST_F(Offload, OffloadAndRecomputationPlannedTogetherRecomputeLess) {
  const std::string model =
      "--model.n_layer 4 --model.n_embd 128 --model.n_head 4 --model.seq_len 64 --model.dropout 0 "
      "--train.batch_size 8 --train.micro_batch_size 8 --train.steps 2";
  const auto run = [&](const std::string& name, const std::string& keys) {
    return run_tessera(train_args(g_root / name, model + " " + keys));
  };
  const CliResult none = run("joint_none", "");
  ASSERT_EQ(none.exit_code, 0) << none.output;
  const double highest = predicted_activation_peak(none.output);
  const CliResult least = run("joint_least", "--memory.recompute optimal --memory.activation_budget_mb 0.01");
  const std::string key = "is below the ";
  ASSERT_NE(least.output.find(key), std::string::npos) << least.output;
  const double lowest = std::stod(least.output.substr(least.output.find(key) + key.size()));
  int strictly_less = 0;
  for (int i = 1; i <= 5; ++i) {
    const double budget = lowest + (highest - lowest) * i / 6.0;
    SCOPED_TRACE(fmt::format("budget {:.3f} MiB", budget));
    const std::string optimal = fmt::format("--memory.recompute optimal --memory.activation_budget_mb {:.3f}", budget);
    const CliResult alone = run(fmt::format("joint_alone_{}", i), optimal);
    ASSERT_EQ(alone.exit_code, 0) << alone.output;
    const CliResult both = run(fmt::format("joint_both_{}", i), optimal + " --memory.offload_activations auto");
    ASSERT_EQ(both.exit_code, 0) << both.output;
    EXPECT_NE(both.output.find("offloading planned with recomputation"), std::string::npos) << both.output;
    const int with = recomputed_forwards(both.output), without = recomputed_forwards(alone.output);
    EXPECT_LE(with, without) << both.output;
    strictly_less += with < without;
    const double measured =
        last_train_line((g_root / fmt::format("joint_both_{}", i) / "metrics.jsonl").string())["memory"]["activations"].get<double>();
    EXPECT_NEAR(measured / 1048576.0, predicted_activation_peak(both.output), 0.05) << both.output;
    EXPECT_LE(measured / 1048576.0, budget + 0.05) << both.output;
    EXPECT_EQ(train_losses_of((g_root / fmt::format("joint_both_{}", i) / "metrics.jsonl").string()),
              train_losses_of((g_root / "joint_none" / "metrics.jsonl").string()))
        << "recomputation and offloading give the same bits";
  }
  EXPECT_GE(strictly_less, 3) << "offloading fitted where recomputation would have rebuilt in at most 2 of 5 budgets";
}

// A run over memory.ram_budget_mb is refused before it allocates, naming the settings that change
// its need and whether each fits.
TEST_F(Offload, ARunOverItsRamBudgetIsRefusedWithTheSettingsThatFit) {
  CliResult r = run_tessera(train_args(g_root / "budget", "--memory.ram_budget_mb 1"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("over memory.ram_budget_mb = 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("memory.offload_activations = \"nvme\" (still"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("memory.recompute = \"full\""), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(g_root / "budget" / "metrics.jsonl")) << "refused before the first step";
  CliResult fits = run_tessera(train_args(g_root / "budget_fits", "--memory.ram_budget_mb 4000 --train.steps 1"));
  EXPECT_EQ(fits.exit_code, 0) << fits.output;
}

// An offload folder on a disk with less room than the nvme tier's peak is refused, naming both.
TEST_F(Offload, AnOffloadFolderWithoutRoomIsRefusedNamingBothSizes) {
  const fs::path small = g_root / "small_disk";
  fs::create_directories(small);
  if (std::system(("mount -t tmpfs -o size=16k tmpfs " + small.string() + " 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "mounting a small tmpfs needs privileges this test does not have";
  }
  CliResult r = run_tessera(train_args(g_root / "no_room", "--memory.offload_activations nvme --memory.offload_dir " +
                                                               small.string()));
  std::system(("umount " + small.string()).c_str());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("is on a disk with"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("holds up to"), std::string::npos) << r.output;
}

TEST_F(Offload, AnOffloadFolderThatCannotServeIsRefusedAtStart) {
  const std::string offload = " --memory.offload_activations nvme --memory.offload_dir ";
  CliResult missing = run_tessera(train_args(g_root / "missing", offload + (g_root / "nowhere").string()));
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("does not exist"), std::string::npos) << missing.output;
  std::ofstream(g_root / "a_file") << "x";
  CliResult file = run_tessera(train_args(g_root / "file", offload + (g_root / "a_file").string()));
  EXPECT_NE(file.exit_code, 0);
  EXPECT_NE(file.output.find("is not a folder"), std::string::npos) << file.output;
  // A folder another live run offloads into.
  const fs::path shared = g_root / "shared_offload";
  fs::create_directories(shared);
  const pid_t first = spawn_tessera(train_args(g_root / "first", offload + shared.string() + " --train.steps 100000"),
                                    (g_root / "first.log").string());
  for (int i = 0; i < 600 && !fs::exists(g_root / "first" / "metrics.jsonl"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  CliResult second = run_tessera(train_args(g_root / "second", offload + shared.string()));
  ::kill(first, SIGKILL);
  ::waitpid(first, nullptr, 0);
  EXPECT_NE(second.exit_code, 0);
  EXPECT_NE(second.output.find("is in use by another live run (process " + std::to_string(first)), std::string::npos)
      << second.output;
  // The killed run left its scratch folder; the next run there removes it.
  CliResult third = run_tessera(train_args(g_root / "third", offload + shared.string() + " --train.steps 1"));
  EXPECT_EQ(third.exit_code, 0) << third.output;
  for (const fs::directory_entry& e : fs::directory_iterator(shared)) {
    EXPECT_TRUE(e.path().filename().string().starts_with(".lock")) << e.path() << " left behind";
  }
  CliResult unread = run_tessera(train_args(g_root / "unread", "--memory.offload_dir " + g_root.string()));
  EXPECT_NE(unread.exit_code, 0) << unread.output;
  EXPECT_NE(unread.output.find("memory.offload_dir"), std::string::npos) << unread.output;
}

}  // namespace
