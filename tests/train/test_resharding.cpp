// Checkpoints that move between layouts: `tessera train` saves at step 3 under each of one process,
// dp 2, dp 2 with ZeRO-3, tp 2, pp 2, tp 2 · pp 2 · dp 2 (ZeRO-1) and dp 2 · pp 2 with ZeRO-3 (each
// stage's parameters sharded over its data-parallel group), and every one of those
// checkpoints resumes under every one of those layouts for three more steps. The resumed losses
// equal the uninterrupted 6-step run of the resuming layout within 1e-5 relative (bit for bit when
// the layout is the one that saved), and each layout's uninterrupted run equals one process's. State
// that cannot move (Adafactor's factored statistics, a compressor's error feedback) is refused with
// the layout to resume on.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "cli_runner.h"

namespace fs = std::filesystem;
using namespace tessera::testing;

namespace {

fs::path g_root;
fs::path g_dataset;

// Dropout on: the resumed steps draw the same masks as the uninterrupted run, on any layout.
const std::string kRun =
    "--model.n_layer 2 --model.n_head 2 --model.n_embd 32 --model.seq_len 32 --model.dropout 0.1 "
    "--train.batch_size 8 --train.micro_batch_size 2 --train.eval_every 0 --train.eval_batches 2 "
    "--train.sample_tokens 0 --optim.warmup_steps 2 --optim.lr 0.003 --log.progress plain --log.every 1 "
    "--log.peak_gflops 1000 --parallel.bucket_mb 0.01 --train.steps 6 --checkpoint.every 3";

struct Layout {
  std::string name;
  std::string launcher;
  std::string keys;
};

const std::vector<Layout> kLayouts = {
    {"one", "", ""},
    {"dp2", "launch -n 2 -- ", "--parallel.dp 2"},
    {"dp2_zero3", "launch -n 2 -- ", "--parallel.dp 2 --parallel.zero_stage 3"},
    {"tp2", "launch -n 2 -- ", "--parallel.tp 2"},
    {"pp2", "launch -n 2 -- ", "--parallel.pp 2"},
    {"tp2_pp2_dp2", "launch -n 8 -- ", "--parallel.tp 2 --parallel.pp 2 --parallel.dp 2 --parallel.zero_stage 1"},
    {"dp2_pp2_zero3", "launch -n 4 -- ", "--parallel.dp 2 --parallel.pp 2 --parallel.zero_stage 3"},
};

std::string train(const Layout& layout, const fs::path& out, const std::string& extra) {
  return layout.launcher + "train --data.dir " + g_dataset.string() + " --train.out_dir " + out.string() + " " + kRun +
         " " + layout.keys + " " + extra;
}

fs::path whole_run(const Layout& layout) { return g_root / ("whole_" + layout.name); }
fs::path saved_at_3(const Layout& layout) { return whole_run(layout) / "checkpoints" / "step_00000003"; }

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::abs(got[i] - want[i]), rel * std::abs(want[i])) << what << ": loss " << i << " " << got[i]
                                                                    << " vs " << want[i];
  }
}

class Resharding : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("ASAN_OPTIONS", "detect_leaks=0", 0);  // the launched jobs run under mpirun
    g_root = fs::temp_directory_path() / ("tessera_resharding_" + std::to_string(::getpid()));
    g_dataset = g_root / "data";
    CliResult r = prepare_test_dataset(g_root.string(), 40000, 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const Layout& layout : kLayouts) {
      CliResult run = run_tessera(train(layout, whole_run(layout), ""));
      ASSERT_EQ(run.exit_code, 0) << layout.name << "\n" << run.output;
    }
  }
  static void TearDownTestSuite() { fs::remove_all(g_root); }
};

TEST_F(Resharding, EveryLayoutTrainsLikeOneProcess) {
  const std::vector<double> one = train_losses_of((whole_run(kLayouts[0]) / "metrics.jsonl").string());
  ASSERT_EQ(one.size(), 6u);
  EXPECT_LT(one.back(), one.front()) << "training did not lower the loss";
  for (const Layout& layout : kLayouts) {
    expect_close(train_losses_of((whole_run(layout) / "metrics.jsonl").string()), one, 1e-5, layout.name);
  }
}

TEST_F(Resharding, EveryCheckpointResumesUnderEveryLayout) {
  for (const Layout& saved : kLayouts) {
    for (const Layout& resumed : kLayouts) {
      const std::string what = "saved by " + saved.name + ", resumed by " + resumed.name;
      SCOPED_TRACE(what);
      const fs::path out = g_root / ("from_" + saved.name + "_to_" + resumed.name);
      CliResult r = run_tessera(train(resumed, out, "--checkpoint.resume " + saved_at_3(saved).string()));
      ASSERT_EQ(r.exit_code, 0) << r.output;
      ASSERT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
      const std::vector<double> want = train_losses_of((whole_run(resumed) / "metrics.jsonl").string());
      const std::vector<double> got = train_losses_of((out / "metrics.jsonl").string());
      ASSERT_EQ(want.size(), 6u);
      const std::vector<double> tail(want.begin() + 3, want.end());
      if (saved.name == resumed.name) {
        EXPECT_EQ(got, tail) << what << ": the same layout resumes bit for bit";
      } else {
        expect_close(got, tail, 1e-5, what);
      }
      fs::remove_all(out);
    }
  }
}

