// ZeRO-3's parameter shard in the nvme tier (memory.offload_params = "nvme") through the real
// program: one process at dp 1 (the shard is the whole model) and two at dp 2 give bitwise the
// losses and checkpoints of the same layout in memory (also with bf16, offloaded activations and
// tensor parallelism beside it), with a lower peak of the params tag and an
// nvme tier that holds the shard beside the optimizer state; a stopped run resumes to the
// uninterrupted one; the settings it needs are named when they are missing.
#include <gtest/gtest.h>
#include <unistd.h>

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

// Eight blocks, so that the chunks and units in flight (two units' parts of the shard ahead under dp
// 2) are well below a shard.
const std::string kModel =
    "--model.n_layer 8 --model.n_head 2 --model.n_embd 32 --model.seq_len 32 --model.dropout 0.1 "
    "--train.batch_size 8 --train.micro_batch_size 2 --train.eval_every 2 --train.eval_batches 2 "
    "--train.sample_tokens 0 --optim.warmup_steps 2 --log.progress plain --log.every 1 --log.peak_gflops 1000 "
    "--train.steps 4 --parallel.bucket_mb 0.01";
const std::string kOffloaded =
    " --memory.offload_params nvme --memory.offload_optimizer nvme --memory.offload_chunk_mb 0.02";

std::string train_args(const fs::path& out, const std::string& extra) {
  return "train --data.dir " + g_dataset.string() + " --train.out_dir " + out.string() + " " + kModel + " " + extra;
}

class OffloadParams : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ::setenv("ASAN_OPTIONS", "detect_leaks=0", 0);  // the launched jobs run under mpirun
    g_root = fs::temp_directory_path() / ("tessera_offload_params_" + std::to_string(::getpid()));
    g_dataset = g_root / "data";
    CliResult r = prepare_test_dataset(g_root.string(), 40000, 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { fs::remove_all(g_root); }
};

