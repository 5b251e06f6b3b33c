// The planner's memory tiers (`tessera plan --config`): beside the memory peak (the compute tier),
// the most the nvme tier holds per stage, and the step's nvme I/O — the offloaded forwards' kept
// bytes, written once and read back once — timed at the cluster's disk bandwidth, its part the
// step's compute does not hide added to the step. Planning only, no training: a few seconds.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "config/activation_bytes.h"

namespace fs = std::filesystem;
using namespace tessera::testing;

namespace {

fs::path g_root;

// Two blocks of 32 channels, 4 microbatches of 2 x 32 tokens a step; dropout on, so blocks keep
// their masks too. The vocabulary is given: no dataset is needed to plan.
void write_run_toml(const fs::path& path) {
  std::ofstream(path) << "[model]\nn_layer = 2\nn_head = 2\nn_embd = 32\nseq_len = 32\ndropout = 0.1\n"
                      << "vocab_size = 300\n\n[train]\nsteps = 2\nbatch_size = 8\nmicro_batch_size = 2\n"
                      << "eval_every = 0\n\n[parallel]\nbucket_mb = 0.01\n";
}

// A node of up to 8 processes, with `disk` (a [cluster.disk] table, or "" for none).
void write_cluster_toml(const fs::path& path, const std::string& disk) {
  std::ofstream(path) << "[cluster]\nname = \"eight\"\ndevices_per_node = 8\nnodes = 1\n\n"
                      << "[cluster.device]\nname = \"cpu\"\npeak_tflops_fp32 = 0.1\npeak_tflops_bf16 = 0.1\n"
                      << "memory_gib = 16\nmemory_bandwidth_gbps = 10\n\n"
                      << "[cluster.intra_node]\nbandwidth_gbps = 5\nlatency_us = 1\n\n"
                      << "[cluster.inter_node]\nbandwidth_gbps = 1\nlatency_us = 10\n\n"
                      << disk;
}

class PlannerTiers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_root = fs::temp_directory_path() / ("tessera_planner_tiers_" + std::to_string(::getpid()));
    fs::create_directories(g_root);
    write_run_toml(g_root / "run.toml");
    // 1 GB/s written, 2 GB/s read; a disk a thousand times slower; none.
    write_cluster_toml(g_root / "fast.toml", "[cluster.disk]\nread_gbps = 2\nwrite_gbps = 1\n");
    write_cluster_toml(g_root / "slow.toml", "[cluster.disk]\nread_gbps = 0.002\nwrite_gbps = 0.001\n");
    write_cluster_toml(g_root / "none.toml", "");
  }
  static void TearDownTestSuite() { fs::remove_all(g_root); }

  static CliResult plan(const std::string& cluster, const std::string& keys) {
    return run_tessera("plan --config " + (g_root / "run.toml").string() + " --cluster " +
                       (g_root / (cluster + ".toml")).string() + " " + keys);
  }
  static nlohmann::json plan_json(const std::string& cluster, const std::string& keys) {
    const CliResult r = plan(cluster, "--json " + keys);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return r.exit_code == 0 ? nlohmann::json::parse(r.output) : nlohmann::json();
  }
};

// The bytes one microbatch's forwards offload on a single stage without recomputation: each block
// keeps what it saved and its stored input (the output of the unit below), and all of it moves
// (exec/activation_offload.h); the embedding keeps only its token ids, which stay, and the head's
// backward follows its forward at once.
double offloaded_per_microbatch() {
  tessera::config::ModelConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 32;
  m.seq_len = 32;
  m.dropout = 0.1f;
  m.vocab_size = 300;
  const std::vector<tessera::config::UnitActivationBytes> units = tessera::config::unit_activation_bytes(m, 2, 32);
  const size_t head = units.size() - 1;
  double bytes = 0;
  for (size_t u = 1; u < head; ++u) bytes += static_cast<double>(units[u].own + units[u - 1].output);
  return bytes;
}

