// Each optimizer's state through a checkpoint: `tessera train` stopped after 3 steps and resumed
// gives the losses and the files (weights and optimizer state) of the uninterrupted 6-step run,
// bit for bit, in one process and under ZeRO-1 with dp 2 (`tessera launch`); and a checkpoint of
// one optimizer refused by another with the fix.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace fs = std::filesystem;
using namespace tessera::testing;

namespace {

fs::path g_root;
fs::path g_dataset;

// n_embd 32: the MLP's 32 × 128 matrices have 4096 elements, so adam8bit quantizes them (two
// blocks of 2048), while the embeddings and smaller matrices keep 32-bit moments.
const std::string kModel =
    "--model.n_layer 2 --model.n_head 2 --model.n_embd 32 --model.seq_len 32 "
    "--train.batch_size 8 --train.micro_batch_size 2 --train.eval_every 0 --train.eval_batches 2 "
    "--train.sample_tokens 4 --optim.warmup_steps 2 --log.progress plain --log.every 1 --log.peak_gflops 1000 "
    "--parallel.bucket_mb 0.01 --train.steps 6";

struct Case {
  std::string name;
  std::string keys;
};

const std::vector<Case> kCases = {
    {"sgd", "--optim.name sgd --optim.lr 0.05 --optim.momentum 0.9 --optim.nesterov true"},
    {"adafactor", "--optim.name adafactor --optim.lr 0.01 --optim.first_moment true"},
    {"adam8bit", "--optim.name adam8bit --optim.lr 0.003"},
    {"lamb", "--optim.name lamb --optim.lr 0.01"},
    {"lars", "--optim.name lars --optim.lr 1.0 --optim.momentum 0.9"},
};

std::string train_args(const fs::path& out, const std::string& extra) {
  return "train --data.dir " + g_dataset.string() + " --train.out_dir " + out.string() + " " + kModel + " " + extra;
}

std::vector<double> losses(const fs::path& metrics) { return train_losses_of(metrics.string()); }

class OptimizerResume : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("ASAN_OPTIONS", "detect_leaks=0", 0);  // the launched jobs run under mpirun
    g_root = fs::temp_directory_path() / ("tessera_optimizer_resume_" + std::to_string(::getpid()));
    g_dataset = g_root / "data";
    CliResult r = prepare_test_dataset(g_root.string(), 40000, 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(g_root); }

  // The whole run, then the same run stopped at step 3 and resumed: equal losses and files.
  static void expect_resume_is_bitwise(const Case& c, const std::string& tag, const std::string& launcher,
                                       const std::string& layout, const std::vector<std::string>& files) {
    const fs::path whole = g_root / (c.name + "_" + tag + "_whole");
    const fs::path split = g_root / (c.name + "_" + tag + "_split");
    const std::string keys = c.keys + " " + layout;
    CliResult a = run_tessera(launcher + train_args(whole, keys));
    ASSERT_EQ(a.exit_code, 0) << a.output;
    CliResult b1 = run_tessera(launcher + train_args(split, keys + " --train.exit_after 3"));
    ASSERT_EQ(b1.exit_code, 3) << "stopped early with a checkpoint\n" << b1.output;
    CliResult b2 = run_tessera(launcher + train_args(split, keys + " --checkpoint.resume latest"));
    ASSERT_EQ(b2.exit_code, 0) << b2.output;
    EXPECT_NE(b2.output.find("resumed from"), std::string::npos) << b2.output;
    const std::vector<double> want = losses(whole / "metrics.jsonl");
    ASSERT_EQ(want.size(), 6u) << a.output;
    EXPECT_LT(want.back(), want.front()) << c.name << ": training did not lower the loss";
    EXPECT_EQ(want, losses(split / "metrics.jsonl")) << c.name << " " << layout;
    for (const std::string& file : files) {
      const std::string w = read_file((whole / "checkpoints" / "step_00000006" / file).string());
      EXPECT_FALSE(w.empty()) << file;
      EXPECT_EQ(w, read_file((split / "checkpoints" / "step_00000006" / file).string()))
          << file << " differs between the whole run and the resumed one (" << c.name << " " << layout << ")";
    }
  }
};

TEST_F(OptimizerResume, OneProcessResumeIsBitwise) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    expect_resume_is_bitwise(c, "one", "", "", {"model.safetensors", "optimizer.rank00000.safetensors"});
  }
}

TEST_F(OptimizerResume, ZeroOneWithTwoRanksResumeIsBitwise) {
  for (const Case& c : kCases) {
    if (c.name == "lars") continue;  // the four the issue names; LARS is covered in one process
    SCOPED_TRACE(c.name);
    expect_resume_is_bitwise(c, "zero1", "launch -n 2 -- ", "--parallel.dp 2 --parallel.zero_stage 1",
                             {"model.safetensors", "optimizer.rank00000.safetensors", "optimizer.rank00001.safetensors"});
  }
}

TEST_F(OptimizerResume, AnotherOptimizerIsRefusedWithTheFix) {
  const fs::path run = g_root / "refused";
  ASSERT_EQ(run_tessera(train_args(run, kCases[0].keys + " --train.exit_after 2")).exit_code, 3);
  CliResult r = run_tessera(train_args(run, "--optim.name lamb --checkpoint.resume latest"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("holds the state of optim.name = \"sgd\" but this run has optim.name = \"lamb\""),
            std::string::npos)
      << r.output;
}

}  // namespace
