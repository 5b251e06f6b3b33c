// `tessera train` with data parallelism, end to end: real jobs started by `tessera launch` on a
// tiny prepared dataset. Losses match the one-process run, a resumed sharded run equals the
// uninterrupted one bitwise, layouts that do not fit are refused with the factors and the fix, and
// a rank that dies ends the whole job with no process left behind.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <cstdlib>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace fs = std::filesystem;
using namespace tessera::testing;

namespace {

fs::path g_root;
fs::path g_dataset;

const std::string kModel =
    "--model.n_layer 2 --model.n_head 2 --model.n_embd 32 --model.seq_len 32 "
    "--train.batch_size 8 --train.micro_batch_size 2 --train.eval_every 0 --train.eval_batches 2 "
    "--train.sample_tokens 4 --optim.warmup_steps 2 --log.progress plain --log.every 1 --log.peak_gflops 1000 --parallel.bucket_mb 0.01";

std::string train_args(const fs::path& out, const std::string& extra) {
  return "train --data.dir " + g_dataset.string() + " --train.out_dir " + out.string() + " " + kModel + " " + extra;
}
std::string launch(int ranks, const fs::path& out, const std::string& extra) {
  return "launch -n " + std::to_string(ranks) + " -- " + train_args(out, extra);
}

std::vector<double> losses(const fs::path& metrics) { return train_losses_of(metrics.string()); }

class ParallelTraining : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The jobs this suite starts run under mpirun; in a sanitizer build, leak checking is off for
    // them as for every MPI test (OpenMPI keeps allocations past MPI_Finalize). Single-process
    // runs of the same code are leak-checked by the training-program tests.
    ::setenv("ASAN_OPTIONS", "detect_leaks=0", 0);
    g_root = fs::temp_directory_path() / ("tessera_parallel_" + std::to_string(::getpid()));
    g_dataset = g_root / "data";
    CliResult r = prepare_test_dataset(g_root.string(), 40000, 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(g_root); }
};

// dp = 2 with every ZeRO stage follows the one-process run on the same global batches.
TEST_F(ParallelTraining, LaunchedRunsMatchTheOneProcessRun) {
  CliResult one = run_tessera(train_args(g_root / "one", "--train.steps 5"));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const std::vector<double> want = losses(g_root / "one" / "metrics.jsonl");
  ASSERT_EQ(want.size(), 5u);
  for (int stage : {0, 2, 3}) {
    const fs::path out = g_root / ("dp2_zero" + std::to_string(stage));
    // ZeRO-3 also recomputes: its gathers follow the program's recomputations.
    CliResult r = run_tessera(launch(2, out, "--train.steps 5 --parallel.dp 2 --parallel.zero_stage " +
                                                 std::to_string(stage) + (stage == 3 ? " --memory.recompute full" : "")));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("parallel: dp 2 with ZeRO stage " + std::to_string(stage)), std::string::npos) << r.output;
    // Rank 0 alone reports.
    EXPECT_EQ(r.output.find("RESULT"), r.output.rfind("RESULT")) << r.output;
    const std::vector<double> got = losses(out / "metrics.jsonl");
    ASSERT_EQ(got.size(), want.size()) << r.output;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-5 * want[i]) << "stage " << stage << " step " << i + 1;
    }
    if (stage >= 1) {
      for (const char* f : {"optimizer.rank00000.safetensors", "optimizer.rank00001.safetensors"}) {
        EXPECT_TRUE(fs::exists(out / "checkpoints" / "step_00000005" / f)) << f;
      }
    }
  }
}

// The budgeted policies that plan beyond a dynamic program through the command line under dp 2
// with ZeRO-3 (whose gathers follow the recomputations) and under pp 2: memory.recompute = "dtr"
// and "checkmate" give the same losses, bit for bit, as no recomputation on the same layout, while
// they do recompute (the start line counts the rerun forwards); Checkmate's start line names the
// solver's outcome.
TEST_F(ParallelTraining, DtrAndCheckmateUnderZero3AndPipelinesLogTheLossesOfNone) {
  const std::string model = "--model.n_layer 4 --train.steps 3 --model.dropout 0.1 ";
  // Budgets between DTR's least and no recomputation's peak of each layout's rank (a pipeline
  // stage holds half the blocks).
  const std::pair<std::string, std::string> layouts[] = {{"--parallel.dp 2 --parallel.zero_stage 3", "0.4"},
                                                         {"--parallel.pp 2", "0.2"}};
  for (const auto& [layout, budget] : layouts) {
    const fs::path none_out = g_root / "budgeted_none";
    fs::remove_all(none_out);
    CliResult none = run_tessera(launch(2, none_out, model + layout));
    ASSERT_EQ(none.exit_code, 0) << layout << "\n" << none.output;
    const std::vector<double> want = losses(none_out / "metrics.jsonl");
    ASSERT_EQ(want.size(), 3u) << none.output;
    for (const std::string policy : {"dtr", "checkmate"}) {
      const fs::path out = g_root / ("budgeted_" + policy);
      fs::remove_all(out);
      CliResult r = run_tessera(launch(
          2, out, model + layout + " --memory.recompute " + policy + " --memory.activation_budget_mb " + budget));
      ASSERT_EQ(r.exit_code, 0) << layout << " " << policy << "\n" << r.output;
      EXPECT_NE(r.output.find("recompute " + policy + " (budget"), std::string::npos) << r.output;
      if (policy == "checkmate") {
        EXPECT_NE(r.output.find("; Checkmate (CBC)"), std::string::npos) << r.output;
      }
      EXPECT_EQ(r.output.find(": 0 unit forwards recomputed per step"), std::string::npos)
          << "the budget should make " << policy << " recompute\n" << r.output;
      EXPECT_EQ(losses(out / "metrics.jsonl"), want) << layout << " " << policy;
    }
  }
}

