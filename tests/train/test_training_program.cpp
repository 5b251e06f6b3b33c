// The training program end to end, each run a fresh `tessera` process: exact resume, clear errors
// on bad input without harm to good checkpoints, and saves that survive being killed.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <fmt/format.h>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "nn/gpt.h"
#include "train/checkpoint.h"

namespace fs = std::filesystem;
using namespace tessera::testing;

namespace {

fs::path g_root;     // scratch folder of this test binary
fs::path g_dataset;  // a small prepared dataset shared by the tests

// A tiny model that trains in well under a second per step on one thread.
const std::string kModel =
    "--model.n_layer 2 --model.n_head 2 --model.n_embd 32 --model.seq_len 32 "
    "--train.batch_size 4 --train.micro_batch_size 2 --train.eval_every 0 --train.eval_batches 2 "
    "--train.sample_tokens 8 --optim.warmup_steps 2 --log.progress plain --log.every 1 --log.peak_gflops 1000";

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
    g_dataset = g_root / "data";
    CliResult r = prepare_test_dataset(g_root.string(), 60000, 320);
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
  ASSERT_EQ(b1.exit_code, 3) << "stopped early with a checkpoint\n" << b1.output;
  ASSERT_TRUE(fs::exists(split / "checkpoints" / "step_00000003" / "manifest.json")) << b1.output;
  CliResult b2 = run_tessera(train_args(split, "--train.steps 6 --checkpoint.resume latest"));
  ASSERT_EQ(b2.exit_code, 0) << b2.output;
  EXPECT_NE(b2.output.find("resumed from"), std::string::npos) << b2.output;

  // Losses of every step, printed with all digits, and the final weights and optimizer state.
  EXPECT_EQ(train_losses(whole / "metrics.jsonl"), train_losses(split / "metrics.jsonl"));
  EXPECT_EQ(train_losses(whole / "metrics.jsonl").size(), 6u);
  // How much of the data the run reads: on the start line, and per step in metrics.jsonl.
  EXPECT_NE(a.output.find("6 steps read the training tokens "), std::string::npos) << a.output;
  {
    std::ifstream in(whole / "metrics.jsonl");
    std::string line;
    int64_t step = 0;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j["kind"] != "train") continue;
      ++step;
      EXPECT_EQ(j["tokens_seen"].get<int64_t>(), step * 4 * 32) << line;
      EXPECT_GT(j["epoch"].get<double>(), 0.0) << line;
    }
  }
  for (const char* file : {"model.safetensors", "optimizer.rank00000.safetensors"}) {
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
      {"--train.stpes 3", "unknown option '--train.stpes'; did you mean '--train.steps'?"},
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
        "--memory.recompute dtr --memory.activation_budget_mb 0.3",
        "--parallel.schedule zb-h1 --memory.recompute full", "--parallel.schedule gpipe"}) {
    const fs::path out = g_root / "recompute_policy";
    fs::remove_all(out);
    CliResult r = run_tessera(train_args(out, common + extra));
    ASSERT_EQ(r.exit_code, 0) << extra << "\n" << r.output;
    EXPECT_NE(r.output.find("execution: schedule"), std::string::npos) << r.output;
    const bool same_order = extra.find("gpipe") == std::string::npos;  // GPipe adds microbatches the other way round
    if (same_order) {
      EXPECT_EQ(train_losses(out / "metrics.jsonl"), want) << extra;
    }
    std::ifstream in(out / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      if (j["kind"] != "train") continue;
      for (const char* tag : {"params", "grads", "optimizer", "activations", "workspace", "comm"}) {
        EXPECT_TRUE(j["memory"].contains(tag)) << tag << " missing in " << line;
      }
      EXPECT_GT(j["memory"]["activations"].get<double>(), 0.0) << line;
      // The time the step spent recomputing: none where nothing is recomputed.
      const bool recomputes = extra.find("full") != std::string::npos || extra.find("every_k") != std::string::npos;
      if (recomputes) {
        EXPECT_GT(j["memory"]["recompute_seconds"].get<double>(), 0.0) << line;
      } else if (extra.find("optimal") == std::string::npos && extra.find("dtr") == std::string::npos) {
        EXPECT_EQ(j["memory"]["recompute_seconds"].get<double>(), 0.0) << line;
      }
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
      {"--memory.recompute dtr", "\"dtr\" needs memory.activation_budget_mb"},
      {"--memory.recompute dtr --memory.activation_budget_mb 0.001", "memory.recompute = \"dtr\" needs at the least"},
      {"--memory.recompute dtr --memory.activation_budget_mb 1 --memory.offload_activations auto",
       "memory.offload_activations = \"auto\""},
      {"--memory.recompute full --memory.activation_budget_mb 1",
       "read by memory.recompute = \"optimal\", \"dtr\" or \"checkmate\" only"},
      {"--memory.recompute checkmate", "\"checkmate\" needs memory.activation_budget_mb"},
      {"--memory.recompute optimal --memory.activation_budget_mb 1 --memory.solver_seconds 5",
       "memory.solver_seconds = 5 is read by memory.recompute = \"checkmate\" only"},
      {"--memory.recompute checkmate --memory.activation_budget_mb 1 --memory.solver_seconds -1",
       "memory.solver_seconds = -1 must be a time limit"},
      {"--memory.recompute full --memory.recompute_every 2", "read by memory.recompute = \"every_k\" only"},
      {"--memory.activation_budget_mb -1", "memory.activation_budget_mb"},
      {"--parallel.schedule 3bw", "parallel.schedule = '3bw' is not known"},
      {"--parallel.virtual_stages 2", "only the interleaved schedule runs"},
      {"--parallel.schedule 2bw --parallel.weight_version oldest", "parallel.weight_version = 'oldest' is not known"},
      {"--parallel.weight_version delayed", "but parallel.schedule = \"1f1b\" keeps one"},
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
    return run_tessera(train_args(run, "--train.steps 8 --train.allow_changes true --checkpoint.resume " +
                                           from.string() + " " + extra));
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
    fs::remove(missing / "optimizer.rank00000.safetensors");
    CliResult r = resume(missing, "");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("missing its file 'optimizer.rank00000.safetensors'"), std::string::npos) << r.output;
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
  EXPECT_EQ(ok.exit_code, 3) << ok.output;
}

