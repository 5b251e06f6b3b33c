// The nvme tier's traffic a run measures (metrics.jsonl: memory.nvme_read and nvme_written, the
// copy engine's completed bytes of the step) against what `tessera plan --config` predicts for
// it: with the parameters and the optimizer state offloaded, the optimizer writes back its state
// and the master values once a step and reads them once, and each unit's forward and backward
// read the unit's parameters (a head whose backward follows its forward reads them once for both).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace fs = std::filesystem;
using namespace tessera::testing;

namespace {

fs::path g_root;
fs::path g_dataset;

const std::string kRun =
    "--model.n_layer 8 --model.n_head 2 --model.n_embd 32 --model.seq_len 32 --train.batch_size 8 "
    "--train.micro_batch_size 2 --train.eval_every 0 --train.sample_tokens 0 --train.steps 5 "
    "--parallel.zero_stage 3 --memory.offload_optimizer nvme --memory.offload_chunk_mb 0.02 --log.progress plain";

class OffloadTraffic : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_root = fs::temp_directory_path() / ("tessera_offload_traffic_" + std::to_string(::getpid()));
    g_dataset = g_root / "data";
    CliResult r = prepare_test_dataset(g_root.string(), 40000, 300);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ofstream(g_root / "run.toml") << "[train]\nsteps = 5\n";
    std::ofstream(g_root / "disk.toml")
        << "[cluster]\nname = \"one\"\ndevices_per_node = 8\nnodes = 1\n\n"
        << "[cluster.device]\nname = \"cpu\"\npeak_tflops_fp32 = 0.1\npeak_tflops_bf16 = 0.1\nmemory_gib = 16\n"
        << "memory_bandwidth_gbps = 10\n\n[cluster.intra_node]\nbandwidth_gbps = 5\nlatency_us = 1\n\n"
        << "[cluster.inter_node]\nbandwidth_gbps = 1\nlatency_us = 10\n\n[cluster.disk]\nread_gbps = 2\nwrite_gbps = 1\n";
  }
  static void TearDownTestSuite() { fs::remove_all(g_root); }
};

// The median over the steps. The store counts a transfer when it is posted, so the reads ahead of
// the next step's first chunks count in the step that posts them however soon they complete, and
// every step after the first (which also posts its own first reads) moves the same bytes. The
// bound, 5 %, is far below what leaving out a kind of traffic would miss by (the parameters' reads
// are over half of them here).
double median_of(const fs::path& metrics, const char* key) {
  std::vector<double> values;
  std::ifstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["kind"] == "train") values.push_back(j["memory"][key].get<double>());
  }
  EXPECT_EQ(values.size(), 5u);
  if (values.empty()) return -1;
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

TEST_F(OffloadTraffic, TheStepsNvmeTrafficIsThePlannersPrediction) {
  for (const std::string keys : {"--memory.offload_params nvme", "--memory.offload_params nvme --memory.offload_activations nvme",
                                 "--memory.offload_params none"}) {
    SCOPED_TRACE(keys);
    const fs::path out = g_root / ("run" + std::to_string(std::hash<std::string>{}(keys)));
    const std::string run = kRun + " " + keys + " --data.dir " + g_dataset.string();
    const CliResult trained = run_tessera("train " + run + " --train.out_dir " + out.string());
    ASSERT_EQ(trained.exit_code, 0) << trained.output;
    const CliResult planned = run_tessera("plan --json --config " + (g_root / "run.toml").string() + " " + run +
                                          " --cluster " + (g_root / "disk.toml").string());
    ASSERT_EQ(planned.exit_code, 0) << planned.output;
    const nlohmann::json io = nlohmann::json::parse(planned.output)["io"];
    const double read = io["bytes_read"].get<double>(), written = io["bytes_written"].get<double>();
    EXPECT_NEAR(median_of(out / "metrics.jsonl", "nvme_read"), read, 0.05 * read) << io.dump();
    EXPECT_NEAR(median_of(out / "metrics.jsonl", "nvme_written"), written, 0.05 * written) << io.dump();
  }
}

}  // namespace
