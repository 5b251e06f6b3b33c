// A CPU machine whose cores a run's processes share: efficiency curves by size, the cluster TOML
// that `tessera plan --calibrate-here` writes and reads back, and what one process of a run sees.
#include <gtest/gtest.h>

#include <cmath>

#include "plan/device_time.h"
#include "plan/estimate.h"
#include "plan_test_util.h"

using namespace tessera;
using namespace tessera::plan;
using test_util::contains;
using test_util::error_of;

namespace {

EfficiencyCurve curve(std::vector<double> gflop, std::vector<double> efficiency) {
  EfficiencyCurve c;
  for (double g : gflop) c.flops.push_back(g * 1e9);
  c.efficiency = std::move(efficiency);
  return c;
}

// Two cores of 50 GFLOP/s each; a process streams 20 GB/s alone and the machine 30 GB/s.
ClusterSpec two_core_host() {
  ClusterSpec c;
  c.name = "two";
  c.description = "a test machine";
  c.devices_per_node = 0;
  c.max_nodes = 1;
  c.device = {"cpu", 100e9, 100e9, 16.0 * (1 << 30), 1.0 * (1 << 30), 30e9};
  c.intra_node = {5e9, 20e-6};
  c.inter_node = c.intra_node;
  c.efficiency.memory = 1.0;
  c.efficiency.link = 1.0;
  c.efficiency.kernel_overhead = 2e-6;
  c.host.cores = 2;
  ProcessSpec one{1, 20e9, 0.5e-6, curve({0.001, 1.0}, {0.4, 0.9}), curve({0.01}, {0.5}), curve({0.01}, {0.6})};
  ProcessSpec both{2, 30e9, 2e-6, curve({0.001, 1.0}, {0.1, 0.8}), curve({0.01}, {0.4}), curve({0.01}, {0.45})};
  c.host.processes = {one, both};
  c.host.shared_factor = {1, 2, 4};
  c.host.shared_latency = {100e-6, 1e-3, 2e-3};
  c.validate();
  return c;
}

}  // namespace

TEST(PlanHostCluster, CurvesInterpolateInLogFlopsAndHoldTheirEnds) {
  const EfficiencyCurve c = curve({0.001, 0.1}, {0.2, 0.8});
  EXPECT_DOUBLE_EQ(c.at(1e3), 0.2);
  EXPECT_DOUBLE_EQ(c.at(1e12), 0.8);
  EXPECT_NEAR(c.at(0.01e9), 0.5, 1e-12);  // halfway in log FLOPs
  // A cluster with a curve times a product by it; one without keeps its single constant.
  ClusterSpec flat = two_core_host();
  flat.host = {};
  flat.devices_per_node = 1;
  const Gemm small{"g", 10, 10, 5};  // 1000 FLOPs
  const double without = gemm_seconds(flat, Precision::Fp32, small);
  flat.efficiency.gemm_curve = c;
  EXPECT_GT(gemm_seconds(flat, Precision::Fp32, small), without);
  EXPECT_DOUBLE_EQ(gemm_efficiency(flat, small), 0.2);
}

TEST(PlanHostCluster, TheTomlReadsBackAsWritten) {
  const ClusterSpec c = two_core_host();
  const std::string text = cluster_toml(c);
  toml::table t = toml::parse(text);
  const ClusterSpec back = read_cluster_config(config::TableReader(*t["cluster"].as_table(), "cluster"));
  EXPECT_EQ(back.name, c.name);
  EXPECT_EQ(back.devices_per_node, 0);
  EXPECT_EQ(back.host.cores, 2);
  EXPECT_EQ(back.host.shared_factor, c.host.shared_factor);
  ASSERT_EQ(back.host.shared_latency.size(), 3u);
  EXPECT_NEAR(back.host.shared_latency[2], 2e-3, 1e-12);
  ASSERT_EQ(back.host.processes.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const ProcessSpec &a = back.host.processes[i], &b = c.host.processes[i];
    EXPECT_EQ(a.threads, b.threads);
    EXPECT_NEAR(a.memory_bandwidth, b.memory_bandwidth, 1e-6 * b.memory_bandwidth);
    EXPECT_NEAR(a.kernel_overhead, b.kernel_overhead, 1e-6 * b.kernel_overhead);
    EXPECT_EQ(a.gemm.efficiency, b.gemm.efficiency);
    EXPECT_EQ(a.attention_backward.efficiency, b.attention_backward.efficiency);
    for (size_t k = 0; k < b.gemm.flops.size(); ++k) EXPECT_NEAR(a.gemm.flops[k], b.gemm.flops[k], 1e-9 * b.gemm.flops[k]);
  }
  EXPECT_NEAR(back.device.peak_flops_fp32, c.device.peak_flops_fp32, 1e-6 * c.device.peak_flops_fp32);
  // A host needs its one-thread process; processes need a host.
  EXPECT_TRUE(contains(error_of([&] {
                         toml::table bad = toml::parse(text.substr(0, text.find("[[cluster.host.process]]")));
                         read_cluster_config(config::TableReader(*bad["cluster"].as_table(), "cluster"));
                       }),
                       "needs a [[cluster.host.process]] entry for 1 thread"));
}