// A Checkmate run resumed in the same folder reads the schedule its first start solved from the run
// folder's cache instead of solving again; below every schedule's least budget a run is refused
// before training, naming the least.
TEST_F(ParallelTraining, CheckmateRestartReadsItsCachedSchedule) {
  const std::string model = "--model.n_layer 4 --train.steps 3 --model.dropout 0.1 ";
  const fs::path out = g_root / "checkmate_resumed";
  fs::remove_all(out);
  const std::string args = model + "--memory.recompute checkmate --memory.activation_budget_mb 0.4";
  CliResult first = run_tessera(train_args(out, args + " --train.exit_after 2"));
  ASSERT_EQ(first.exit_code, 3) << first.output;
  EXPECT_NE(first.output.find("optimal in"), std::string::npos) << first.output;
  EXPECT_TRUE(fs::exists(out / "remat-cache")) << first.output;
  CliResult resumed = run_tessera(train_args(out, args + " --checkpoint.resume latest"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("read from the cache"), std::string::npos) << resumed.output;
  CliResult small = run_tessera(train_args(g_root / "checkmate_small", model + "--memory.recompute checkmate "
                                                                               "--memory.activation_budget_mb 0.01"));
  EXPECT_NE(small.exit_code, 0);
  EXPECT_NE(small.output.find("memory.recompute = \"checkmate\" needs at the least"), std::string::npos)
      << small.output;
}

// train.init_from under data parallelism and ZeRO: every rank starts from the checkpoint's whole
// weights (ZeRO-3 keeps its shard of them), so the losses follow the one-process run from the
// same checkpoint. The checkpoint itself was saved by a sharded job: weights load into any layout.
TEST_F(ParallelTraining, InitFromUnderDataParallelismFollowsTheOneProcessRun) {
  const fs::path base = g_root / "init_base";
  ASSERT_EQ(run_tessera(launch(2, base, "--train.steps 3 --parallel.dp 2 --parallel.zero_stage 2")).exit_code, 0);
  const std::string init = "--train.steps 3 --train.seed 7 --train.init_from " + base.string();
  CliResult one = run_tessera(train_args(g_root / "init_one", init));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const std::vector<double> want = losses(g_root / "init_one" / "metrics.jsonl");
  ASSERT_EQ(want.size(), 3u);
  for (int stage : {1, 3}) {
    const fs::path out = g_root / ("init_dp2_zero" + std::to_string(stage));
    CliResult r = run_tessera(launch(2, out, init + " --parallel.dp 2 --parallel.zero_stage " + std::to_string(stage)));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("initialized from the weights of"), std::string::npos) << r.output;
    const std::vector<double> got = losses(out / "metrics.jsonl");
    ASSERT_EQ(got.size(), want.size()) << r.output;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-5 * want[i]) << "stage " << stage << " step " << i + 1;
    }
  }
}

// Save shards at step 3, resume in a new job: the same losses and files as the uninterrupted run
// (ZeRO-2: optimizer and gradient shards; ZeRO-3: parameters gathered for the save, resharded on
// load); the checkpoint also resumes under another layout.
TEST_F(ParallelTraining, ResumeUnderMpiIsBitwise) {
  fs::path split;
  for (int stage : {2, 3}) {
    const std::string layout = "--parallel.dp 2 --train.steps 6 --parallel.zero_stage " + std::to_string(stage);
    const fs::path whole = g_root / ("whole" + std::to_string(stage));
    split = g_root / ("split" + std::to_string(stage));
    CliResult a = run_tessera(launch(2, whole, layout));
    ASSERT_EQ(a.exit_code, 0) << a.output;
    CliResult b1 = run_tessera(launch(2, split, layout + " --train.exit_after 3"));
    ASSERT_EQ(b1.exit_code, 3) << "stopped early with a checkpoint\n" << b1.output;
    CliResult b2 = run_tessera(launch(2, split, layout + " --checkpoint.resume latest"));
    ASSERT_EQ(b2.exit_code, 0) << b2.output;
    EXPECT_NE(b2.output.find("resumed from"), std::string::npos) << b2.output;
    EXPECT_EQ(losses(whole / "metrics.jsonl"), losses(split / "metrics.jsonl")) << "stage " << stage;
    for (const char* file : {"model.safetensors", "optimizer.rank00000.safetensors", "optimizer.rank00001.safetensors"}) {
      EXPECT_EQ(read_file((whole / "checkpoints" / "step_00000006" / file).string()),
                read_file((split / "checkpoints" / "step_00000006" / file).string()))
          << file << " differs between the whole run and the resumed one (stage " << stage << ")";
    }
  }
  // Another layout resumes the checkpoint and continues the same run (tests/train/test_resharding.cpp
  // covers the whole matrix): one process, and ZeRO-3 from a ZeRO-2 save.
  split = g_root / "split2";
  const std::string ckpt = (split / "checkpoints" / "step_00000003").string();
  const std::vector<double> want = losses(g_root / "whole2" / "metrics.jsonl");
  CliResult dp1 = run_tessera(train_args(g_root / "other_dp1", "--train.steps 6 --checkpoint.resume " + ckpt));
  ASSERT_EQ(dp1.exit_code, 0) << dp1.output;
  CliResult stage3 = run_tessera(launch(2, g_root / "other_zero3", "--train.steps 6 --parallel.dp 2 --parallel.zero_stage 3 "
                                        "--checkpoint.resume " + ckpt));
  ASSERT_EQ(stage3.exit_code, 0) << stage3.output;
  for (const fs::path& out : {g_root / "other_dp1", g_root / "other_zero3"}) {
    const std::vector<double> got = losses(out / "metrics.jsonl");
    ASSERT_EQ(got.size(), 3u) << out;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i + 3], 1e-5 * want[i + 3]) << out << " step " << i + 4;
  }
}

