// Multi-node runs on the test cluster of scripts/cluster.sh: every test brings up nodes of its own
// (network namespaces on a bridge, a cluster name unique to the test, so tests running in parallel
// do not meet), runs `tessera launch --hosts <node>:1,<node>:1 -- train ...` as on two machines,
// with TCP between the nodes, and takes the cluster down again, also when the test fails. Where
// namespaces cannot be made (not root, no iproute2), every test is skipped with the script's reason.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace fs = std::filesystem;
using namespace tessera::testing;

namespace {

constexpr int kSkipCode = 77;  // scripts/cluster.sh: no namespaces here

const std::string kRun =
    "--model.n_layer 2 --model.n_head 2 --model.n_embd 32 --model.seq_len 32 --model.dropout 0.1 "
    "--train.batch_size 8 --train.micro_batch_size 2 --train.eval_every 0 --train.eval_batches 1 "
    "--train.sample_tokens 0 --optim.warmup_steps 2 --optim.lr 0.003 --log.progress plain --log.every 1 "
    "--log.peak_gflops 1000 --parallel.bucket_mb 0.01 --train.steps 4";

CliResult run_shell(const std::string& command) {
  CliResult r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

std::string cluster_script() {
  const char* source = std::getenv("TESSERA_SOURCE_DIR");
  return (fs::path(source != nullptr ? source : ".") / "scripts" / "cluster.sh").string();
}

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_LE(std::abs(got[i] - want[i]), rel * std::abs(want[i]))
        << what << ": loss " << i << " " << got[i] << " vs " << want[i];
  }
}

// Bytes the node sent over its link, from the bridge side of its veth (what the bridge received).
long long bytes_from_node(const std::string& veth) {
  const CliResult r = run_shell("cat /sys/class/net/" + veth + "/statistics/rx_bytes");
  return r.exit_code == 0 ? std::atoll(r.output.c_str()) : -1;
}

class Cluster : public ::testing::Test {
 protected:
  // A cluster name of up to 8 characters from the test's name: unique to the test, and the same
  // on every run, so a cluster left by a killed run is removed by the next `up` of that test.
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    name_ = "t" + std::to_string(std::hash<std::string>{}(std::string(info->test_suite_name()) + "." + info->name()) %
                                 10'000'000);
    root_ = fs::temp_directory_path() / ("tessera_cluster_" + name_ + "_" + std::to_string(::getpid()));
    fs::create_directories(root_);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    ::setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    ::setenv("ASAN_OPTIONS", "detect_leaks=0", 0);  // the launched jobs run under mpirun
  }

  void TearDown() override {
    if (up_) {
      const CliResult down = run_shell(cluster_script() + " down --name " + name_);
      EXPECT_EQ(down.exit_code, 0) << down.output;
    }
    fs::remove_all(root_);
  }

  // Brings up `nodes` nodes and points OpenMPI at them (the exports of `cluster.sh env`). False
  // when namespaces cannot be made here: the caller skips with skip_reason_.
  bool bring_up(int nodes, const std::string& options = "") {
    const CliResult up = run_shell(cluster_script() + " up " + std::to_string(nodes) + " --name " + name_ + " " + options);
    if (up.exit_code == kSkipCode) {
      skip_reason_ = up.output;
      return false;
    }
    up_ = true;
    EXPECT_EQ(up.exit_code, 0) << up.output;
    const CliResult env = run_shell(cluster_script() + " env --name " + name_);
    EXPECT_EQ(env.exit_code, 0) << env.output;
    std::istringstream lines(env.output);
    for (std::string line; std::getline(lines, line);) {
      // export NAME=value or export NAME='value'
      const auto eq = line.find('=');
      if (!line.starts_with("export ") || eq == std::string::npos) continue;
      std::string value = line.substr(eq + 1);
      if (value.size() >= 2 && value.front() == '\'') value = value.substr(1, value.size() - 2);
      ::setenv(line.substr(7, eq - 7).c_str(), value.c_str(), 1);
    }
    return up.exit_code == 0 && env.exit_code == 0;
  }

  std::string node(int i) const { return name_ + "-node" + std::to_string(i); }
  std::string veth(int i) const { return "tcv" + name_ + "-" + std::to_string(i); }
  std::string two_nodes() const { return node(1) + ":1," + node(2) + ":1"; }

  std::string prepare_dataset() {
    const CliResult r = prepare_test_dataset(root_.string(), 40000, 300);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return (root_ / "data").string();
  }

  std::vector<double> losses(const std::string& run) const {
    return train_losses_of((root_ / run / "metrics.jsonl").string());
  }

  std::string name_;
  fs::path root_;
  bool up_ = false;
  std::string skip_reason_;
};

// dp 2 with ZeRO-2, one rank on each of two nodes: the gradients cross the link (reduce-scatter
// and all-gather over TCP), and every step's loss equals one process's.
TEST_F(Cluster, DataParallelZero2OnTwoNodesTrainsLikeOneProcess) {
  if (!bring_up(2)) GTEST_SKIP() << skip_reason_;
  const std::string data = prepare_dataset();
  const std::string run = "train --data.dir " + data + " " + kRun + " --train.out_dir " + root_.string();
  const CliResult one = run_tessera(run + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const long long before = bytes_from_node(veth(2));
  const CliResult two = run_tessera("launch -n 2 --hosts " + two_nodes() + " -- " + run +
                                    "/dp2 --parallel.dp 2 --parallel.zero_stage 2");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const std::vector<double> want = losses("one");
  ASSERT_EQ(want.size(), 4u);
  expect_close(losses("dp2"), want, 1e-5, "dp 2, ZeRO-2, on two nodes");
  // The reduction went over the link: node 2 sent at least what its communicator counts as sent
  // (the ring volume of every step's reduce-scatter and all-gather).
  double counted = 0;
  std::ifstream metrics(root_ / "dp2" / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.value("kind", "") == "train") counted += j.value("dp_bytes_sent", 0.0);
  }
  EXPECT_GT(counted, 0);
  EXPECT_GE(static_cast<double>(bytes_from_node(veth(2)) - before), counted) << "bytes node 2 sent over its link";
}

// Two pipeline stages, one on each node: activations and their gradients cross the link.
TEST_F(Cluster, PipelineOnTwoNodesTrainsLikeOneProcess) {
  if (!bring_up(2, "--bandwidth 1gbit")) GTEST_SKIP() << skip_reason_;
  const std::string data = prepare_dataset();
  const std::string run = "train --data.dir " + data + " " + kRun + " --train.out_dir " + root_.string();
  const CliResult one = run_tessera(run + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const long long before = bytes_from_node(veth(1));
  const CliResult two = run_tessera("launch -n 2 --hosts " + two_nodes() + " -- " + run + "/pp2 --parallel.pp 2");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const std::vector<double> want = losses("one");
  ASSERT_EQ(want.size(), 4u);
  expect_close(losses("pp2"), want, 1e-5, "pp 2 on two nodes");
  // Stage 0 sent each microbatch's activations over the link: 4 steps × 4 microbatches × B·T·C
  // floats (2 × 32 × 32).
  EXPECT_GE(bytes_from_node(veth(1)) - before, 4 * 4 * 2 * 32 * 32 * 4) << "bytes node 1 sent over its link";
}

}  // namespace
