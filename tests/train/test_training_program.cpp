// The training program end to end, each run a fresh `tessera` process: exact resume, clear errors
// on bad input without harm to good checkpoints, and saves that survive being killed.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace fs = std::filesystem;
using namespace tessera::testing;

namespace {

fs::path g_root;     // scratch folder of this test binary
fs::path g_dataset;  // a small prepared dataset shared by the tests

// A tiny model that trains in well under a second per step on one thread.
const std::string kModel =
    "--model.n_layer 2 --model.n_head 2 --model.n_embd 32 --model.seq_len 32 "
    "--train.batch_size 4 --train.micro_batch_size 2 --train.eval_every 0 --train.eval_batches 2 "
    "--train.sample_tokens 8 --optim.warmup_steps 2 --log.progress plain --log.every 1";

std::string train_args(const fs::path& out, const std::string& extra) {
  return "train --data.dir " + g_dataset.string() + " --train.out_dir " + out.string() + " " + kModel + " " + extra;
}

std::vector<std::string> train_losses(const fs::path& metrics) {
  std::vector<std::string> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["kind"] == "train") out.push_back(j["step"].dump() + ":" + j["loss"].dump());
  }
  return out;
}

class TrainingProgram : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_root = fs::temp_directory_path() / ("tessera_program_" + std::to_string(::getpid()));
    fs::create_directories(g_root);
    std::ofstream(g_root / "corpus.txt") << make_test_corpus(60000);
    g_dataset = g_root / "data";
    CliResult r = run_tessera("data prepare --input " + (g_root / "corpus.txt").string() + " --out " +
                              g_dataset.string() + " --vocab-size 320 --val-fraction 0.1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(g_root); }
};

TEST_F(TrainingProgram, ResumeInANewProcessContinuesBitwise) {
  const fs::path whole = g_root / "whole", split = g_root / "split";
  CliResult a = run_tessera(train_args(whole, "--train.steps 6"));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_NE(a.output.find("RESULT val_loss="), std::string::npos) << a.output;

  CliResult b1 = run_tessera(train_args(split, "--train.steps 6 --train.exit_after 3"));
  ASSERT_EQ(b1.exit_code, 0) << b1.output;
  ASSERT_TRUE(fs::exists(split / "checkpoints" / "step_00000003" / "manifest.json")) << b1.output;
  CliResult b2 = run_tessera(train_args(split, "--train.steps 6 --checkpoint.resume latest"));
  ASSERT_EQ(b2.exit_code, 0) << b2.output;
  EXPECT_NE(b2.output.find("resumed from"), std::string::npos) << b2.output;

  // Losses of every step, printed with all digits, and the final weights and optimizer state.
  EXPECT_EQ(train_losses(whole / "metrics.jsonl"), train_losses(split / "metrics.jsonl"));
  EXPECT_EQ(train_losses(whole / "metrics.jsonl").size(), 6u);
  for (const char* file : {"model.safetensors", "optimizer.safetensors"}) {
    EXPECT_EQ(read_file((whole / "checkpoints" / "step_00000006" / file).string()),
              read_file((split / "checkpoints" / "step_00000006" / file).string()))
        << file << " differs between the whole run and the resumed one";
  }
  // The run folder has what people look for.
  EXPECT_TRUE(fs::exists(whole / "loss.svg"));
  EXPECT_TRUE(fs::exists(whole / "config.toml"));
  EXPECT_NE(read_file((whole / "loss.svg").string()).find("<polyline"), std::string::npos);

  // A checkpoint samples on its own.
  CliResult s = run_tessera("sample --checkpoint " + (whole / "checkpoints").string() + " --tokens 5 --prompt lord");
  EXPECT_EQ(s.exit_code, 0) << s.output;
  EXPECT_EQ(s.output.rfind("lord", 0), 0u) << s.output;
}

TEST_F(TrainingProgram, BadConfigIsRefusedWithTheKeyAndTheFix) {
  struct Case {
    std::string extra, message;
  } cases[] = {
      {"--train.stpes 3", "unknown key 'train.stpes'; did you mean 'train.steps'?"},
      {"--train.steps many", "'train.steps' must be an integer"},
      {"--train.batch_size 5", "train.batch_size (5) must be a multiple of train.micro_batch_size"},
      {"--model.n_head 5", "divisible by model.n_head"},
      {"--model.vocab_size 100", "vocab"},
      {"--model.seq_len 4096", "4097"},  // the validation split is shorter than one window
  };
  for (const auto& c : cases) {
    CliResult r = run_tessera(train_args(g_root / "bad", "--train.steps 2 " + c.extra));
    EXPECT_NE(r.exit_code, 0) << c.extra;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.extra << "\n" << r.output;
    EXPECT_NE(r.output.find("error:"), std::string::npos) << r.output;
  }
  CliResult r = run_tessera("train --config " + (g_root / "missing.toml").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("cannot open config file"), std::string::npos) << r.output;
}