// parallel.pp: the model cut into stages across processes, alone and with data parallelism, with
// each synchronous schedule; losses follow the one-process run, the split is printed, and a
// resumed pipelined run equals the uninterrupted one bitwise (each stage saves its optimizer state).
TEST_F(ParallelTraining, PipelinedRunsMatchTheOneProcessRunAndResumeBitwise) {
  const std::string model = "--model.n_layer 4 --train.steps 4 --model.dropout 0.1";
  CliResult one = run_tessera(train_args(g_root / "pp_one", model));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const std::vector<double> want = losses(g_root / "pp_one" / "metrics.jsonl");
  ASSERT_EQ(want.size(), 4u);
  struct Layout {
    int ranks;
    std::string args;
  } layouts[] = {
      {2, "--parallel.pp 2"},
      {2, "--parallel.pp 2 --parallel.schedule gpipe --parallel.stage_layers '[1,3]'"},
      {2, "--parallel.pp 2 --parallel.schedule zb-h1 --memory.recompute full"},
      {2, "--parallel.pp 2 --parallel.schedule interleaved --parallel.virtual_stages 2"},
      {4, "--parallel.pp 2 --parallel.dp 2 --train.micro_batch_size 1"},
      {4, "--parallel.pp 2 --parallel.dp 2 --train.micro_batch_size 1 --parallel.zero_stage 1"},
      {4, "--parallel.pp 2 --parallel.dp 2 --train.micro_batch_size 1 --parallel.zero_stage 2 "
          "--parallel.schedule interleaved --parallel.virtual_stages 2"},
  };
  int n = 0;
  for (const Layout& l : layouts) {
    const fs::path out = g_root / ("pp_" + std::to_string(n++));
    CliResult r = run_tessera(launch(l.ranks, out, model + " " + l.args));
    ASSERT_EQ(r.exit_code, 0) << l.args << "\n" << r.output;
    EXPECT_NE(r.output.find("pipeline: pp 2"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("RESULT"), r.output.rfind("RESULT")) << "world rank 0 alone reports\n" << r.output;
    const std::vector<double> got = losses(out / "metrics.jsonl");
    ASSERT_EQ(got.size(), want.size()) << r.output;
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * want[i]) << l.args << " step " << i + 1;
  }
  const std::string pipelined = model + " --parallel.pp 2";
  CliResult given = run_tessera(launch(2, g_root / "pp_given", pipelined + " --parallel.stage_layers '[1,3]'"));
  EXPECT_NE(given.output.find("embedding + block 0 | blocks 1-3 + head (parallel.stage_layers)"), std::string::npos)
      << given.output;

  const fs::path whole = g_root / "pp_whole", split = g_root / "pp_split";
  ASSERT_EQ(run_tessera(launch(2, whole, pipelined)).exit_code, 0);
  ASSERT_EQ(run_tessera(launch(2, split, pipelined + " --train.exit_after 2")).exit_code, 3);
  CliResult resumed = run_tessera(launch(2, split, pipelined + " --checkpoint.resume latest"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(losses(whole / "metrics.jsonl"), losses(split / "metrics.jsonl"));
  for (const char* file : {"model.safetensors", "optimizer.rank00000.safetensors", "optimizer.rank00001.safetensors"}) {
    EXPECT_EQ(read_file((whole / "checkpoints" / "step_00000004" / file).string()),
              read_file((split / "checkpoints" / "step_00000004" / file).string()))
        << file << " differs between the whole run and the resumed one";
  }
  // One process resumes the pipelined checkpoint and follows its run.
  CliResult other = run_tessera(train_args(g_root / "pp_other", model + " --checkpoint.resume " +
                                                                   (split / "checkpoints" / "step_00000002").string()));
  ASSERT_EQ(other.exit_code, 0) << other.output;
  const std::vector<double> continued = losses(g_root / "pp_other" / "metrics.jsonl");
  ASSERT_EQ(continued.size(), 2u) << other.output;
  for (size_t i = 0; i < continued.size(); ++i) EXPECT_NEAR(continued[i], want[i + 2], 1e-5 * want[i + 2]) << "step " << i + 3;
  // With ZeRO each rank of each stage saves its shard of the stage's optimizer state; resuming
  // from them is bitwise too.
  const std::string sharded = model + " --parallel.pp 2 --parallel.dp 2 --train.micro_batch_size 1 "
                                      "--parallel.zero_stage 1";
  const fs::path zero_whole = g_root / "pp_zero_whole", zero_split = g_root / "pp_zero_split";
  ASSERT_EQ(run_tessera(launch(4, zero_whole, sharded)).exit_code, 0);
  ASSERT_EQ(run_tessera(launch(4, zero_split, sharded + " --train.exit_after 2")).exit_code, 3);
  CliResult zero_resumed = run_tessera(launch(4, zero_split, sharded + " --checkpoint.resume latest"));
  ASSERT_EQ(zero_resumed.exit_code, 0) << zero_resumed.output;
  EXPECT_EQ(losses(zero_whole / "metrics.jsonl"), losses(zero_split / "metrics.jsonl"));
  for (const char* file : {"model.safetensors", "optimizer.shard0000.safetensors", "optimizer.shard0003.safetensors"}) {
    EXPECT_EQ(read_file((zero_whole / "checkpoints" / "step_00000004" / file).string()),
              read_file((zero_split / "checkpoints" / "step_00000004" / file).string()))
        << file << " differs between the whole run and the resumed one";
  }
  // Shapes the pipeline cannot run are refused with the key and the fix.
  CliResult zero = run_tessera(launch(2, g_root / "pp_zero", pipelined + " --parallel.zero_stage 3 "
                                                                         "--memory.offload_params nvme "
                                                                         "--memory.offload_optimizer nvme"));
  EXPECT_NE(zero.exit_code, 0);
  EXPECT_NE(zero.output.find("the nvme tier holds a rank's parameter shard as one contiguous range"), std::string::npos)
      << zero.output;
  EXPECT_NE(zero.output.find("use memory.offload_params = \"none\" with parallel.pp > 1"), std::string::npos)
      << zero.output;
  CliResult odd = run_tessera(launch(2, g_root / "pp_odd", pipelined + " --parallel.schedule interleaved "
                                                                         "--parallel.virtual_stages 2 --train.batch_size 6"));
  EXPECT_NE(odd.output.find("to be a multiple of parallel.pp; for example set train.batch_size = 8"), std::string::npos)
      << odd.output;
  CliResult many = run_tessera(launch(2, g_root / "pp_many", pipelined + " --parallel.virtual_stages 3 "
                                                                          "--parallel.schedule interleaved"));
  EXPECT_NE(many.output.find("every stage needs at least one block"), std::string::npos) << many.output;
}

// ZeRO-3 under a pipeline (dp 2 × pp 2, 1F1B): the losses follow the one-process run, a resumed run
// equals the uninterrupted one bit for bit (each rank of each stage saves its shard of the stage's
// optimizer state; the model file is gathered whole), and one process resumes its checkpoint and
// follows the one-process run.
TEST_F(ParallelTraining, Zero3UnderAPipelineResumesBitwiseAndUnderAnotherLayout) {
  const std::string model = "--model.n_layer 4 --train.steps 4 --model.dropout 0.1";
  CliResult one = run_tessera(train_args(g_root / "zero3_pp_one", model));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const std::vector<double> want = losses(g_root / "zero3_pp_one" / "metrics.jsonl");
  ASSERT_EQ(want.size(), 4u);
  const std::string sharded = model + " --parallel.pp 2 --parallel.dp 2 --train.micro_batch_size 1 "
                                      "--parallel.zero_stage 3";
  const fs::path whole = g_root / "zero3_pp_whole", split = g_root / "zero3_pp_split";
  CliResult w = run_tessera(launch(4, whole, sharded));
  ASSERT_EQ(w.exit_code, 0) << w.output;
  const std::vector<double> got = losses(whole / "metrics.jsonl");
  ASSERT_EQ(got.size(), want.size()) << w.output;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * want[i]) << "step " << i + 1;
  ASSERT_EQ(run_tessera(launch(4, split, sharded + " --train.exit_after 2")).exit_code, 3);
  CliResult resumed = run_tessera(launch(4, split, sharded + " --checkpoint.resume latest"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(losses(whole / "metrics.jsonl"), losses(split / "metrics.jsonl"));
  int compared = 0;
  for (const auto& entry : fs::directory_iterator(whole / "checkpoints" / "step_00000004")) {
    if (entry.path().extension() != ".safetensors") continue;
    const fs::path other = split / "checkpoints" / "step_00000004" / entry.path().filename();
    EXPECT_EQ(read_file(entry.path().string()), read_file(other.string()))
        << entry.path().filename() << " differs between the whole run and the resumed one";
    ++compared;
  }
  EXPECT_GE(compared, 5) << "the model file and the four ranks' optimizer shards";
  CliResult other = run_tessera(train_args(g_root / "zero3_pp_other", model + " --checkpoint.resume " +
                                                                         (split / "checkpoints" / "step_00000002").string()));
  ASSERT_EQ(other.exit_code, 0) << other.output;
  const std::vector<double> continued = losses(g_root / "zero3_pp_other" / "metrics.jsonl");
  ASSERT_EQ(continued.size(), 2u) << other.output;
  for (size_t i = 0; i < continued.size(); ++i) EXPECT_NEAR(continued[i], want[i + 2], 1e-5 * want[i + 2]) << "step " << i + 3;
}

// parallel.tp: tensor-parallel runs, alone and with data parallelism (ZeRO 0 and 2) and pipelining,
// with and without sequence parallelism, follow the one-process run; the plan is printed at start;
// a resumed run equals the uninterrupted one bitwise, its model file holds the whole parameters (the
// one-process sampler reads it) and one process resumes it; a tp that does not split the model, or
// sequence parallelism without tp or with a sequence tp does not divide, is refused with the fix.
TEST_F(ParallelTraining, TensorParallelRunsMatchTheOneProcessRunAndResumeBitwise) {
  const std::string model = "--train.steps 4 --model.dropout 0.1";
  CliResult one = run_tessera(train_args(g_root / "tp_one", model));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const std::vector<double> want = losses(g_root / "tp_one" / "metrics.jsonl");
  ASSERT_EQ(want.size(), 4u);
  struct Layout {
    int ranks;
    std::string args;
  } layouts[] = {
      {2, "--parallel.tp 2"},
      {4, "--parallel.tp 2 --parallel.dp 2"},
      {4, "--parallel.tp 2 --parallel.dp 2 --parallel.zero_stage 2"},
      {4, "--parallel.tp 2 --parallel.pp 2"},
      {2, "--parallel.tp 2 --parallel.sp true"},
      {4, "--parallel.tp 2 --parallel.dp 2 --parallel.zero_stage 1 --parallel.sp true"},
  };
  int n = 0;
  for (const Layout& l : layouts) {
    const fs::path out = g_root / ("tp_" + std::to_string(n++));
    CliResult r = run_tessera(launch(l.ranks, out, model + " " + l.args));
    ASSERT_EQ(r.exit_code, 0) << l.args << "\n" << r.output;
    EXPECT_NE(r.output.find("tensor parallel: tp 2; embed.tokens vocabulary rows, attn.qkv column (by heads)"),
              std::string::npos) << r.output;
    // A GPT-2 model's plan names its own MLP layers, not Llama's, and no head (tied).
    EXPECT_EQ(r.output.find("mlp.gate"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find(", head "), std::string::npos) << r.output;
    const std::vector<double> got = losses(out / "metrics.jsonl");
    ASSERT_EQ(got.size(), want.size()) << r.output;
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * want[i]) << l.args << " step " << i + 1;
  }
  const std::string split_args = model + " --parallel.tp 2 --parallel.sp true";
  const fs::path whole = g_root / "tp_whole", split = g_root / "tp_split";
  ASSERT_EQ(run_tessera(launch(2, whole, split_args)).exit_code, 0);
  ASSERT_EQ(run_tessera(launch(2, split, split_args + " --train.exit_after 2")).exit_code, 3);
  CliResult resumed = run_tessera(launch(2, split, split_args + " --checkpoint.resume latest"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(losses(whole / "metrics.jsonl"), losses(split / "metrics.jsonl"));
  for (const char* file : {"model.safetensors", "optimizer.rank00000.safetensors", "optimizer.rank00001.safetensors"}) {
    const std::string a = read_file((whole / "checkpoints" / "step_00000004" / file).string());
    EXPECT_FALSE(a.empty()) << file;
    EXPECT_EQ(a, read_file((split / "checkpoints" / "step_00000004" / file).string()))
        << file << " differs between the whole run and the resumed one";
  }
  CliResult sampled = run_tessera("sample --checkpoint " + (whole / "checkpoints" / "step_00000004").string() +
                                  " --tokens 4");
  EXPECT_EQ(sampled.exit_code, 0) << sampled.output;
  // One process resumes the tensor-parallel checkpoint and follows its run.
  CliResult other = run_tessera(train_args(g_root / "tp_other", model + " --checkpoint.resume " +
                                                                   (split / "checkpoints" / "step_00000002").string()));
  ASSERT_EQ(other.exit_code, 0) << other.output;
  const std::vector<double> tp_want = losses(whole / "metrics.jsonl");
  const std::vector<double> continued = losses(g_root / "tp_other" / "metrics.jsonl");
  ASSERT_EQ(continued.size() + 2, tp_want.size()) << other.output;
  for (size_t i = 0; i < continued.size(); ++i) {
    EXPECT_NEAR(continued[i], tp_want[i + 2], 1e-5 * tp_want[i + 2]) << "step " << i + 3;
  }
  CliResult three = run_tessera(launch(2, g_root / "tp_three", model + " --parallel.tp 3 --parallel.dp 1"));
  EXPECT_NE(three.exit_code, 0);
  EXPECT_NE(three.output.find("parallel.tp = 3 does not split the model: model.n_head = 2 heads do not divide among 3 "
                              "ranks"),
            std::string::npos) << three.output;
  EXPECT_NE(three.output.find("tp values that work: 1, 2"), std::string::npos) << three.output;
  CliResult alone = run_tessera(train_args(g_root / "sp_alone", model + " --parallel.sp true"));
  EXPECT_NE(alone.exit_code, 0);
  EXPECT_NE(alone.output.find("parallel.sp = true shards the sequence over the tensor-parallel ranks, but "
                              "parallel.tp = 1; set parallel.tp to 2 or more (values that work: 2)"),
            std::string::npos) << alone.output;
  CliResult odd = run_tessera(launch(2, g_root / "sp_odd", model + " --parallel.tp 2 --parallel.sp true "
                                                                   "--model.seq_len 15"));
  EXPECT_NE(odd.exit_code, 0);
  EXPECT_NE(odd.output.find("model.seq_len = 15 does not divide by 2; set model.seq_len to a multiple of 2 (for "
                            "example 16)"),
            std::string::npos) << odd.output;
}

// parallel.compression: each rank saves its compressor's state (error feedback, PowerSGD's Q, the
// step its rounding is keyed by), so a resumed compressed run equals the uninterrupted one bitwise;
// keys the chosen method does not read, and resuming without the state, are refused.
// Under expert parallelism the experts' compressor keeps its own error feedback and PowerSGD's
// warm start, and 1-bit Adam the server error of the experts' exchange: a run stopped after step 2
// and resumed equals the uninterrupted one bit for bit only if checkpoints carry the experts' state
// beside the dense one's (dp 4 × ep 2, the experts over edp of 2).
TEST_F(ParallelTraining, CompressedExpertParallelRunsResumeBitwise) {
  struct Method {
    std::string keys, experts_state;  // the settings, and the name of the experts' state in the file
  };
  for (const Method& method : {Method{"--compression.warmup_steps 1 --parallel.compression powersgd --compression.rank 2",
                                      "experts."},
                               Method{"--optim.name onebit_adam --optim.freeze_step 1", "onebit_adam.exchange1."}}) {
    const std::string layout = "--model.moe_experts 4 --model.moe_top_k 2 --parallel.dp 4 --parallel.ep 2 "
                               "--train.steps 4 --train.batch_size 8 --train.micro_batch_size 2 " + method.keys;
    const fs::path whole = g_root / "compressed_ep_whole", split = g_root / "compressed_ep_split";
    fs::remove_all(whole);
    fs::remove_all(split);
    CliResult a = run_tessera(launch(4, whole, layout));
    ASSERT_EQ(a.exit_code, 0) << a.output;
    ASSERT_EQ(run_tessera(launch(4, split, layout + " --train.exit_after 2")).exit_code, 3);
    CliResult b = run_tessera(launch(4, split, layout + " --checkpoint.resume latest"));
    ASSERT_EQ(b.exit_code, 0) << b.output;
    EXPECT_EQ(losses(whole / "metrics.jsonl"), losses(split / "metrics.jsonl")) << method.keys;
    for (int rank = 0; rank < 4; ++rank) {
      const std::string file = fmt::format("compression.rank{:05d}.safetensors", rank);
      const std::string state = read_file((whole / "checkpoints" / "step_00000004" / file).string());
      EXPECT_NE(state.find(method.experts_state), std::string::npos)
          << file << " holds no state of the experts' exchange (" << method.keys << ")";
      EXPECT_EQ(state, read_file((split / "checkpoints" / "step_00000004" / file).string()))
          << file << " differs between the whole run and the resumed one (" << method.keys << ")";
    }
  }
}

TEST_F(ParallelTraining, CompressedRunsResumeBitwise) {
  for (const std::string method : {"--compression.warmup_steps 1 --parallel.compression qsgd",
                                   "--compression.warmup_steps 1 --parallel.compression powersgd --compression.rank 2",
                                   "--optim.name onebit_adam --optim.freeze_step 1",
                                   "--compression.warmup_steps 1 --parallel.compression topk --compression.ratio 0.05 "
                                   "--parallel.zero_stage 1"}) {
    const std::string layout = "--parallel.dp 2 --train.steps 4 " + method;
    const fs::path whole = g_root / "compressed_whole", split = g_root / "compressed_split";
    fs::remove_all(whole);
    fs::remove_all(split);
    CliResult a = run_tessera(launch(2, whole, layout));
    ASSERT_EQ(a.exit_code, 0) << a.output;
    ASSERT_EQ(run_tessera(launch(2, split, layout + " --train.exit_after 2")).exit_code, 3);
    CliResult b = run_tessera(launch(2, split, layout + " --checkpoint.resume latest"));
    ASSERT_EQ(b.exit_code, 0) << b.output;
    EXPECT_EQ(losses(whole / "metrics.jsonl"), losses(split / "metrics.jsonl")) << method;
    for (const char* file : {"model.safetensors", "compression.rank00000.safetensors", "compression.rank00001.safetensors"}) {
      EXPECT_EQ(read_file((whole / "checkpoints" / "step_00000004" / file).string()),
                read_file((split / "checkpoints" / "step_00000004" / file).string()))
          << file << " differs between the whole run and the resumed one (" << method << ")";
    }
  }
  CliResult dense = run_tessera(launch(2, g_root / "compressed_dense", "--parallel.dp 2 --parallel.zero_stage 1 --train.steps 5 "
                                                                       "--train.allow_changes true --checkpoint.resume " +
                                                                       (g_root / "compressed_split").string()));
  ASSERT_EQ(dense.exit_code, 0) << dense.output;
  EXPECT_NE(dense.output.find("without its per-rank error feedback (of gradient compression or 1-bit Adam, the error not yet sent)"), std::string::npos)
      << dense.output;
  CliResult other = run_tessera(launch(2, g_root / "compressed_other", "--parallel.dp 2 --train.steps 5 --parallel.zero_stage 1 "
                                       "--parallel.compression onebit --train.allow_changes true --checkpoint.resume " +
                                       (g_root / "compressed_split").string()));
  EXPECT_NE(other.exit_code, 0);
  EXPECT_NE(other.output.find("holds the state of 'topk', but this run uses 'onebit'"), std::string::npos)
      << other.output;
  CliResult unread = run_tessera(train_args(g_root / "compressed_bad", "--train.steps 2 --parallel.compression topk "
                                                                       "--compression.rank 2"));
  EXPECT_NE(unread.exit_code, 0);
  EXPECT_NE(unread.output.find("compression.rank is read by parallel.compression = \"powersgd\" only"), std::string::npos)
      << unread.output;
  CliResult sharded = run_tessera(train_args(g_root / "compressed_bad", "--train.steps 2 --optim.name onebit_adam "
                                                                        "--parallel.zero_stage 1"));
  EXPECT_NE(sharded.exit_code, 0);
  EXPECT_NE(sharded.output.find("optim.name = \"onebit_adam\" with parallel.zero_stage = 1"), std::string::npos)
      << sharded.output;
  CliResult unknown = run_tessera(train_args(g_root / "compressed_bad", "--train.steps 2 --parallel.compression gzip"));
  EXPECT_NE(unknown.output.find("parallel.compression = 'gzip' is not known"), std::string::npos) << unknown.output;
}

// precision.compute = bf16 and fp16 through the CLI: the train losses track the one-process fp32 run
// within 2% (one process, and dp 2 with ZeRO 2 and 16-bit gradient messages); the start line says
// what runs; metrics.jsonl carries the loss scale; an fp16 run stopped at step 2 and resumed equals
// the whole run bitwise, its loss scale travelling in the checkpoint.
TEST_F(ParallelTraining, MixedPrecisionRunsTrackFp32AndResumeBitwise) {
  CliResult fp32 = run_tessera(train_args(g_root / "precision_fp32", "--train.steps 4"));
  ASSERT_EQ(fp32.exit_code, 0) << fp32.output;
  const std::vector<double> want = losses(g_root / "precision_fp32" / "metrics.jsonl");
  ASSERT_EQ(want.size(), 4u);
  auto expect_tracks = [&](const fs::path& run, const std::string& what) {
    const std::vector<double> got = losses(run / "metrics.jsonl");
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 0.02 * want[i]) << what << " step " << i + 1;
  };
  for (const std::string compute : {"bf16", "fp16"}) {
    const fs::path one = g_root / ("precision_one_" + compute);
    CliResult r = run_tessera(train_args(one, "--train.steps 4 --precision.compute " + compute));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("precision: " + compute + " compute, f32 master weights"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("16-bit matmuls by "), std::string::npos) << r.output;
    expect_tracks(one, compute + " one process");
    const fs::path dp = g_root / ("precision_dp_" + compute);
    CliResult d = run_tessera(launch(2, dp, "--train.steps 4 --parallel.dp 2 --parallel.zero_stage 2 "
                                            "--parallel.grad_dtype bf16 --precision.compute " + compute));
    ASSERT_EQ(d.exit_code, 0) << d.output;
    expect_tracks(dp, compute + " dp 2 ZeRO 2");
  }
  // The scale in the metrics, then a resume that scales exactly as the whole run does.
  const std::string fp16 = "--train.steps 4 --precision.compute fp16 --precision.init_scale 1024 "
                           "--precision.growth_interval 3";
  const fs::path whole = g_root / "precision_whole", split = g_root / "precision_split";
  ASSERT_EQ(run_tessera(train_args(whole, fp16)).exit_code, 0);
  std::ifstream in(whole / "metrics.jsonl");
  std::vector<double> scales;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.at("kind") == "train") scales.push_back(j.at("loss_scale").get<double>());
  }
  EXPECT_EQ(scales, (std::vector<double>{1024, 1024, 1024, 2048}));
  ASSERT_EQ(run_tessera(train_args(split, fp16 + " --train.exit_after 2")).exit_code, 3);
  CliResult resumed = run_tessera(train_args(split, fp16 + " --checkpoint.resume latest"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(losses(whole / "metrics.jsonl"), losses(split / "metrics.jsonl"));
  EXPECT_EQ(read_file((whole / "checkpoints" / "step_00000004" / "model.safetensors").string()),
            read_file((split / "checkpoints" / "step_00000004" / "model.safetensors").string()));
  const std::string manifest = read_file((split / "checkpoints" / "step_00000002" / "manifest.json").string());
  EXPECT_NE(manifest.find("\"loss_scale\""), std::string::npos) << manifest;
}

// An MoE model in bf16 through the CLI, its experts split over ep 2: the train losses track the fp32
// run of the same layout within 2%, and a run stopped at step 2 and resumed equals the whole run
// bitwise (the experts gathered into model.safetensors).
TEST_F(ParallelTraining, MoeInBf16TracksFp32AndResumesBitwise) {
  const std::string moe = "--train.steps 4 --model.moe_experts 4 --model.moe_top_k 2 --parallel.dp 2 --parallel.ep 2";
  CliResult fp32 = run_tessera(launch(2, g_root / "moe_fp32", moe));
  ASSERT_EQ(fp32.exit_code, 0) << fp32.output;
  const std::vector<double> want = losses(g_root / "moe_fp32" / "metrics.jsonl");
  ASSERT_EQ(want.size(), 4u);
  const std::string bf16 = moe + " --precision.compute bf16";
  const fs::path whole = g_root / "moe_bf16_whole", split = g_root / "moe_bf16_split";
  CliResult w = run_tessera(launch(2, whole, bf16));
  ASSERT_EQ(w.exit_code, 0) << w.output;
  EXPECT_NE(w.output.find("precision: bf16 compute, f32 master weights"), std::string::npos) << w.output;
  const std::vector<double> got = losses(whole / "metrics.jsonl");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 0.02 * want[i]) << "step " << i + 1;
  ASSERT_EQ(run_tessera(launch(2, split, bf16 + " --train.exit_after 2")).exit_code, 3);
  CliResult resumed = run_tessera(launch(2, split, bf16 + " --checkpoint.resume latest"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(losses(whole / "metrics.jsonl"), losses(split / "metrics.jsonl"));
  EXPECT_EQ(read_file((whole / "checkpoints" / "step_00000004" / "model.safetensors").string()),
            read_file((split / "checkpoints" / "step_00000004" / "model.safetensors").string()));
}

// parallel.schedule = "2bw" with the uniform delay (parallel.weight_version = "delayed", the same
// arithmetic on any number of stages): the pipeline drains only where the trainer needs it (here
// every third step, at the progress line), yet every step's loss follows the one-process 2BW run
// that drains at every step; a run stopped at step 2 and resumed equals the uninterrupted one
// bitwise, the previous weight version travelling in the checkpoint. A checkpoint without it is
// refused.
TEST_F(ParallelTraining, TwoBWRunsFollowTheOneProcessRunAndResumeBitwise) {
  const std::string model = "--model.n_layer 4 --train.steps 6 --model.dropout 0.1 --parallel.schedule 2bw "
                            "--parallel.weight_version delayed";
  CliResult one = run_tessera(train_args(g_root / "bw_one", model));
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const std::vector<double> want = losses(g_root / "bw_one" / "metrics.jsonl");
  ASSERT_EQ(want.size(), 6u);
  const std::string pipelined = model + " --parallel.pp 2 --log.every 3";
  const fs::path whole = g_root / "bw_whole", split = g_root / "bw_split";
  CliResult a = run_tessera(launch(2, whole, pipelined));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const std::vector<double> got = losses(whole / "metrics.jsonl");
  ASSERT_EQ(got.size(), want.size()) << a.output;
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5 * want[i]) << "step " << i + 1;

  ASSERT_EQ(run_tessera(launch(2, split, pipelined + " --train.exit_after 2")).exit_code, 3);
  CliResult resumed = run_tessera(launch(2, split, pipelined + " --checkpoint.resume latest"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(losses(whole / "metrics.jsonl"), losses(split / "metrics.jsonl"));
  // The previous weight version travels in the optimizer files.
  for (const char* file : {"model.safetensors", "optimizer.rank00000.safetensors", "optimizer.rank00001.safetensors"}) {
    EXPECT_EQ(read_file((whole / "checkpoints" / "step_00000006" / file).string()),
              read_file((split / "checkpoints" / "step_00000006" / file).string()))
        << file << " differs between the whole run and the resumed one";
  }
  // A 1F1B checkpoint holds no previous version for 2BW's next batch to read.
  const fs::path flushing = g_root / "bw_flushing";
  const std::string one_f_one_b = "--model.n_layer 4 --train.steps 2 --parallel.pp 2";
  ASSERT_EQ(run_tessera(launch(2, flushing, one_f_one_b)).exit_code, 0);
  CliResult refused = run_tessera(launch(2, flushing, "--model.n_layer 4 --train.steps 4 --parallel.pp 2 "
                                                      "--parallel.schedule 2bw --train.allow_changes true --checkpoint.resume latest"));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("holds no previous weight version"), std::string::npos) << refused.output;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// mpirun's own words when a rank exits non-zero or aborts; `tessera launch` says the job's outcome
// without them.
void expect_no_mpirun_abort_text(const CliResult& r) {
  for (const char* text : {"Primary job", "mpirun detected", "ORTE_ERROR_LOG", "MPI_ABORT", "aborted"}) {
    EXPECT_EQ(r.output.find(text), std::string::npos) << "'" << text << "' in:\n" << r.output;
  }
}

TEST_F(ParallelTraining, LayoutsThatDoNotFitTheWorldAreRefused) {
  CliResult r = run_tessera(launch(2, g_root / "bad", "--train.steps 2 --parallel.dp 4"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(count(r.output, "dp 4 × pp 1 × tp 1 = 4 ≠ world size 2"), 1u) << r.output;
  EXPECT_NE(r.output.find("tessera launch -n 4 -- train"), std::string::npos) << r.output;
  expect_no_mpirun_abort_text(r);
  CliResult alone = run_tessera(train_args(g_root / "bad", "--train.steps 2 --parallel.dp 2"));
  EXPECT_NE(alone.exit_code, 0);
  EXPECT_NE(alone.output.find("≠ world size 1"), std::string::npos) << alone.output;
  EXPECT_NE(alone.output.find("set parallel.dp × parallel.tp × parallel.pp = 1"), std::string::npos) << alone.output;
}

// A setting only the engine can judge fails every rank at the same point after MPI has started:
// the job ends with the error once, its code 1, and none of mpirun's abort text.
TEST_F(ParallelTraining, AnErrorEveryRankMeetsAfterStartUpIsSaidOnce) {
  for (const char* layout : {"--parallel.dp 2", "--parallel.pp 2"}) {
    CliResult r = run_tessera(launch(2, g_root / "bad_budget", std::string("--train.steps 2 --memory.recompute optimal "
                                                                           "--memory.activation_budget_mb 0.01 ") +
                                                                   layout));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(count(r.output, "memory.activation_budget_mb = 0.01 is below"), 1u) << layout << "\n" << r.output;
    EXPECT_EQ(r.output.find("rank 1"), std::string::npos) << r.output;
    expect_no_mpirun_abort_text(r);
  }
}

// The text between `before` and the next `after` on the first line that has `before`.
std::string field(const std::string& text, const std::string& before, const std::string& after) {
  const size_t at = text.find(before);
  if (at == std::string::npos) return "";
  const size_t from = at + before.size();
  return text.substr(from, text.find(after, from) - from);
}

// The start line and the MFU are the whole model's under every layout: a rank's share of the
// parameters under tensor or expert parallelism is not the model, and MFU divides the model's FLOPs
// by every process's time and peak (log.peak_gflops 1000 here).
TEST_F(ParallelTraining, TheStartLineAndMfuAreTheWholeModelsUnderEveryLayout) {
  const std::string moe = "--model.moe_experts 4 --model.moe_top_k 2 --train.steps 2";
  struct Run {
    int ranks;
    std::string args;
  } runs[] = {{1, "--train.steps 2"}, {2, "--train.steps 2 --parallel.tp 2"}, {2, "--train.steps 2 --parallel.pp 2"},
              {1, moe}, {2, moe + " --parallel.dp 2 --parallel.ep 2"}};
  std::string dense_params, dense_flops, moe_params, moe_flops;
  int n = 0;
  for (const Run& r : runs) {
    const fs::path out = g_root / ("start_line_" + std::to_string(n++));
    CliResult result = run_tessera(r.ranks == 1 ? train_args(out, r.args) : launch(r.ranks, out, r.args));
    ASSERT_EQ(result.exit_code, 0) << r.args << "\n" << result.output;
    const std::string params = field(result.output, "model: ", " parameters");
    const std::string flops = field(result.output, "the MFU reference; ", " MFLOP per token");
    ASSERT_FALSE(params.empty() || flops.empty()) << result.output;
    const bool is_moe = r.args.find("moe_experts") != std::string::npos;
    std::string& want_params = is_moe ? moe_params : dense_params;
    std::string& want_flops = is_moe ? moe_flops : dense_flops;
    if (want_params.empty()) {
      want_params = params;
      want_flops = flops;
    }
    EXPECT_EQ(params, want_params) << r.args << "\n" << result.output;
    EXPECT_EQ(flops, want_flops) << r.args << "\n" << result.output;
    // metrics.jsonl's mfu: global tokens per second × the model's FLOP per token over the world's peak.
    std::ifstream in(out / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j["kind"] != "train" || j["mfu"].is_null()) continue;
      const double expected = j["tokens_per_second"].get<double>() * std::stod(flops) * 1e6 / (r.ranks * 1000e9);
      EXPECT_NEAR(j["mfu"].get<double>(), expected, 1e-3 * expected) << r.args << "\n" << line;
    }
  }
}

// Under `tessera launch` a stop with a checkpoint exits 3 and a config error is said once, both
// without mpirun's abort text.
TEST_F(ParallelTraining, TheLauncherSaysAStopOrAConfigErrorOnceWithTheJobsCode) {
  CliResult stopped = run_tessera(launch(2, g_root / "launch_stop", "--train.steps 4 --parallel.dp 2 --train.exit_after 2"));
  EXPECT_EQ(stopped.exit_code, 3) << stopped.output;
  EXPECT_EQ(count(stopped.output, "stopped at step 2"), 1u) << stopped.output;
  expect_no_mpirun_abort_text(stopped);
  CliResult bad = run_tessera(launch(2, g_root / "launch_bad", "--train.steps 2 --parallel.dp 2 --optim.lrr 1"));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.exit_code, 3);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_EQ(count(bad.output, "unknown option '--optim.lrr'; did you mean '--optim.lr'?"), 1u) << bad.output;
  expect_no_mpirun_abort_text(bad);
}

// Under a launcher, a config without parallel.dp gets the processes tp and pp leave (Megatron's
// rule); a world they do not divide is refused with the sizes that work.
TEST_F(ParallelTraining, LeftOutDpIsTheProcessesThatTpAndPpLeave) {
  const fs::path out = g_root / "dp_from_world";
  CliResult r = run_tessera(launch(4, out, "--train.steps 2 --parallel.tp 2"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("mesh: 4 processes = dp 2 × pp 1 × tp 2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("parallel.dp left out, so dp = processes / (tp × pp)"), std::string::npos) << r.output;
  std::ifstream resolved(out / "config.toml");
  const std::string text((std::istreambuf_iterator<char>(resolved)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("dp = 2"), std::string::npos) << text;
  CliResult odd = run_tessera(launch(3, g_root / "dp_from_world_odd", "--train.steps 2 --parallel.tp 2"));
  EXPECT_NE(odd.exit_code, 0);
  EXPECT_NE(odd.output.find("parallel.dp is left out, so it is the job's 3 processes over parallel.tp × parallel.pp = "
                            "2 × 1 = 2, which does not divide them"),
            std::string::npos)
      << odd.output;
  EXPECT_NE(odd.output.find("tessera launch -n 4"), std::string::npos) << odd.output;
}

// A rank killed mid-run: mpirun ends the job, non-zero, and no process of it remains.
TEST_F(ParallelTraining, ARankThatDiesEndsTheJobWithNoOrphans) {
  const fs::path out = g_root / "crash_run_marker";
  pid_t job = spawn_tessera(launch(2, out, "--train.steps 100000 --parallel.dp 2 --parallel.zero_stage 1"),
                            (g_root / "crash.log").string());
  // Wait until the ranks train.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (losses(out / "metrics.jsonl").size() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GE(losses(out / "metrics.jsonl").size(), 2u) << read_file((g_root / "crash.log").string());
  const std::string ranks_of_job = "pgrep -f '^" + tessera_exe() + " train .*crash_run_marker'";
  CliResult pids{0, ""};
  {
    FILE* p = ::popen(ranks_of_job.c_str(), "r");
    char buf[256];
    while (std::fgets(buf, sizeof buf, p) != nullptr) pids.output += buf;
    ::pclose(p);
  }
  ASSERT_FALSE(pids.output.empty()) << "no rank process found";
  const pid_t victim = std::stoi(pids.output);
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const auto killed_at = std::chrono::steady_clock::now();
  int status = 0;
  while (::waitpid(job, &status, WNOHANG) == 0) {
    ASSERT_LT(std::chrono::steady_clock::now() - killed_at, std::chrono::seconds(30))
        << "the job did not end after a rank died";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_file((g_root / "crash.log").string());
  bool orphans = true;
  for (int i = 0; i < 50 && orphans; ++i) {
    // The bracket keeps the pattern from matching the shell that runs pgrep.
    orphans = std::system("pgrep -f crash_run_marke[r] > /dev/null") == 0;
    if (orphans) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_FALSE(orphans) << "processes of the job remain";
  if (orphans) {
    EXPECT_EQ(std::system("pgrep -a -f crash_run_marke[r]"), 0);  // lists them in the log
  }
}

// A rank that never reaches MPI initialization (stopped or killed before it) no longer hangs the
// job: the others end it after parallel.timeout_seconds, saying why.
TEST_F(ParallelTraining, ARankMissingAtStartUpEndsTheJob) {
  const std::string train = tessera_exe() + " " + train_args(g_root / "startup", "--train.steps 2 --parallel.dp 2 "
                                                                                  "--parallel.timeout_seconds 3");
  const std::string command =
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 mpirun -n 2 --oversubscribe --bind-to none "
      "-x OMP_NUM_THREADS=1 sh -c 'if [ \"$OMPI_COMM_WORLD_RANK\" = 1 ]; then sleep 50; fi; exec " + train + "' 2>&1";
  const auto t0 = std::chrono::steady_clock::now();
  std::string output;
  FILE* p = ::popen(command.c_str(), "r");
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) output.append(buf, n);
  const int status = ::pclose(p);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << output;
  EXPECT_LT(seconds, 40.0) << "the job must end soon after the timeout, not when the missing rank wakes up\n" << output;
  EXPECT_NE(output.find("did not start within parallel.timeout_seconds = 3.0 s"), std::string::npos) << output;
}

}  // namespace
