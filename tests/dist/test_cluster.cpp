// Multi-node runs on the test cluster of scripts/cluster.sh: every test brings up nodes of its own
// (network namespaces on a bridge, a cluster name unique to the test, so tests running in parallel
// do not meet), runs `tessera launch --hosts <node>:1,<node>:1 -- train ...` as on two machines,
// with TCP between the nodes, and takes the cluster down again, also when the test fails. Where
// namespaces cannot be made (not root, no iproute2), every test is skipped with the script's reason.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "plan/cluster.h"
#include "plan/collectives.h"

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

fs::path source_dir() {
  const char* source = std::getenv("TESSERA_SOURCE_DIR");
  return fs::path(source != nullptr ? source : ".");
}

std::string cluster_script() { return (source_dir() / "scripts" / "cluster.sh").string(); }

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rel,
                  const std::string& what) {
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

// Starts `command` through the shell in the background, its output into `log`; returns its pid.
pid_t spawn(const std::string& command, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    const std::string line = "exec " + command + " > " + log + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// Waits up to `seconds` for `pid`; its exit status as a shell gives it, or -1 (and it is killed)
// when it is still running then.
int wait_for(pid_t pid, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Waits up to `seconds` for `done` to hold.
bool eventually(const std::function<bool()>& done, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class Cluster : public ::testing::Test {
 protected:
  // A cluster name of up to 8 characters from the test's name and this process: unique to the
  // test and the run (the same test may run in two checkouts at once). This process owns it, so a
  // cluster left by a run killed on its timeout is removed by the next `up` of any test.
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const size_t hash = std::hash<std::string>{}(std::string(info->test_suite_name()) + "." + info->name());
    name_ = fmt::format("t{}", (hash ^ static_cast<size_t>(::getpid())) % 10'000'000);
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
    const CliResult up =
        run_shell(fmt::format("{} up {} --name {} --owner {} {}", cluster_script(), nodes, name_, ::getpid(), options));
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

  // `command` run on node i, as when logged in there (the environment kept).
  std::string on_node(int i, const std::string& command) const {
    return cluster_script() + " run " + node(i) + " -- " + command;
  }
  // What is still running inside the cluster's nodes: one line per process.
  std::string processes_left() const { return run_shell(cluster_script() + " pids --name " + name_).output; }
  // The step of the run's last checkpoint (its `latest`), 0 when it has none.
  int last_checkpoint_step(const std::string& run) const {
    const std::string latest = read_file((root_ / run / "checkpoints" / "latest").string());
    const auto digits = latest.find_first_of("123456789");
    return digits == std::string::npos ? 0 : std::atoi(latest.c_str() + digits);
  }

  // A dp 2 run on two nodes, launched from node 1 as on two machines, that a fault ends in the
  // middle: `fault` is called once a checkpoint has been saved and the run is past it. Checks
  // that the job ends within the watchdog's timeout plus a margin, with `expected` in its output,
  // that no process is left on either node, and that the last checkpoint resumes on the same two
  // nodes (after `repair`) and on one node.
  void expect_fault_ends_the_job(const std::function<void()>& fault, const std::string& expected,
                                 const std::function<void()>& repair) {
    const std::string data = prepare_dataset();
    const double timeout = 3;
    const std::string run = "train --data.dir " + data + " " + kRun + " --train.steps 100000 --checkpoint.every 3 " +
                            "--parallel.dp 2 --parallel.timeout_seconds 3 --train.out_dir " + root_.string();
    const std::string log = (root_ / "fault.log").string();
    const pid_t job =
        spawn(on_node(1, tessera_exe() + " launch -n 2 --hosts " + two_nodes() + " -- " + run + "/cut"), log);
    const bool past_a_checkpoint = eventually(
        [&] { return last_checkpoint_step("cut") >= 3 && std::regex_search(read_file(log), std::regex("step +5/")); },
        60);
    if (!past_a_checkpoint) {
      wait_for(job, 0);
      FAIL() << "the run did not get past its first checkpoint:\n" << read_file(log);
    }
    const auto start = std::chrono::steady_clock::now();
    fault();
    const int code = wait_for(job, timeout + 30);
    const double took = seconds_since(start);
    std::printf("the job ended %.1f s after the fault (watchdog timeout %.0f s)\n", took, timeout);
    const std::string output = read_file(log);
    ASSERT_NE(code, -1) << "the job did not end within " << timeout + 30 << " s of the fault:\n" << output;
    EXPECT_NE(code, 0) << output;
    // The watchdog's timeout and its question to the silent peer, then the OpenMPI daemons' loss
    // of a peer that does not answer (3 TCP retransmissions on the cluster's nodes) or of a child
    // that died. A cut link measured 10-13 s in all on 2 cores; without the retransmission limit,
    // about 15 minutes.
    EXPECT_LT(took, timeout + 20) << output;
    EXPECT_TRUE(std::regex_search(output, std::regex(expected))) << "no /" << expected << "/ in:\n" << output;
    EXPECT_TRUE(eventually([&] { return processes_left().empty(); }, 5)) << "left on the nodes:\n" << processes_left();

    const int saved = last_checkpoint_step("cut");
    ASSERT_GE(saved, 3);
    repair();
    const std::string resume = "train --data.dir " + data + " " + kRun + " --parallel.dp 2 --train.steps " +
                               std::to_string(saved + 2) + " --train.allow_changes true --checkpoint.resume " +
                               (root_ / "cut").string() + " --train.out_dir " + root_.string();
    const CliResult two =
        run_shell(on_node(1, tessera_exe() + " launch -n 2 --hosts " + two_nodes() + " -- " + resume + "/two"));
    EXPECT_EQ(two.exit_code, 0) << two.output;
    EXPECT_NE(two.output.find("resumed from"), std::string::npos) << two.output;
    const CliResult one =
        run_shell(on_node(1, tessera_exe() + " launch -n 2 --hosts " + node(1) + ":2 -- " + resume + "/one"));
    EXPECT_EQ(one.exit_code, 0) << one.output;
    EXPECT_EQ(losses("one"), losses("two")) << "the same checkpoint resumed on one node and on two";
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
  const CliResult two =
      run_tessera("launch -n 2 --hosts " + two_nodes() + " -- " + run + "/dp2 --parallel.dp 2 --parallel.zero_stage 2");
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

// Two pipeline stages, one on each node: activations and their gradients cross a link shaped to
// 1 Gbit/s.
TEST_F(Cluster, PipelineOnTwoNodesTrainsLikeOneProcess) {
  if (!bring_up(2, "--bandwidth 1gbit")) GTEST_SKIP() << skip_reason_;
  const std::string data = prepare_dataset();
  const std::string run = "train --data.dir " + data + " " + kRun + " --train.out_dir " + root_.string();
  const CliResult one = run_tessera(run + "/one");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  // Through launch's own options this time, in place of the OpenMPI variables of `cluster.sh env`.
  const char* agent = std::getenv("OMPI_MCA_plm_rsh_agent");
  const char* network = std::getenv("OMPI_MCA_btl_tcp_if_include");
  ASSERT_TRUE(agent != nullptr && network != nullptr) << "cluster.sh env gave no agent or network";
  for (const char* variable :
       {"OMPI_MCA_plm_rsh_agent", "OMPI_MCA_btl", "OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_oob_tcp_if_include"}) {
    ::unsetenv(variable);
  }
  const long long before = bytes_from_node(veth(1));
  const CliResult two = run_tessera("launch -n 2 --hosts " + two_nodes() + " --launch-agent " + std::string(agent) +
                                    " --network " + network + " -- " + run + "/pp2 --parallel.pp 2");
  ASSERT_EQ(two.exit_code, 0) << two.output;
  const std::vector<double> want = losses("one");
  ASSERT_EQ(want.size(), 4u);
  expect_close(losses("pp2"), want, 1e-5, "pp 2 on two nodes");
  // Stage 0 sent each microbatch's activations over the link: 4 steps × 4 microbatches × B·T·C
  // floats (2 × 32 × 32).
  EXPECT_GE(bytes_from_node(veth(1)) - before, 4 * 4 * 2 * 32 * 32 * 4) << "bytes node 1 sent over its link";
}

// The link of node 2 cut in the middle of a step: the rank on node 1 waits in the gradient
// all-reduce until its watchdog names it, and the job ends with nothing left on either node.
TEST_F(Cluster, ALinkCutInTheMiddleOfARunEndsTheJob) {
  if (!bring_up(2)) GTEST_SKIP() << skip_reason_;
  const std::string link = cluster_script() + " link " + node(2) + " {} --name " + name_;
  const auto set_link = [&](const std::string& state) {
    const CliResult r = run_shell(std::regex_replace(link, std::regex("\\{\\}"), state));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  };
  expect_fault_ends_the_job(
      [&] { set_link("down"); },
      "tessera watchdog: rank 0 of 2: [a-z_]+ #[0-9]+ on [a-z]+ \\(group ranks 0,1\\) did not complete within 3\\.0 s; "
      "rank 1 does not answer",
      [&] { set_link("up"); });
}

// A host cluster of one 2-core node (as `plan --calibrate-here` writes one, its curves cut short):
// what `--calibrate-here --hosts` adds the link between nodes to.
constexpr const char* kOneNode = R"([cluster]
name = "here"
devices_per_node = 0
nodes = 1

[cluster.device]
name = "a 2-core machine"
peak_tflops_fp32 = 0.2
peak_tflops_bf16 = 0.4
memory_gib = 16
reserved_gib = 2
memory_bandwidth_gbps = 20

[cluster.intra_node]
bandwidth_gbps = 7.5
latency_us = 3.25

[cluster.inter_node]
bandwidth_gbps = 7.5
latency_us = 3.25

[cluster.efficiency]
gemm = 0.9
memory = 1
link = 1

[cluster.host]
cores = 2

[[cluster.host.process]]
threads = 1
memory_bandwidth_gbps = 12
kernel_overhead_us = 0.5
gemm_gflop = [0.001, 1]
gemm_efficiency = [0.3, 0.9]

[[cluster.host.process]]
threads = 2
memory_bandwidth_gbps = 20
kernel_overhead_us = 2
gemm_gflop = [0.001, 1]
gemm_efficiency = [0.2, 0.85]
)";

// The link between two nodes shaped to 200 Mbit/s each way, measured by `plan --calibrate-here
// --hosts` into a cluster file of one node: the inter-node link comes out near the shaped rate,
// the intra-node link and everything else of the node stay, and since both nodes are this
// machine, each is written as half of it.
TEST_F(Cluster, CalibrateHereMeasuresTheLinkBetweenNodes) {
  if (!bring_up(2, "--bandwidth 200mbit")) GTEST_SKIP() << skip_reason_;
  const std::string file = (root_ / "cluster.toml").string();
  {
    std::ofstream out(file);
    out << kOneNode;
  }
  const tessera::plan::ClusterSpec before = tessera::plan::load_cluster(file);
  // Through the command's own options, as on machines without the variables of `cluster.sh env`.
  const std::string agent = std::getenv("OMPI_MCA_plm_rsh_agent"), network = std::getenv("OMPI_MCA_btl_tcp_if_include");
  for (const char* variable :
       {"OMPI_MCA_plm_rsh_agent", "OMPI_MCA_btl", "OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_oob_tcp_if_include"}) {
    ::unsetenv(variable);
  }
  const CliResult r = run_tessera("plan --calibrate-here --hosts " + two_nodes() + " --launch-agent " + agent +
                                  " --network " + network + " --out " + file);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::printf("%s", r.output.c_str());
  const tessera::plan::ClusterSpec after = tessera::plan::load_cluster(file);
  // One way, a token bucket passes about its rate; TCP and the ranks' copies take some of it.
  std::smatch one_way;
  ASSERT_TRUE(std::regex_search(r.output, one_way, std::regex("one way ([0-9.]+) Gbit/s"))) << r.output;
  EXPECT_GE(std::stod(one_way[1]) * 1e3, 100) << r.output;
  EXPECT_LE(std::stod(one_way[1]) * 1e3, 220) << r.output;
  // The file's link is what the runtime's all-reduce achieves: on two ranks it crosses the link
  // once each way one after the other (reduce, then broadcast), so about half the one-way rate
  // (measured 114 of 192 Mbit/s).
  const double mbit = after.inter_node.bandwidth * after.efficiency.link * 8 / 1e6;
  EXPECT_GE(mbit, 50) << r.output;
  EXPECT_LE(mbit, 220) << r.output;
  EXPECT_GT(after.inter_node.latency, 0);
  EXPECT_LT(after.inter_node.latency, 0.01) << "a bridge on one machine answers within milliseconds";
  EXPECT_DOUBLE_EQ(after.intra_node.bandwidth, before.intra_node.bandwidth);
  EXPECT_DOUBLE_EQ(after.intra_node.latency, before.intra_node.latency);
  EXPECT_EQ(after.efficiency, before.efficiency);
  EXPECT_EQ(after.devices_per_node, 1);
  EXPECT_EQ(after.max_nodes, 2);
  // One kernel under both nodes: each has one of the two cores, half the peak and the memory.
  EXPECT_EQ(after.host.cores, 1);
  ASSERT_EQ(after.host.processes.size(), 1u);
  EXPECT_EQ(after.host.processes.front(), before.host.processes.front());
  EXPECT_DOUBLE_EQ(after.device.peak_flops_fp32, before.device.peak_flops_fp32 / 2);
  EXPECT_DOUBLE_EQ(after.device.memory_bytes, before.device.memory_bytes / 2);
  // The link while both nodes compute: no faster than idle, and the compute beside it no
  // quicker (both nodes' transfers run on this machine's two cores).
  EXPECT_NE(r.output.find("while both nodes compute"), std::string::npos) << r.output;
  EXPECT_GT(after.inter_node.busy_bandwidth, 0);
  EXPECT_LE(after.inter_node.busy_bandwidth, after.inter_node.bandwidth);
  EXPECT_GE(after.inter_node.compute_slowdown, 1.0);
  EXPECT_LT(after.inter_node.compute_slowdown, 100.0);
  // The planner now places a dp 2 group of one rank per node on the measured link.
  const tessera::plan::Group dp = tessera::plan::group_on(after, 2, 1);
  EXPECT_DOUBLE_EQ(dp.link.bandwidth, after.inter_node.bandwidth * after.efficiency.link);
  EXPECT_DOUBLE_EQ(dp.busy_bandwidth, after.inter_node.busy_bandwidth * after.efficiency.link);
}

// Without a node's cluster file there is nothing to add the link to: named before anything runs.
TEST(CalibrateNodes, NeedsTheClusterFileOfANode) {
  const std::string missing = (fs::temp_directory_path() / "tessera-no-such-cluster.toml").string();
  const CliResult r = run_tessera("plan --calibrate-here --hosts nowhere1:1,nowhere2:1 --out " + missing);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("measure a node first (tessera plan --calibrate-here --out " + missing), std::string::npos)
      << r.output;
  const CliResult agent = run_tessera("plan --calibrate-here --launch-agent rsh --out " + missing);
  EXPECT_NE(agent.exit_code, 0);
  EXPECT_NE(agent.output.find("--launch-agent and --network go with --hosts"), std::string::npos) << agent.output;
}

// SIGKILL to every process on node `node` whose command line starts with `program`; false when
// there is none.
bool kill_on_node(const std::string& node, const std::string& program) {
  bool killed = false;
  std::istringstream pids(run_shell("ip netns pids " + node).output);
  for (std::string pid; pids >> pid;) {
    if (read_file("/proc/" + pid + "/cmdline").starts_with(program)) killed = ::kill(std::stoi(pid), SIGKILL) == 0;
  }
  return killed;
}

// The rank on node 2 killed: its daemon reports it, and the job ends naming it.
TEST_F(Cluster, ARankKilledOnANodeEndsTheJob) {
  if (!bring_up(2)) GTEST_SKIP() << skip_reason_;
  expect_fault_ends_the_job([&] { ASSERT_TRUE(kill_on_node(node(2), tessera_exe())) << "no rank on " << node(2); },
                            "rank 1 with PID [0-9]+ on node " + node(2) + " exited on signal 9", [] {});
}

// Node 2's OpenMPI daemon killed: mpirun loses it and ends the job, and the rank it started goes
// with it.
TEST_F(Cluster, TheDaemonOfANodeKilledEndsTheJob) {
  if (!bring_up(2)) GTEST_SKIP() << skip_reason_;
  expect_fault_ends_the_job([&] { ASSERT_TRUE(kill_on_node(node(2), "orted")) << "no daemon on " << node(2); },
                            "ORTE has lost communication with a remote daemon.\\s+HNP daemon +: \\S+ on node " +
                                node(1) + "\\s+Remote daemon: \\S+ on node " + node(2),
                            [] {});
}

// Launch errors, each named before any rank trains: a node without the tessera executable (its
// folder hidden from what OpenMPI starts there), and fewer slots than ranks.
TEST_F(Cluster, LaunchErrorsAreNamedBeforeAnyRankTrains) {
  if (!bring_up(2)) GTEST_SKIP() << skip_reason_;
  const std::string data = prepare_dataset();
  const std::string run =
      "train --data.dir " + data + " " + kRun + " --parallel.dp 2 --train.out_dir " + root_.string();
  const CliResult hide =
      run_shell(cluster_script() + " hide " + node(2) + " " + fs::path(tessera_exe()).parent_path().string());
  ASSERT_EQ(hide.exit_code, 0) << hide.output;
  const CliResult missing =
      run_shell(on_node(1, tessera_exe() + " launch -n 2 --hosts " + two_nodes() + " -- " + run + "/x"));
  EXPECT_NE(missing.exit_code, 0) << missing.output;
  EXPECT_TRUE(std::regex_search(
      missing.output, std::regex("could not access\\s+or execute an executable:\\s+Executable: " + tessera_exe() +
                                 "\\s+Node: " + node(2))))
      << missing.output;
  EXPECT_FALSE(std::regex_search(missing.output, std::regex("step +[0-9]+/"))) << missing.output;
  EXPECT_TRUE(eventually([&] { return processes_left().empty(); }, 5)) << "left on the nodes:\n" << processes_left();

  const CliResult slots =
      run_shell(on_node(1, tessera_exe() + " launch -n 3 --hosts " + two_nodes() + " -- " + run + "/y"));
  EXPECT_NE(slots.exit_code, 0) << slots.output;
  EXPECT_NE(
      slots.output.find("error: --hosts " + two_nodes() + " offers 2 slot(s) in all, fewer than the 3 ranks of -n 3"),
      std::string::npos)
      << slots.output;
  EXPECT_EQ(slots.output.find("mpirun -n"), std::string::npos) << slots.output;
}

}  // namespace