// Every recompute policy and schedule from the command line logs the losses of none, with dropout;
// every train line carries the step's peak memory by tag, and the activation peak is what the run
// announced it would be.
TEST_F(TrainingProgram, RecomputePoliciesFromTheCommandLineLogTheSameLosses) {
  const std::string common = "--train.steps 3 --model.dropout 0.1 --model.n_layer 3 ";
  const fs::path plain = g_root / "recompute_none";
  CliResult base = run_tessera(train_args(plain, common));
  ASSERT_EQ(base.exit_code, 0) << base.output;
  const std::vector<std::string> want = train_losses(plain / "metrics.jsonl");
  ASSERT_EQ(want.size(), 3u);
  for (const std::string extra :
       {"--memory.recompute full", "--memory.recompute every_k --memory.recompute_every 2",
        "--memory.recompute selective", "--memory.recompute optimal --memory.activation_budget_mb 0.25",
        "--parallel.schedule zb-h1 --memory.recompute full", "--parallel.schedule gpipe"}) {
    const fs::path out = g_root / "recompute_policy";
    fs::remove_all(out);
    CliResult r = run_tessera(train_args(out, common + extra));
    ASSERT_EQ(r.exit_code, 0) << extra << "\n" << r.output;
    EXPECT_NE(r.output.find("execution: schedule"), std::string::npos) << r.output;
    const bool same_order = extra.find("gpipe") == std::string::npos;  // GPipe adds microbatches the other way round
    if (same_order) EXPECT_EQ(train_losses(out / "metrics.jsonl"), want) << extra;
    std::ifstream in(out / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      if (j["kind"] != "train") continue;
      for (const char* tag : {"params", "grads", "optimizer", "activations", "workspace", "comm"}) {
        EXPECT_TRUE(j["memory"].contains(tag)) << tag << " missing in " << line;
      }
      EXPECT_GT(j["memory"]["activations"].get<double>(), 0.0) << line;
      EXPECT_FALSE(j["skipped"].get<bool>());
      const size_t at = r.output.find("predicted activation peak ");
      if (at != std::string::npos && extra.find("zb-h1") == std::string::npos) {
        const double mib = std::stod(r.output.substr(at + 26));
        EXPECT_NEAR(j["memory"]["activations"].get<double>() / 1048576.0, mib, 0.05) << extra;
      }
    }
    EXPECT_NE(r.output.find("| mem "), std::string::npos) << "the log line shows the peak: " << r.output;
  }
}

TEST_F(TrainingProgram, BadRecomputeSettingsAreRefused) {
  struct Case {
    std::string extra, message;
  } cases[] = {
      {"--memory.recompute sometimes", "memory.recompute = 'sometimes' is not known"},
      {"--memory.recompute optimal", "needs memory.activation_budget_mb"},
      {"--memory.recompute optimal --memory.activation_budget_mb 0.001", "is below the"},
      {"--memory.recompute full --memory.recompute_every 2", "read by memory.recompute = \"every_k\" only"},
      {"--memory.activation_budget_mb -1", "memory.activation_budget_mb"},
      {"--parallel.schedule 2bw", "parallel.schedule = '2bw'"},
      {"--parallel.virtual_stages 2", "only the interleaved schedule runs"},
  };
  for (const auto& c : cases) {
    CliResult r = run_tessera(train_args(g_root / "bad_recompute", "--train.steps 2 " + c.extra));
    EXPECT_NE(r.exit_code, 0) << c.extra;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.extra << "\n" << r.output;
  }
}

TEST_F(TrainingProgram, DamagedCheckpointsAreRefusedAndGoodOnesKept) {
  const fs::path run = g_root / "damaged";
  ASSERT_EQ(run_tessera(train_args(run, "--train.steps 4 --checkpoint.every 1 --checkpoint.keep 5")).exit_code, 0);
  const fs::path good = run / "checkpoints" / "step_00000002", flipped = run / "checkpoints" / "step_00000003",
                 missing = run / "checkpoints" / "step_00000004";
  const std::string good_model = read_file((good / "model.safetensors").string());

  auto resume = [&](const fs::path& from, const std::string& extra) {
    return run_tessera(train_args(run, "--train.steps 8 --checkpoint.resume " + from.string() + " " + extra));
  };
  // A flipped byte in the weights.
  {
    std::string bytes = read_file((flipped / "model.safetensors").string());
    bytes[bytes.size() / 2] ^= 0x10;
    std::ofstream(flipped / "model.safetensors", std::ios::binary) << bytes;
    CliResult r = resume(flipped, "");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("is corrupt: checksum"), std::string::npos) << r.output;
  }
  // A missing file.
  {
    fs::remove(missing / "optimizer.safetensors");
    CliResult r = resume(missing, "");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("missing its file 'optimizer.safetensors'"), std::string::npos) << r.output;
  }
  // Saved by another model shape.
  {
    CliResult r = resume(good, "--model.n_layer 3");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("different model shape (model.n_layer: checkpoint 2 vs config 3"), std::string::npos)
        << r.output;
  }
  // None of that touched the good checkpoint, which still resumes.
  EXPECT_EQ(read_file((good / "model.safetensors").string()), good_model);
  CliResult ok = resume(good, "--train.exit_after 1");
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
}