// model.activation = "relu2" (squared ReLU) on GPT-2 trains through the program; the resolved
// activation is in the run's config and the checkpoint's model, a resume or init_from with another
// activation is refused as another model, and the same one resumes bitwise.
TEST_F(TrainingProgram, ASquaredReluModelTrainsAndItsActivationTravelsWithTheCheckpoint) {
  const fs::path whole = g_root / "relu2_whole", split = g_root / "relu2_split";
  const std::string relu2 = "--model.activation relu2 --optim.lr 0.01 --train.steps 8 ";
  CliResult a = run_tessera(train_args(whole, relu2));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const std::vector<std::string> losses = train_losses(whole / "metrics.jsonl");
  ASSERT_EQ(losses.size(), 8u);
  const auto loss = [&](size_t i) { return std::stod(losses[i].substr(losses[i].find(':') + 1)); };
  EXPECT_LT(loss(6) + loss(7), loss(0) + loss(1) - 1.0) << "the loss does not fall: " << losses.front() << " .. "
                                                        << losses.back();
  EXPECT_NE(read_file((whole / "config.toml").string()).find("activation = 'relu2'"), std::string::npos);
  const nlohmann::json manifest =
      nlohmann::json::parse(read_file((whole / "checkpoints" / "step_00000008" / "manifest.json").string()));
  EXPECT_EQ(manifest["model"]["activation"], "relu2");

  ASSERT_EQ(run_tessera(train_args(split, relu2 + "--train.exit_after 4")).exit_code, 3);
  for (const std::string& other : {std::string("--model.activation gelu"), std::string()}) {
    CliResult r = run_tessera(train_args(split, "--optim.lr 0.01 --train.steps 8 --checkpoint.resume latest " + other));
    EXPECT_NE(r.exit_code, 0) << other;
    EXPECT_NE(r.output.find("different model shape (model.activation: checkpoint \"relu2\" vs config \"gelu\")"),
              std::string::npos)
        << other << "\n" << r.output;
  }
  CliResult init = run_tessera(train_args(g_root / "relu2_init", "--train.steps 1 --train.init_from " + whole.string()));
  EXPECT_NE(init.exit_code, 0);
  EXPECT_NE(init.output.find("model.activation: checkpoint \"relu2\" vs config \"gelu\""), std::string::npos)
      << init.output;
  CliResult resumed = run_tessera(train_args(split, relu2 + "--checkpoint.resume latest"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(train_losses(split / "metrics.jsonl"), losses);
  EXPECT_EQ(read_file((whole / "checkpoints" / "step_00000008" / "model.safetensors").string()),
            read_file((split / "checkpoints" / "step_00000008" / "model.safetensors").string()));
}

// --checkpoint.resume and sample --checkpoint take a run folder, its checkpoints/ folder or a step
// folder; a missing `latest` falls back to the newest complete checkpoint, and says so.
TEST_F(TrainingProgram, ResumeFindsTheCheckpointFromARunOrCheckpointsFolder) {
  const fs::path run = g_root / "resolve";
  ASSERT_EQ(run_tessera(train_args(run, "--train.steps 6 --train.exit_after 2 --checkpoint.every 1")).exit_code, 3);
  fs::remove(run / "checkpoints" / "latest");
  CliResult r = run_tessera(train_args(run, "--train.steps 6 --train.exit_after 1 --checkpoint.resume latest"));
  ASSERT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("using the newest complete checkpoint"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step_00000002 at step 2"), std::string::npos) << r.output;
  r = run_tessera(train_args(run, "--train.steps 6 --train.exit_after 1 --checkpoint.resume " + run.string()));
  ASSERT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("at step 3"), std::string::npos) << r.output;
  r = run_tessera(train_args(run, "--train.steps 6 --train.exit_after 1 --checkpoint.resume " +
                                      (run / "checkpoints").string()));
  ASSERT_EQ(r.exit_code, 3) << r.output;
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

// checkpoint.at_end = false: a run that trains all its steps writes no checkpoint at its end and
// says so; a run that stops early still writes the one it resumes from, and periodic ones are kept.
TEST_F(TrainingProgram, NoCheckpointAtTheEndWhenAskedButStopsStillWriteOne) {
  const fs::path run = g_root / "no_final_checkpoint";
  CliResult r = run_tessera(train_args(run, "--train.steps 3 --checkpoint.at_end false"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("checkpoint: none (checkpoint.at_end = false)"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(run / "checkpoints" / "step_00000003")) << r.output;

  const fs::path stopped = g_root / "no_final_checkpoint_stopped";
  r = run_tessera(train_args(stopped, "--train.steps 4 --train.exit_after 2 --checkpoint.at_end false"));
  ASSERT_EQ(r.exit_code, 3) << r.output;
  EXPECT_TRUE(fs::exists(stopped / "checkpoints" / "step_00000002")) << r.output;
  // The rest of the run, resumed: its periodic checkpoint is written, the one at its end is not.
  r = run_tessera(train_args(stopped, "--train.steps 4 --checkpoint.every 3 --checkpoint.at_end false "
                                      "--checkpoint.resume latest"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(stopped / "checkpoints" / "step_00000003")) << r.output;
  EXPECT_FALSE(fs::exists(stopped / "checkpoints" / "step_00000004")) << r.output;
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

// A run folder holds one run: a second trainer is refused while the first holds it (naming its
// process and host), an earlier run is neither overwritten by accident nor resumed by surprise,
// and "auto" makes one command for a requeue loop.
TEST_F(TrainingProgram, RunFoldersAreLockedAndNotOverwrittenByAccident) {
  const fs::path run = g_root / "folder_rules";
  const pid_t first = spawn_tessera(train_args(run, "--train.steps 100000 --checkpoint.every 1000000"),
                                    (g_root / "folder_rules.log").string());
  // Wait until the first trainer holds the folder and has logged a step (the metrics file is made
  // before the first step and written after it; an empty one is no earlier run). Under a loaded
  // test run the first step has taken more than 10 s, so allow a minute.
  const auto logged = [&] {
    std::error_code ec;
    return fs::exists(run / "metrics.jsonl", ec) && fs::file_size(run / "metrics.jsonl", ec) > 0;
  };
  for (int i = 0; i < 1200 && !logged(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(logged()) << "the first trainer wrote no metrics within a minute";
  CliResult second = run_tessera(train_args(run, "--train.steps 2 --train.overwrite true"));
  EXPECT_NE(second.exit_code, 0);
  EXPECT_NE(second.output.find(" UTC)"), std::string::npos) << "the holder's start as a date: " << second.output;
  EXPECT_NE(second.output.find("is in use by another trainer (process " + std::to_string(first)), std::string::npos)
      << second.output;
  ::kill(first, SIGKILL);
  int status = 0;
  ::waitpid(first, &status, 0);

  // The folder holds metrics but no checkpoint: a fresh start is refused, overwrite starts over.
  CliResult refused = run_tessera(train_args(run, "--train.steps 2"));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("already holds a run"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("--train.overwrite true"), std::string::npos) << refused.output;
  CliResult over = run_tessera(train_args(run, "--train.steps 2 --train.overwrite true"));
  ASSERT_EQ(over.exit_code, 0) << over.output;
  EXPECT_EQ(train_losses(run / "metrics.jsonl").size(), 2u) << "the earlier run's metrics are gone";

  // auto: resumes when there is a checkpoint, finishes, and then has nothing to do (exit 0).
  CliResult more = run_tessera(train_args(run, "--train.steps 4 --checkpoint.resume auto --train.allow_changes true"));
  ASSERT_EQ(more.exit_code, 0) << more.output;
  EXPECT_NE(more.output.find("resumed from"), std::string::npos) << more.output;
  CliResult again = run_tessera(train_args(run, "--train.steps 4 --checkpoint.resume auto"));
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("nothing to do"), std::string::npos) << again.output;
  CliResult fresh = run_tessera(train_args(g_root / "folder_auto_fresh", "--train.steps 1 --checkpoint.resume auto"));
  EXPECT_EQ(fresh.exit_code, 0) << fresh.output;
  EXPECT_NE(fresh.output.find("starting fresh"), std::string::npos) << fresh.output;
  CliResult both = run_tessera(train_args(run, "--train.steps 4 --train.overwrite true --checkpoint.resume latest"));
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.output.find("set only one of them"), std::string::npos) << both.output;
  std::ofstream(g_root / "a_file") << "x";
  CliResult file = run_tessera(train_args(g_root / "a_file", "--train.steps 1"));
  EXPECT_NE(file.exit_code, 0);
  EXPECT_NE(file.output.find("is a file, not a folder"), std::string::npos) << file.output;
}

std::vector<double> lrs_of(const fs::path& metrics) {
  std::vector<double> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["kind"] == "train") out.push_back(j["lr"].get<double>());
  }
  return out;
}

// A resumed run says what it changes of its checkpoint's config, refuses a change of the
// optimization unless train.allow_changes, and a longer train.steps continues the learning rate's
// decay from where it was, through later resumes bit for bit.
TEST_F(TrainingProgram, ResumeSaysWhatChangedAndRefusesOptimizationChanges) {
  const fs::path whole = g_root / "changes_whole", run = g_root / "changes", longer = g_root / "changes_longer";
  ASSERT_EQ(run_tessera(train_args(whole, "--train.steps 6")).exit_code, 0);
  ASSERT_EQ(run_tessera(train_args(run, "--train.steps 6 --train.exit_after 3 --checkpoint.keep 10")).exit_code, 3);

  CliResult lr = run_tessera(train_args(run, "--train.steps 6 --checkpoint.resume latest --optim.lr 0.01"));
  EXPECT_NE(lr.exit_code, 0);
  EXPECT_NE(lr.output.find("with optim.lr 0.001 -> 0.01: the run would no longer continue"), std::string::npos)
      << lr.output;
  EXPECT_NE(lr.output.find("--train.allow_changes true"), std::string::npos) << lr.output;
  CliResult batch = run_tessera(train_args(run, "--train.steps 6 --checkpoint.resume latest --train.batch_size 8"));
  EXPECT_NE(batch.exit_code, 0);
  EXPECT_NE(batch.output.find("train.batch_size 4 -> 8"), std::string::npos) << batch.output;

  // Settings that do not change the optimization are said and allowed.
  const fs::path other = g_root / "changes_other";
  fs::copy(run, other, fs::copy_options::recursive);
  CliResult fine = run_tessera(train_args(other, "--train.steps 6 --checkpoint.resume latest --log.every 2"));
  ASSERT_EQ(fine.exit_code, 0) << fine.output;
  EXPECT_NE(fine.output.find("resuming with changes to the checkpoint's config: "), std::string::npos) << fine.output;
  EXPECT_NE(fine.output.find("log.every 1 -> 2"), std::string::npos)
      << fine.output;
  EXPECT_EQ(train_losses(other / "metrics.jsonl"), train_losses(whole / "metrics.jsonl"));

  // Twice the steps: the rate goes on from the step-4 rate of the 6-step run, then decays.
  fs::copy(run, longer, fs::copy_options::recursive);
  CliResult extended = run_tessera(train_args(longer, "--train.steps 12 --checkpoint.resume latest "
                                                      "--train.allow_changes true"));
  ASSERT_EQ(extended.exit_code, 0) << extended.output;
  EXPECT_NE(extended.output.find("train.steps 6 -> 12"), std::string::npos) << extended.output;
  EXPECT_NE(extended.output.find("the learning rate continues its decay"), std::string::npos) << extended.output;
  const std::vector<double> base = lrs_of(whole / "metrics.jsonl"), after = lrs_of(longer / "metrics.jsonl");
  ASSERT_EQ(after.size(), 12u);
  EXPECT_EQ(after[3], base[3]) << "the first resumed step keeps the rate it would have had";
  for (size_t i = 4; i < after.size(); ++i) EXPECT_LT(after[i], after[i - 1]) << "step " << i + 1;

  // The same extension stopped and resumed again: the saved restart keeps it bit for bit.
  CliResult part = run_tessera(train_args(run, "--train.steps 12 --checkpoint.resume latest --train.allow_changes true "
                                               "--train.exit_after 4"));
  ASSERT_EQ(part.exit_code, 3) << part.output;
  CliResult rest = run_tessera(train_args(run, "--train.steps 12 --checkpoint.resume latest"));
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  EXPECT_EQ(train_losses(run / "metrics.jsonl"), train_losses(longer / "metrics.jsonl"));
  EXPECT_EQ(lrs_of(run / "metrics.jsonl"), after);
}

// SIGTERM (a scheduler's preemption) and train.max_minutes stop the run at a step boundary with a
// checkpoint and exit code 3; resuming continues it.
TEST_F(TrainingProgram, StopsWithACheckpointOnSignalsAndTimeLimits) {
  const fs::path run = g_root / "stopped";
  const pid_t pid = spawn_tessera(train_args(run, "--train.steps 100000 --checkpoint.every 1000000"),
                                  (g_root / "stopped.log").string());
  for (int i = 0; i < 200 && train_losses(run / "metrics.jsonl").size() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const std::string log = read_file((g_root / "stopped.log").string());
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 3) << log;
  EXPECT_NE(log.find("stopped by signal 15"), std::string::npos) << log;
  const size_t steps = train_losses(run / "metrics.jsonl").size();
  EXPECT_TRUE(fs::exists(run / "checkpoints" / fmt::format("step_{:08d}", steps) / "manifest.json")) << log;
  // A signal skips the evaluation: no RESULT line reports a loss that was never measured.
  EXPECT_EQ(log.find("RESULT val_loss"), std::string::npos) << log;
  CliResult resumed = run_tessera(train_args(run, "--train.steps 100000 --checkpoint.resume latest --train.exit_after 1"));
  EXPECT_EQ(resumed.exit_code, 3) << resumed.output;
  EXPECT_EQ(train_losses(run / "metrics.jsonl").size(), steps + 1) << resumed.output;

  CliResult timed = run_tessera(train_args(g_root / "timed", "--train.steps 100000 --train.max_minutes 0.0001"));
  EXPECT_EQ(timed.exit_code, 3) << timed.output;
  EXPECT_NE(timed.output.find("train.max_minutes"), std::string::npos) << timed.output;
  // The limit is checked after each step, so how many steps fit depends on the machine's speed;
  // the checkpoint must be of the last step taken.
  const size_t timed_steps = train_losses(g_root / "timed" / "metrics.jsonl").size();
  EXPECT_GE(timed_steps, 1u) << timed.output;
  EXPECT_TRUE(fs::exists(g_root / "timed" / "checkpoints" / fmt::format("step_{:08d}", timed_steps) / "manifest.json"))
      << timed.output;
}

// Honest figures: an MFU above 100% is never printed or logged, every metrics line has a
// wall-clock time, elapsed time continues across a resume, and the validation loss does not
// depend on the microbatch size.
TEST_F(TrainingProgram, FiguresInTheLogAreHonest) {
  const fs::path run = g_root / "figures";
  CliResult r = run_tessera(train_args(run, "--train.steps 2 --train.exit_after 1 --log.peak_gflops 0.00001"));
  ASSERT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("MFU n/a"), std::string::npos) << r.output;
  CliResult r2 = run_tessera(train_args(run, "--train.steps 2 --checkpoint.resume latest"));
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  std::ifstream in(run / "metrics.jsonl");
  std::string line;
  std::vector<double> elapsed;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    EXPECT_TRUE(j.contains("time") && j["time"].get<double>() > 1.7e9) << line;
    if (j["kind"] != "train") continue;
    elapsed.push_back(j["elapsed_seconds"].get<double>());
    if (j["step"] == 1) {
      EXPECT_TRUE(j["mfu"].is_null()) << "an impossible MFU is not logged: " << line;
    }
  }
  ASSERT_EQ(elapsed.size(), 2u);
  EXPECT_GT(elapsed[1], elapsed[0]) << "elapsed time continues across the resume";

  auto val_loss = [&](const std::string& micro) {
    const fs::path out = g_root / ("val_micro" + micro);
    CliResult v = run_tessera(train_args(out, "--train.steps 1 --train.micro_batch_size " + micro));
    EXPECT_EQ(v.exit_code, 0) << v.output;
    std::ifstream m(out / "metrics.jsonl");
    std::string l;
    while (std::getline(m, l)) {
      auto j = nlohmann::json::parse(l);
      if (j["kind"] == "val") return j["loss"].get<double>();
    }
    return -1.0;
  };
  const double a = val_loss("1"), b = val_loss("4");
  EXPECT_NEAR(a, b, 1e-5 * a) << "the validation loss must not depend on train.micro_batch_size";
}

// The progress bar is drawn only where a person reads it: under the launcher the ranks are told
// whether its output is a terminal, and "auto" believes that over their own pseudo terminal.
TEST_F(TrainingProgram, TheProgressBarFollowsTheTerminalTheLauncherReports) {
  const std::string args = train_args(g_root / "bar", "--train.steps 2 --train.overwrite true --log.progress auto");
  CliResult plain = run_tessera(args);  // output to a pipe
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(plain.output.find("\033[K"), std::string::npos) << "no escape codes in a log";
  ::setenv("TESSERA_TERMINAL", "1", 1);
  CliResult bar = run_tessera(args);
  ::unsetenv("TESSERA_TERMINAL");
  EXPECT_NE(bar.output.find("\033[K"), std::string::npos) << "a terminal gets the bar";
  ::setenv("TESSERA_TERMINAL", "0", 1);
  CliResult told = run_tessera(args + " --log.progress auto");
  ::unsetenv("TESSERA_TERMINAL");
  EXPECT_EQ(told.output.find("\033[K"), std::string::npos);
}

// A run that cannot fit is refused before it allocates, with the numbers and what to shrink.
TEST_F(TrainingProgram, RunsThatCannotFitAreRefusedAtOnce) {
  for (const std::string extra : {"--model.n_layer 100000 --model.n_embd 1024", "--train.batch_size 1000000 --train.micro_batch_size 1000000"}) {
    const auto t0 = std::chrono::steady_clock::now();
    CliResult r = run_tessera(train_args(g_root / "huge", "--train.steps 1 " + extra));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(r.exit_code, 0) << extra;
    EXPECT_NE(r.output.find("are available"), std::string::npos) << extra << "\n" << r.output;
    EXPECT_NE(r.output.find("train.micro_batch_size"), std::string::npos) << r.output;
    EXPECT_LT(seconds, 20.0) << extra << " must be refused before any work";
  }
  CliResult warm = run_tessera(train_args(g_root / "warm", "--train.steps 1 --optim.warmup_steps 5"));
  EXPECT_EQ(warm.exit_code, 0) << warm.output;
  EXPECT_NE(warm.output.find("warning: optim.warmup_steps = 5 is more than train.steps = 1"), std::string::npos)
      << warm.output;
}

// train.init_from: a new run from a checkpoint's weights alone. Its first step trains on the first
// batch of its own data order with the checkpoint's weights, so its logged loss is the loss of
// those weights on that batch, computed here; the optimizer starts fresh and the step count at 0.
TEST_F(TrainingProgram, InitFromStartsANewRunFromACheckpointsWeights) {
  const fs::path base = g_root / "init_base", tuned = g_root / "init_tuned", fresh = g_root / "init_fresh";
  ASSERT_EQ(run_tessera(train_args(base, "--train.steps 6 --optim.lr 0.01")).exit_code, 0);
  CliResult r = run_tessera(train_args(tuned, "--train.steps 2 --train.seed 5 --train.init_from " + base.string()));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("initialized from the weights of " + (base / "checkpoints" / "step_00000006").string()),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("warning:"), std::string::npos) << "same data, same tokenizer:\n" << r.output;
  const std::vector<std::string> steps = train_losses(tuned / "metrics.jsonl");
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].rfind("1:", 0), 0u) << "a new run starts at step 0";

  // The loss of the base weights on the first batch of seed 5's order.
  const std::string base_step = (base / "checkpoints" / "step_00000006").string();
  const tessera::train::RunConfig config =
      tessera::train::checkpoint_run_config(tessera::train::read_checkpoint_manifest(base_step), base_step);
  tessera::MemoryAccountant memory;
  tessera::nn::GPT model(config.model, memory, 0);
  tessera::train::load_weights(base.string(), config.model, {model.parameters(), model.parameters(), nullptr, {}});
  const tessera::data::Dataset dataset = tessera::data::open_dataset(g_dataset);
  tessera::data::TokenLoader loader(dataset.train, {config.model.seq_len, 4, 5, true});
  const tessera::data::Batch batch = loader.microbatch(0, 1, 0, 1);
  tessera::nn::StepContext step{memory, model.parameters()};
  int64_t count = 0;
  const double want = model.evaluate(step, batch.inputs.data(), batch.targets.data(), static_cast<int>(batch.rows),
                                     config.model.seq_len, &count) / static_cast<double>(count);
  const double got = std::stod(steps[0].substr(2));
  EXPECT_NEAR(got, want, 1e-5 * want) << "the first step must start from the checkpoint's weights";

  // Fresh optimizer state: two steps taken, at step 2.
  const nlohmann::json saved = nlohmann::json::parse(read_file((tuned / "checkpoints" / "step_00000002" / "manifest.json").string()));
  EXPECT_EQ(saved["step"], 2);
  EXPECT_EQ(saved["optimizer"]["steps_taken"], 2);
  EXPECT_EQ(saved["seed"], 5);
  // From scratch, the same first batch costs more: the weights did carry over.
  ASSERT_EQ(run_tessera(train_args(fresh, "--train.steps 1 --train.seed 5")).exit_code, 0);
  EXPECT_GT(std::stod(train_losses(fresh / "metrics.jsonl")[0].substr(2)), got + 0.1);

  // With checkpoint.resume = "auto" (a requeue loop) init_from applies only to the first start.
  const fs::path requeued = g_root / "init_requeued";
  const std::string auto_args = " --train.seed 5 --checkpoint.resume auto --train.init_from " + base.string();
  CliResult first = run_tessera(train_args(requeued, "--train.steps 2" + auto_args));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("initialized from the weights of"), std::string::npos) << first.output;
  EXPECT_EQ(train_losses(requeued / "metrics.jsonl"), steps) << "the same run as without auto";
  CliResult later = run_tessera(train_args(requeued, "--train.steps 3 --train.allow_changes true" + auto_args));
  ASSERT_EQ(later.exit_code, 0) << later.output;
  EXPECT_NE(later.output.find("resumed from"), std::string::npos) << later.output;
  EXPECT_EQ(later.output.find("initialized from"), std::string::npos) << later.output;
}