// Mixture of experts under `tessera train`: experts split over ep (carved out of dp), their
// gradients reduced over edp (under ZeRO-3 their parameters sharded and gathered over edp, the dense
// ones over dp). Each layout trains like one process, and checkpoints move between ep layouts and
// one process (the experts gathered into model.safetensors, their optimizer state by global
// element); a ZeRO-3 checkpoint resumes bit for bit under its own layout.
TEST_F(Resharding, ExpertParallelTrainsAndMovesLikeOneProcess) {
  const std::string moe = "--model.moe_experts 4 --model.moe_top_k 2 --model.moe_capacity_factor 1.0";
  const std::vector<Layout> layouts = {
      {"moe_one", "", moe},
      {"moe_dp2_ep2", "launch -n 2 -- ", moe + " --parallel.dp 2 --parallel.ep 2"},
      {"moe_dp4_ep2_zero1", "launch -n 4 -- ", moe + " --parallel.dp 4 --parallel.ep 2 --parallel.zero_stage 1"},
      {"moe_dp4_ep2_zero3", "launch -n 4 -- ", moe + " --parallel.dp 4 --parallel.ep 2 --parallel.zero_stage 3"},
  };
  for (const Layout& layout : layouts) {
    CliResult run = run_tessera(train(layout, whole_run(layout), ""));
    ASSERT_EQ(run.exit_code, 0) << layout.name << "\n" << run.output;
    if (layout.keys.find("parallel.ep") != std::string::npos) {
      EXPECT_NE(run.output.find("expert parallel: 4 experts over 2 ranks"), std::string::npos) << run.output;
    }
  }
  const std::vector<double> one = train_losses_of((whole_run(layouts[0]) / "metrics.jsonl").string());
  ASSERT_EQ(one.size(), 6u);
  for (const Layout& layout : layouts) {
    expect_close(train_losses_of((whole_run(layout) / "metrics.jsonl").string()), one, 1e-5, layout.name);
  }
  for (const auto& [from, to] :
       std::vector<std::pair<int, int>>{{1, 0}, {0, 1}, {1, 2}, {2, 1}, {3, 3}, {3, 0}, {2, 3}}) {
    const Layout &saved = layouts[static_cast<size_t>(from)], &resumed = layouts[static_cast<size_t>(to)];
    const std::string what = "saved by " + saved.name + ", resumed by " + resumed.name;
    const fs::path out = g_root / ("from_" + saved.name + "_to_" + resumed.name);
    CliResult r = run_tessera(train(resumed, out, "--checkpoint.resume " + saved_at_3(saved).string()));
    ASSERT_EQ(r.exit_code, 0) << what << "\n" << r.output;
    const std::vector<double> want = train_losses_of((whole_run(resumed) / "metrics.jsonl").string());
    const std::vector<double> got = train_losses_of((out / "metrics.jsonl").string());
    if (from == to) {
      EXPECT_EQ(got, std::vector<double>(want.begin() + 3, want.end())) << what << ": the same layout resumes bit for bit";
    } else {
      expect_close(got, {want.begin() + 3, want.end()}, 1e-5, what);
    }
  }
}

TEST_F(Resharding, StateThatCannotMoveIsRefusedWithTheLayoutToResumeOn) {
  // Adafactor's factored statistics follow the saving layout's shards: ZeRO-1's cannot move.
  const Layout zero1{"dp2_zero1", "launch -n 2 -- ", "--parallel.dp 2 --parallel.zero_stage 1"};
  const std::string adafactor_keys = "--optim.name adafactor --optim.lr 0.01";
  const fs::path adafactor = g_root / "adafactor_zero1";
  CliResult saved = run_tessera(train(zero1, adafactor, adafactor_keys + " --train.exit_after 3"));
  ASSERT_EQ(saved.exit_code, 3) << saved.output;
  const std::string at_3 = (adafactor / "checkpoints" / "step_00000003").string();
  CliResult moved = run_tessera(train(kLayouts[0], g_root / "adafactor_one", adafactor_keys + " --checkpoint.resume " + at_3));
  EXPECT_NE(moved.exit_code, 0);
  EXPECT_NE(moved.output.find("does not move between layouts"), std::string::npos) << moved.output;
  EXPECT_NE(moved.output.find("Resume with parallel.dp = 2, parallel.zero_stage = 1, parallel.tp = 1, parallel.pp = 1"),
            std::string::npos)
      << moved.output;
  // The same layout resumes it.
  CliResult same = run_tessera(train(zero1, adafactor, adafactor_keys + " --checkpoint.resume latest"));
  EXPECT_EQ(same.exit_code, 0) << same.output;
  // Plain dp holds the whole state on every rank, as one process does: that move keeps the layout
  // of the state, and is taken.
  const fs::path replicated = g_root / "adafactor_dp2";
  ASSERT_EQ(run_tessera(train(kLayouts[1], replicated, adafactor_keys + " --train.exit_after 3")).exit_code, 3);
  CliResult taken = run_tessera(train(kLayouts[0], g_root / "adafactor_dp2_one",
                                      adafactor_keys + " --checkpoint.resume " +
                                          (replicated / "checkpoints" / "step_00000003").string()));
  EXPECT_EQ(taken.exit_code, 0) << taken.output;

  // A compressor's error feedback is what each rank has not sent yet.
  const fs::path topk = g_root / "topk_dp2";
  const std::string compression = "--parallel.compression topk --compression.ratio 0.1";
  CliResult compressed = run_tessera(train(kLayouts[1], topk, compression + " --train.exit_after 3"));
  ASSERT_EQ(compressed.exit_code, 3) << compressed.output;
  const Layout four{"dp4", "launch -n 4 -- ", "--parallel.dp 4"};
  CliResult refused = run_tessera(train(four, g_root / "topk_dp4",
                                        compression + " --train.batch_size 8 --train.micro_batch_size 2 "
                                                      "--checkpoint.resume " +
                                            (topk / "checkpoints" / "step_00000003").string()));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("is kept per rank and does not move between layouts"), std::string::npos)
      << refused.output;
}

}  // namespace