TEST(PlanHostCluster, ProcessesShareTheCoresAndTheMemory) {
  const ClusterSpec c = two_core_host();
  // One process: both cores, the 2-thread measurements.
  const ClusterSpec one = process_view(c, 1);
  EXPECT_DOUBLE_EQ(one.device.peak_flops_fp32, 100e9);
  EXPECT_EQ(one.efficiency.gemm_curve, c.host.processes[1].gemm);
  EXPECT_DOUBLE_EQ(one.device.memory_bandwidth, 30e9);
  // Two: a core each, the 1-thread measurements, half the machine's bandwidth and memory.
  const ClusterSpec two = process_view(c, 2);
  EXPECT_DOUBLE_EQ(two.device.peak_flops_fp32, 50e9);
  EXPECT_EQ(two.efficiency.attention_curve, c.host.processes[0].attention);
  EXPECT_DOUBLE_EQ(two.device.memory_bandwidth, 15e9);
  EXPECT_DOUBLE_EQ(two.usable_memory(), c.usable_memory() / 2);
  EXPECT_DOUBLE_EQ(two.efficiency.kernel_overhead, 0.5e-6);
  // Eight: one thread each, time-sliced four to a core.
  const ClusterSpec eight = process_view(c, 8);
  EXPECT_DOUBLE_EQ(eight.device.peak_flops_fp32, 50e9 / 4);
  EXPECT_DOUBLE_EQ(eight.efficiency.kernel_overhead, 4 * 0.5e-6);
  EXPECT_DOUBLE_EQ(eight.device.memory_bandwidth, 30e9 / 8);
  // A collective waits for its busy partner (and its turn): the latency measured with 4 processes
  // to a core, between the measured points for 3, and with a core each for two.
  EXPECT_DOUBLE_EQ(eight.intra_node.latency, 2e-3);
  EXPECT_DOUBLE_EQ(process_view(c, 6).intra_node.latency, 1.5e-3);
  EXPECT_DOUBLE_EQ(two.intra_node.latency, 100e-6);
  // Any number of processes fits one node of an unbounded host.
  EXPECT_EQ(c.max_devices(), 0);
  EXPECT_EQ(c.devices_on_a_node(8), 8);
  // Accelerator clusters are untouched.
  ClusterSpec gpu = load_cluster("a100-80gb", test_util::config_dirs());
  EXPECT_EQ(process_view(gpu, 8).device.peak_flops_bf16, gpu.device.peak_flops_bf16);
}

TEST(PlanHostCluster, EightProcessesOfTwoCoresTakeAboutAsLongAsOne) {
  // The same work spread over eight time-sliced processes (dp 8) runs at the machine's rate, as one
  // process with both cores does, give or take the curves and the gradient all-reduce.
  const ClusterSpec c = two_core_host();
  config::ModelConfig m;
  m.n_layer = 2;
  m.n_head = 4;
  m.n_embd = 256;
  m.seq_len = 128;
  m.vocab_size = 1024;
  const Estimate one = estimate(m, parse_layout("mb=8,gb=8,precision=fp32,flash=true"), c);
  const Estimate eight = estimate(m, parse_layout("dp=8,mb=1,gb=8,precision=fp32,flash=true"), c);
  EXPECT_GT(eight.time.compute, 0.5 * one.time.compute);
  EXPECT_LT(eight.time.compute, 4 * one.time.compute);
  EXPECT_GT(eight.time.dp_comm, 0);
}