TEST_F(TrainingProgram, InitFromIsRefusedWithTheReasonAndTheFix) {
  const fs::path base = g_root / "init_source";
  ASSERT_EQ(run_tessera(train_args(base, "--train.steps 1")).exit_code, 0);
  const std::string from = " --train.init_from " + base.string();
  struct Case {
    std::string extra, message;
  } cases[] = {
      {from + " --checkpoint.resume latest", "init_from starts a new run from a checkpoint's weights alone"},
      {from + " --model.n_layer 3", "holds a model of another shape than this run's (model.n_layer: checkpoint 2 vs "
                                    "config 3); starting from its weights needs the same model"},
      {from + " --model.vocab_size 400", "tessera data prepare --tokenizer " +
                                             (base / "checkpoints" / "step_00000001").string() + "/tokenizer.model"},
      {" --train.init_from " + (g_root / "nowhere").string(), "does not exist"},
      {" --train.init_from " + g_dataset.string(), "is not a checkpoint"},
  };
  for (const auto& c : cases) {
    CliResult r = run_tessera(train_args(g_root / "init_bad", "--train.steps 2" + c.extra));
    EXPECT_NE(r.exit_code, 0) << c.extra;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.extra << "\n" << r.output;
  }
}

// `tessera sample`: bad inputs are refused by name before anything is read; temperature 0 is
// greedy (the seed does not matter) and the cache gives the text of rerunning the context.
TEST_F(TrainingProgram, SampleChecksItsInputsAndDecodesGreedily) {
  const fs::path run = g_root / "sampled";
  ASSERT_EQ(run_tessera(train_args(run, "--train.steps 3")).exit_code, 0);
  const std::string sample = "sample --checkpoint " + run.string() + " ";  // a run folder
  struct Case {
    std::string args, message;
  } cases[] = {
      {"--prompt \"$(printf 'ab\\377c')\"", "the --prompt text is not valid UTF-8: the byte 0xFF at offset 2"},
      {"--tokens=-1", "--tokens = -1 must be between 0 and 1000000"},
      {"--tokens 5000000", "--tokens = 5000000 must be between 0 and 1000000"},
      {"--top-k=-2", "--top-k = -2 must be >= 0"},
      {"--temperature inf", "--temperature = inf must be a finite number >= 0"},
      {"--temperature nan", "--temperature = nan must be a finite number >= 0"},
      {"--temperature=-1", "--temperature = -1 must be a finite number >= 0"},
  };
  for (const auto& c : cases) {
    CliResult r = run_tessera(sample + c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.args << "\n" << r.output;
  }
  CliResult a = run_tessera(sample + "--prompt lord --tokens 40 --temperature 0 --seed 1");
  CliResult b = run_tessera(sample + "--prompt lord --tokens 40 --temperature 0 --seed 2");
  CliResult c = run_tessera(sample + "--prompt lord --tokens 40 --temperature 0 --no-kv-cache");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.output.rfind("lord", 0), 0u) << a.output;
  EXPECT_EQ(a.output, b.output);
  EXPECT_EQ(a.output, c.output);
  CliResult zero = run_tessera(sample + "--prompt lord --tokens 0");
  EXPECT_EQ(zero.exit_code, 0) << zero.output;
  EXPECT_EQ(zero.output, "lord\n");
}

TEST_F(TrainingProgram, EmptyCorpusIsRefused) {
  std::ofstream(g_root / "empty.txt") << "";
  CliResult r = run_tessera("data prepare --input " + (g_root / "empty.txt").string() + " --out " +
                            (g_root / "empty_data").string() + " --vocab-size 300");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("empty"), std::string::npos) << r.output;
}

}  // namespace