TEST_F(OffloadParams, ParametersInTheNvmeTierGiveTheSameRun) {
  struct Layout {
    std::string name;
    int ranks;
    std::string keys;
    std::vector<std::string> files;
  } layouts[] = {
      {"zero3", 1, "--parallel.zero_stage 3", {"model.safetensors", "optimizer.rank00000.safetensors"}},
      {"dp2_zero3", 2, "--parallel.dp 2 --parallel.zero_stage 3",
       {"model.safetensors", "optimizer.rank00000.safetensors", "optimizer.rank00001.safetensors"}},
      // With what else the table lets it run beside: 16-bit compute, offloaded activations, tensor
      // parallelism (each tensor-parallel rank's shard of its blocks).
      {"zero3_bf16", 1, "--parallel.zero_stage 3 --precision.compute bf16",
       {"model.safetensors", "optimizer.rank00000.safetensors"}},
      // A loss scale: the gradient in the nvme tier is unscaled and clipped as it is read.
      {"zero3_fp16_clipped", 1, "--parallel.zero_stage 3 --precision.compute fp16 --optim.grad_clip 0.05",
       {"model.safetensors", "optimizer.rank00000.safetensors"}},
      {"zero3_activations", 1, "--parallel.zero_stage 3 --memory.offload_activations nvme",
       {"model.safetensors", "optimizer.rank00000.safetensors"}},
      {"dp2_tp2_zero3", 4, "--parallel.dp 2 --parallel.tp 2 --parallel.zero_stage 3", {"model.safetensors"}},
      // Sequence parallelism: the gradients of the parameters every tp rank holds whole summed over
      // tp as each part lands, as the shard in memory sums them when the step's program finishes;
      // four microbatches a step, so those parts are read back and added before the sum.
      {"dp2_tp2_sp_zero3", 4,
       "--parallel.dp 2 --parallel.tp 2 --parallel.sp true --parallel.zero_stage 3 --train.micro_batch_size 1",
       {"model.safetensors"}},
  };
  for (const Layout& l : layouts) {
    SCOPED_TRACE(l.name);
    const std::string launcher = l.ranks == 1 ? "" : fmt::format("launch -n {} -- ", l.ranks);
    const fs::path plain = g_root / (l.name + "_plain"), moved = g_root / (l.name + "_offloaded");
    CliResult a = run_tessera(launcher + train_args(plain, l.keys));
    ASSERT_EQ(a.exit_code, 0) << a.output;
    CliResult b = run_tessera(launcher + train_args(moved, l.keys + kOffloaded));
    ASSERT_EQ(b.exit_code, 0) << b.output;
    EXPECT_NE(b.output.find("ZeRO-3's parameter shard in the nvme tier"), std::string::npos) << b.output;
    const std::vector<double> losses = train_losses_of((plain / "metrics.jsonl").string());
    ASSERT_EQ(losses.size(), 4u);
    EXPECT_EQ(losses, train_losses_of((moved / "metrics.jsonl").string()));
    for (const std::string& file : l.files) {
      EXPECT_EQ(read_file((plain / "checkpoints" / "step_00000004" / file).string()),
                read_file((moved / "checkpoints" / "step_00000004" / file).string()))
          << file << " differs with the parameters offloaded";
    }
    const nlohmann::json with_line = last_train_line((moved / "metrics.jsonl").string());
    const nlohmann::json without_line = last_train_line((plain / "metrics.jsonl").string());
    const nlohmann::json with_ranks =
        l.ranks == 1 ? nlohmann::json::array({with_line["memory"]}) : with_line["memory_by_rank"];
    const nlohmann::json without_ranks =
        l.ranks == 1 ? nlohmann::json::array({without_line["memory"]}) : without_line["memory_by_rank"];
    ASSERT_EQ(static_cast<int>(with_ranks.size()), l.ranks) << with_line.dump();
    for (int r = 0; r < l.ranks; ++r) {
      const nlohmann::json& with = with_ranks[static_cast<size_t>(r)];
      const nlohmann::json& without = without_ranks[static_cast<size_t>(r)];
      SCOPED_TRACE(fmt::format("rank {}: {} against {}", r, with.dump(), without.dump()));
      // In compute memory only the chunks and units in flight: less than the shard.
      EXPECT_LT(with["params"].get<double>(), 0.75 * without["params"].get<double>());
      // The gradient shard too: what is in flight to the nvme tier and the chunks the step reads.
      EXPECT_LT(with["grads"].get<double>(), 0.75 * without["grads"].get<double>());
      EXPECT_LT(with["peak"].get<double>(), without["peak"].get<double>());
    }
    // This process's shards moved to the nvme tier, beside its optimizer state.
    EXPECT_GE(with_line["memory"]["nvme"].get<double>(), without_ranks[0]["params"].get<double>() +
                                                             without_ranks[0]["grads"].get<double>() +
                                                             without_ranks[0]["optimizer"].get<double>())
        << with_line.dump();
    for (const fs::directory_entry& e : fs::directory_iterator(moved / "offload")) {
      EXPECT_TRUE(e.path().filename().string().starts_with(".lock")) << e.path();
    }
  }
  // Stopped after two steps and resumed: the uninterrupted run, bit for bit (the loaded values go
  // back into the nvme tier one parameter and one chunk at a time, each rank keeping its part).
  for (const Layout& l : layouts) {
    SCOPED_TRACE(l.name + ", resumed");
    const std::string launcher = l.ranks == 1 ? "" : fmt::format("launch -n {} -- ", l.ranks);
    const fs::path whole = g_root / (l.name + "_offloaded"), split = g_root / (l.name + "_split");
    CliResult stopped = run_tessera(launcher + train_args(split, l.keys + kOffloaded + " --train.exit_after 2"));
    ASSERT_EQ(stopped.exit_code, 3) << stopped.output;
    CliResult resumed = run_tessera(launcher + train_args(split, l.keys + kOffloaded + " --checkpoint.resume latest"));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("the parameters one at a time"), std::string::npos) << resumed.output;
    EXPECT_NE(resumed.output.find("the optimizer state chunk by chunk"), std::string::npos) << resumed.output;
    EXPECT_EQ(train_losses_of((whole / "metrics.jsonl").string()), train_losses_of((split / "metrics.jsonl").string()));
    for (const std::string& file : l.files) {
      EXPECT_EQ(read_file((whole / "checkpoints" / "step_00000004" / file).string()),
                read_file((split / "checkpoints" / "step_00000004" / file).string()))
          << file << " differs after resuming";
    }
  }
}

TEST_F(OffloadParams, TheSettingsItNeedsAreNamed) {
  struct Refused {
    std::string keys;
    std::string named;
  } refused[] = {
      {"--parallel.zero_stage 0" + kOffloaded, "set parallel.zero_stage = 3"},
      {"--parallel.zero_stage 1 --parallel.dp 1" + kOffloaded, "use parallel.zero_stage = 3"},
      {"--parallel.zero_stage 3 --memory.offload_params nvme", "memory.offload_optimizer = \"nvme\""},
      {"--parallel.zero_stage 3 --optim.name lamb" + kOffloaded, "memory.offload_params"},
      {"--parallel.zero_stage 3 --memory.offload_params disk --memory.offload_optimizer nvme", "is not known"},
  };
  for (const Refused& r : refused) {
    SCOPED_TRACE(r.keys);
    CliResult result = run_tessera(train_args(g_root / "refused", r.keys));
    EXPECT_NE(result.exit_code, 0) << result.output;
    EXPECT_NE(result.output.find("memory.offload_params"), std::string::npos) << result.output;
    EXPECT_NE(result.output.find(r.named), std::string::npos) << result.output;
    EXPECT_FALSE(fs::exists(g_root / "refused" / "metrics.jsonl")) << "refused before the first step";
  }
}

}  // namespace