// --checkpoint.resume and sample --checkpoint take a run folder, its checkpoints/ folder or a step
// folder; a missing `latest` falls back to the newest complete checkpoint, and says so.
TEST_F(TrainingProgram, ResumeFindsTheCheckpointFromARunOrCheckpointsFolder) {
  const fs::path run = g_root / "resolve";
  ASSERT_EQ(run_tessera(train_args(run, "--train.steps 6 --train.exit_after 2 --checkpoint.every 1")).exit_code, 0);
  fs::remove(run / "checkpoints" / "latest");
  CliResult r = run_tessera(train_args(run, "--train.steps 6 --train.exit_after 1 --checkpoint.resume latest"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("using the newest complete checkpoint"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step_00000002 at step 2"), std::string::npos) << r.output;
  r = run_tessera(train_args(run, "--train.steps 6 --train.exit_after 1 --checkpoint.resume " + run.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("at step 3"), std::string::npos) << r.output;
  r = run_tessera(train_args(run, "--train.steps 6 --train.exit_after 1 --checkpoint.resume " +
                                      (run / "checkpoints").string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("at step 4"), std::string::npos) << r.output;
  for (const fs::path& given : {run, run / "checkpoints", run / "checkpoints" / "step_00000004"}) {
    CliResult s = run_tessera("sample --checkpoint " + given.string() + " --tokens 2");
    EXPECT_EQ(s.exit_code, 0) << given << "\n" << s.output;
  }
  // A manifest edited by hand is refused, naming what happened.
  const fs::path manifest = run / "checkpoints" / "step_00000005" / "manifest.json";
  std::string text = read_file(manifest.string());
  text.replace(text.find("\"step\": 5"), 9, "\"step\": 4");
  std::ofstream(manifest, std::ios::binary | std::ios::trunc) << text;
  r = run_tessera(train_args(run, "--train.steps 6 --checkpoint.resume latest"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("was modified after it was saved"), std::string::npos) << r.output;
}

TEST_F(TrainingProgram, AProcessKilledDuringSavesLeavesALoadableCheckpoint) {
  const fs::path run = g_root / "killed";
  // A checkpoint every step, so saves take much of the time and kills land inside them.
  const std::string args = train_args(run, "--train.steps 100000 --checkpoint.every 1 --checkpoint.keep 2");
  int loaded = 0;
  for (int attempt = 0; attempt < 6; ++attempt) {
    pid_t pid = spawn_tessera(args + (attempt > 0 ? " --checkpoint.resume latest" : ""),
                              (g_root / "killed.log").string());
    std::this_thread::sleep_for(std::chrono::milliseconds(1500 + 137 * attempt));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!fs::exists(run / "checkpoints" / "latest")) continue;  // killed before the first save
    CliResult s = run_tessera("sample --checkpoint " + (run / "checkpoints").string() + " --tokens 2");
    EXPECT_EQ(s.exit_code, 0) << "after kill " << attempt << ":\n" << s.output << read_file((g_root / "killed.log").string());
    loaded += s.exit_code == 0;
  }
  EXPECT_GE(loaded, 3) << read_file((g_root / "killed.log").string());
  // A leftover partial save (a folder without its manifest) is never taken for a checkpoint.
  fs::create_directories(run / "checkpoints" / "step_99999999");
  std::ofstream(run / "checkpoints" / "step_99999999" / "model.safetensors") << "partial";
  CliResult r = run_tessera("sample --checkpoint " + (run / "checkpoints" / "step_99999999").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("not a complete checkpoint"), std::string::npos) << r.output;
}

TEST_F(TrainingProgram, EmptyCorpusIsRefused) {
  std::ofstream(g_root / "empty.txt") << "";
  CliResult r = run_tessera("data prepare --input " + (g_root / "empty.txt").string() + " --out " +
                            (g_root / "empty_data").string() + " --vocab-size 300");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("empty"), std::string::npos) << r.output;
}

}  // namespace