TEST_F(PlannerTiers, TheIoIsTheOffloadedBytesAtTheDisksBandwidth) {
  const nlohmann::json p = plan_json("fast", "--memory.offload_activations nvme");
  ASSERT_FALSE(p.is_null());
  const double traffic = 4 * offloaded_per_microbatch();  // four microbatches a step
  ASSERT_GT(traffic, 0);
  EXPECT_GT(p["stages"][0]["nvme"].get<double>(), 0) << p.dump();
  EXPECT_LE(p["stages"][0]["nvme"].get<double>(), traffic) << p.dump();
  EXPECT_EQ(p["memory"]["nvme"], p["stages"][0]["nvme"]);
  const nlohmann::json& io = p["io"];
  EXPECT_DOUBLE_EQ(io["bytes_written"].get<double>(), traffic) << p.dump();
  EXPECT_DOUBLE_EQ(io["bytes_read"].get<double>(), traffic) << p.dump();
  EXPECT_DOUBLE_EQ(io["seconds"].get<double>(), traffic / 1e9 + traffic / 2e9) << p.dump();
  EXPECT_EQ(p["stages"][0]["io"], (nlohmann::json{{"bytes_written", io["bytes_written"]},
                                                   {"bytes_read", io["bytes_read"]},
                                                   {"seconds", io["seconds"]},
                                                   {"exposed_seconds", io["exposed_seconds"]}}));
  // A fast disk hides behind the compute: the step is the one without offloading.
  const nlohmann::json kept = plan_json("fast", "");
  ASSERT_FALSE(kept.is_null());
  EXPECT_LT(io["seconds"].get<double>(), p["time"]["compute"].get<double>());
  EXPECT_DOUBLE_EQ(io["exposed_seconds"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(p["step_seconds"].get<double>(), kept["step_seconds"].get<double>());
  // Without offloading nothing moves.
  EXPECT_DOUBLE_EQ(kept["stages"][0]["nvme"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(kept["io"]["bytes_written"].get<double>(), 0.0);
}

TEST_F(PlannerTiers, WhatTheComputeDoesNotHideLengthensTheStep) {
  const nlohmann::json p = plan_json("slow", "--memory.offload_activations nvme");
  const nlohmann::json kept = plan_json("slow", "");
  ASSERT_FALSE(p.is_null());
  ASSERT_FALSE(kept.is_null());
  const double traffic = 4 * offloaded_per_microbatch();
  const double seconds = traffic / 1e6 + traffic / 2e6;
  EXPECT_NEAR(p["io"]["seconds"].get<double>(), seconds, 1e-12 * seconds);
  const double exposed = seconds - p["time"]["compute"].get<double>();
  ASSERT_GT(exposed, 0);
  EXPECT_NEAR(p["io"]["exposed_seconds"].get<double>(), exposed, 1e-9 * seconds);
  EXPECT_NEAR(p["time"]["io"].get<double>(), exposed, 1e-9 * seconds);
  EXPECT_NEAR(p["step_seconds"].get<double>(), kept["step_seconds"].get<double>() + exposed, 1e-9 * seconds);
  // Two ranks of the node share its disk: each moves half the microbatches at half the bandwidth.
  const nlohmann::json dp2 = plan_json("slow", "--memory.offload_activations nvme --parallel.dp 2");
  ASSERT_FALSE(dp2.is_null());
  EXPECT_DOUBLE_EQ(dp2["io"]["bytes_written"].get<double>(), traffic / 2);
  EXPECT_NEAR(dp2["io"]["seconds"].get<double>(), seconds, 1e-12 * seconds);
  // The text report: the nvme row beside the memory peak, the I/O and the step's exposed part.
  const CliResult text = plan("slow", "--memory.offload_activations nvme");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  for (const char* line : {"  nvme peak ", "nvme I/O per step", "  written MiB ", "  exposed s ", "  nvme I/O  "}) {
    EXPECT_NE(text.output.find(line), std::string::npos) << line << "\n" << text.output;
  }
}

// An offloaded optimizer state streams during the update; with the delayed update it streams while
// the next step computes, which hides the compute's time more of its traffic.
TEST_F(PlannerTiers, TheDelayedUpdateHidesTheStateTrafficBehindTheStep) {
  const std::string state = "--memory.offload_optimizer nvme";
  const nlohmann::json sync = plan_json("slow", state);
  const nlohmann::json delayed = plan_json("slow", state + " --optim.delayed_update_after 1");
  ASSERT_FALSE(sync.is_null());
  ASSERT_FALSE(delayed.is_null());
  EXPECT_DOUBLE_EQ(sync["io"]["seconds"].get<double>(), delayed["io"]["seconds"].get<double>());
  const double compute = sync["time"]["compute"].get<double>();
  ASSERT_GT(delayed["io"]["exposed_seconds"].get<double>(), 0) << delayed.dump();
  EXPECT_NEAR(sync["io"]["exposed_seconds"].get<double>() - delayed["io"]["exposed_seconds"].get<double>(), compute,
              1e-9 * sync["io"]["seconds"].get<double>());
  EXPECT_LT(delayed["step_seconds"].get<double>(), sync["step_seconds"].get<double>());
  // Its shadow values and gradients are in the memory prediction: two more f32 copies of the state's
  // parameters beside the state.
  const nlohmann::json plain = plan_json("slow", "");
  const nlohmann::json plain_delayed = plan_json("slow", "--optim.delayed_update_after 1");
  ASSERT_FALSE(plain_delayed.is_null());
  EXPECT_DOUBLE_EQ(plain_delayed["memory"]["optimizer"].get<double>(), 2 * plain["memory"]["optimizer"].get<double>())
      << "AdamW keeps two f32 moments per parameter, as many bytes as the shadow copies";
}

TEST_F(PlannerTiers, AClusterWithoutADiskSaysSoInsteadOfTiming) {
  const nlohmann::json p = plan_json("none", "--memory.offload_activations nvme");
  ASSERT_FALSE(p.is_null());
  EXPECT_GT(p["io"]["bytes_written"].get<double>(), 0);
  EXPECT_TRUE(p["io"]["seconds"].is_null()) << p.dump();
  EXPECT_TRUE(p["time"]["io"].is_null()) << p.dump();
  const CliResult text = plan("none", "--memory.offload_activations nvme");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("does not give its disk's bandwidth ([cluster.disk] read_gbps and write_gbps"),
            std::string::npos)
      << text.output;
  // Without offloading, the report has no nvme rows and does not miss the disk.
  const CliResult kept = plan("none", "");
  ASSERT_EQ(kept.exit_code, 0) << kept.output;
  EXPECT_EQ(kept.output.find("nvme"), std::string::npos) << kept.output;
  EXPECT_EQ(kept.output.find("disk"), std::string::npos) << kept.output;
}

// Each pipeline stage offloads its own units: an nvme peak and traffic for each, the stage that
// moves the most as the step's.
TEST_F(PlannerTiers, EveryPipelineStageHasItsNvmePeak) {
  const nlohmann::json p = plan_json("fast", "--memory.offload_activations nvme --parallel.pp 2");
  ASSERT_FALSE(p.is_null());
  ASSERT_EQ(p["stages"].size(), 2u);
  double most = 0;
  for (const nlohmann::json& stage : p["stages"]) {
    EXPECT_GT(stage["nvme"].get<double>(), 0) << p.dump();
    most = std::max(most, stage["io"]["bytes_written"].get<double>());
  }
  EXPECT_DOUBLE_EQ(p["io"]["bytes_written"].get<double>(), most);
}

}  // namespace
