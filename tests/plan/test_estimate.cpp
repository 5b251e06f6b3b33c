// Throughput against Megatron PTD-P Table 1, and the planner's sanity on the same rows.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "config/toml_reader.h"
#include "plan/collectives.h"
#include "plan/device_time.h"
#include "plan/engine_memory.h"
#include "plan/estimate.h"
#include "plan/planner.h"
#include "plan/published.h"
#include "plan/report.h"
#include "plan_test_util.h"

using namespace tessera;
using namespace tessera::plan;

TEST(PlanThroughput, Table1RowsWithinFifteenPercent) {
  ClusterSpec c = test_util::a100();
  std::vector<AccuracyRow> rows = table1_accuracy(c);
  ASSERT_EQ(rows.size(), 10u);
  std::cout << format_accuracy_table(rows, c);
  for (const auto& a : rows) {
    EXPECT_LE(std::abs(a.error), 0.15) << a.row.config << ": predicted " << a.predicted.tflops_per_device << " TF/s, published "
                                       << a.row.tflops_per_gpu;
    // The reported TF/s is the paper's F over the predicted step time.
    const double F = narayanan_flops_per_iteration(published_model(a.row), a.row.batch);
    EXPECT_NEAR(a.predicted.tflops_per_device, F / a.predicted.time.step / a.row.gpus / 1e12, 1e-9);
  }
}

TEST(PlanThroughput, AccuracyDocumentKeepsTheCurrentTable) {
  ClusterSpec c = test_util::a100();
  const std::string table = format_accuracy_table(table1_accuracy(c), c);
  std::ifstream in(test_util::source_file("docs/planner-accuracy.md"));
  ASSERT_TRUE(in.good()) << "docs/planner-accuracy.md is missing";
  std::stringstream doc;
  doc << in.rdbuf();
  EXPECT_NE(doc.str().find(table), std::string::npos)
      << "docs/planner-accuracy.md is stale; paste the output of `tessera plan --published`:\n"
      << table;
}

TEST(PlanThroughput, ShippedGemmEfficiencyIsTheCalibratedOne) {
  // The one calibrated constant: the A100 file's efficiency.gemm is the least-squares value, rounded.
  ClusterSpec c = test_util::a100();
  EXPECT_NEAR(calibrate_gemm_efficiency(c), c.efficiency.gemm, 0.01);
}

TEST(PlanThroughput, PublishedLayoutsFitInMemory) {
  ClusterSpec c = test_util::a100();
  for (const auto& a : table1_accuracy(c)) {
    EXPECT_TRUE(a.predicted.fits) << a.row.config << " needs " << a.predicted.memory.memory.total() / (1 << 30) << " GiB";
  }
}

TEST(PlanThroughput, TimeBreakdownAddsUpAndMetricsAgree) {
  ClusterSpec c = test_util::a100();
  for (const auto& a : table1_accuracy(c)) {
    const Estimate& e = a.predicted;
    const TimeBreakdown& t = e.time;
    EXPECT_NEAR(t.compute + t.tp_comm + t.pp_comm + t.bubble + t.dp_comm + t.optimizer, t.step, 1e-9 * t.step);
    EXPECT_GT(t.compute, 0.5 * t.step) << a.row.config;  // these layouts are compute-bound
    EXPECT_NEAR(e.hfu * c.peak_flops(Precision::Bf16) / 1e12, e.tflops_per_device, 1e-9);
    EXPECT_NEAR(e.mfu / e.hfu, e.flops.model() / e.flops.hardware(), 1e-12);
    if (a.row.pp == 1) {
      EXPECT_EQ(t.bubble, 0.0);
    } else {
      EXPECT_GT(t.bubble, 0.0);
    }
  }
}

TEST(PlanSearch, BestLayoutIsAtLeastAsFastAsPublishedAndFits) {
  ClusterSpec c = test_util::a100();
  for (const auto& row : megatron_table1()) {
    config::ModelConfig m = published_model(row);
    PlanRequest r;
    r.devices = row.gpus;
    r.global_batch = row.batch;
    r.top = 3;
    PlanResult result = plan_layouts(m, c, r);
    ASSERT_FALSE(result.best.empty()) << row.config;
    const Estimate& best = result.best.front();
    const Estimate published = estimate(m, published_layout(row), c);
    EXPECT_LE(best.time.step, published.time.step) << row.config << ": best " << to_string(best.layout);
    EXPECT_TRUE(best.fits) << row.config;
    EXPECT_LE(best.memory.memory.total(), c.usable_memory()) << row.config;
    EXPECT_EQ(best.layout.devices(), row.gpus);
    for (size_t i = 1; i < result.best.size(); ++i) EXPECT_LE(result.best[i - 1].time.step, result.best[i].time.step);
    EXPECT_GT(result.considered, result.fitting);
  }
}

TEST(PlanSearch, PrintsTheTableWithMemoryAndThroughput) {
  ClusterSpec c = test_util::a100();
  config::ModelConfig m = published_model(megatron_table1()[4]);
  PlanRequest r;
  r.devices = 512;
  r.global_batch = 1536;
  PlanResult result = plan_layouts(m, c, r);
  const std::string text = format_plan(m, c, r, result);
  std::cout << text;
  for (const char* column : {"params", "grads", "optim", "activ", "comm", "work", "total", "step s", "TF/s/dv", "MFU"}) {
    EXPECT_TRUE(test_util::contains(text, column)) << column;
  }
  EXPECT_TRUE(test_util::contains(text, to_string(result.best.front().layout)));
  const std::string detail = format_estimate(m, c, result.best.front());
  for (auto tag : kMemoryTags) EXPECT_TRUE(test_util::contains(detail, std::string(tag))) << tag;
}

TEST(PlanEstimate, APipelineModelCanReplaceTheClosedForm) {
  ClusterSpec c = test_util::a100();
  const auto& row = megatron_table1()[6];
  config::ModelConfig m = published_model(row);
  Layout l = published_layout(row);
  PipelineModel slow = closed_form_pipeline();
  slow.makespan = [](const config::ParallelLayout& s, const StageTimes& t) { return 2 * closed_form_makespan(s, t); };
  const Estimate base = estimate(m, l, c);
  const Estimate doubled = estimate(m, l, c, slow);
  const double pipeline_part = base.time.step - base.time.dp_comm - base.time.optimizer;
  EXPECT_NEAR(doubled.time.step - base.time.step, pipeline_part, 1e-9 * base.time.step);
  EXPECT_GT(doubled.time.bubble, base.time.bubble);
}

TEST(PlanEstimate, FasterHardwareAndFewerRecomputesHelp) {
  ClusterSpec c = test_util::a100();
  const auto& row = megatron_table1()[5];
  config::ModelConfig m = published_model(row);
  Layout l = published_layout(row);
  const double base = estimate(m, l, c).time.step;
  ClusterSpec better = c;
  better.efficiency.gemm = 0.9;
  EXPECT_LT(estimate(m, l, better).time.step, base);
  ClusterSpec slow_network = c;
  slow_network.inter_node.bandwidth /= 10;
  EXPECT_GT(estimate(m, l, slow_network).time.step, base);
  Layout selective = l;
  selective.recompute = config::RecomputePolicy::Selective;
  selective.sp = true;
  EXPECT_LT(estimate(m, selective, c).time.step, base);
  // H100 is faster than A100 on the same layout.
  EXPECT_LT(estimate(m, l, load_cluster("h100-sxm", test_util::config_dirs())).time.step, base);
}

TEST(PlanEstimate, CpuMachinePredictsAGpt2SmallStep) {
  ClusterSpec cpu = load_cluster("cpu-2core", test_util::config_dirs());
  config::ModelConfig m;
  m.n_layer = 12;
  m.n_head = 12;
  m.n_embd = 768;
  m.vocab_size = 50257;
  m.seq_len = 1024;
  Layout l = parse_layout("mb=4,gb=8,precision=fp32");
  Estimate e = estimate(m, l, cpu);
  EXPECT_TRUE(e.fits);
  // 6 N tokens FLOPs at no more than the measured sgemm ceiling: tens of seconds per step.
  const double lower = 6.0 * static_cast<double>(m.parameter_count()) * 8 * 1024 / 185e9;
  EXPECT_GT(e.time.step, lower);
  EXPECT_LT(e.time.step, 3 * lower);
  EXPECT_LE(e.mfu, 1.0);
}

// Gradient compression in the plan: on 64 data-parallel ranks with one 25 GB/s NIC each, the
// all-gather-based compressors pay for the group's size (each rank receives every other rank's
// part) while PowerSGD's all-reduces of P and Q do not; top-k becomes cheaper as its ratio falls,
// and the step changes only by the data-parallel term.
TEST(PlanCompression, CompressedReductionsFollowTheirVolumes) {
  ClusterSpec c = test_util::a100();
  c.devices_per_node = 1;  // every rank on its own 25 GB/s link
  c.max_nodes = 0;
  const config::ModelConfig m = load_model("gpt2-124m", test_util::config_dirs());
  Layout base = parse_layout("dp=64,mb=8,gb=512");
  const auto dp_time = [&](const std::string& extra) {
    return estimate(m, parse_layout(extra, base), c, closed_form_pipeline()).time;
  };
  const TimeBreakdown dense = dp_time("");
  const TimeBreakdown power = dp_time("compression=powersgd,compression_rank=4");
  const TimeBreakdown sparse = dp_time("compression=topk,compression_ratio=0.001");
  const TimeBreakdown sparser = dp_time("compression=topk,compression_ratio=0.0001");
  const TimeBreakdown qsgd = dp_time("compression=qsgd");
  const TimeBreakdown signs = dp_time("compression=onebit");
  EXPECT_LT(power.dp_comm, dense.dp_comm / 5) << "PowerSGD rank 4 sends a few percent of the gradient";
  EXPECT_LT(sparser.dp_comm, sparse.dp_comm);
  EXPECT_GT(qsgd.dp_comm, dense.dp_comm) << "a byte per element from each of 63 peers outweighs one all-reduce";
  EXPECT_LT(signs.dp_comm, qsgd.dp_comm);
  EXPECT_DOUBLE_EQ(power.compute, dense.compute);
  EXPECT_NEAR(power.step - dense.step, power.dp_comm - dense.dp_comm, 1e-12);
  EXPECT_EQ(to_string(parse_layout("compression=topk,compression_ratio=0.05")).find("compression=topk,compression_ratio=0.05") !=
                std::string::npos,
            true);
  // Where the cluster measured the engine's top-k work per element, it replaces the stream model
  // when slower: every element of the rank's gradient goes through it once.
  ClusterSpec measured = c;
  measured.efficiency.kernels.top_k = 5e-9;
  const TimeBreakdown timed = estimate(m, parse_layout("compression=topk,compression_ratio=0.001", base), measured,
                                       closed_form_pipeline()).time;
  EXPECT_GT(timed.dp_comm, sparse.dp_comm);
  EXPECT_LE(timed.dp_comm - sparse.dp_comm, 5e-9 * static_cast<double>(m.parameter_count()) * 1.0001);
  measured.efficiency.kernels.top_k = 1e-15;  // faster than its bytes: the stream model stays
  EXPECT_DOUBLE_EQ(estimate(m, parse_layout("compression=topk,compression_ratio=0.001", base), measured,
                            closed_form_pipeline()).time.dp_comm,
                   sparse.dp_comm);
  EXPECT_NE(test_util::error_of([] { parse_layout("compression=gzip"); }).find("must be none, topk"), std::string::npos);
  EXPECT_NE(test_util::error_of([] { parse_layout("compression_ratio=2"); }).find("needs a fraction in (0, 1]"),
            std::string::npos);
}

namespace {

// Two one-device nodes of the 2-core CPU joined by 1 Gbit/s, and a 124M model on 256 tokens.
ClusterSpec two_nodes_at_one_gbit() {
  ClusterSpec c = load_cluster("cpu-2core", test_util::config_dirs());
  c.devices_per_node = 1;
  c.max_nodes = 2;
  c.inter_node.bandwidth = 0.125e9;
  return c;
}
config::ModelConfig gpt2_124m_at_256() {
  config::ModelConfig m = load_model("gpt2-124m", test_util::config_dirs());
  m.seq_len = 256;
  return m;
}

}  // namespace

// This engine's dense reduction between nodes (states=engine, one rank per node): the network
// carries it while backward computes, from when the first bucket is complete (after the head's
// backward and the last block's) to backward's end; all but the last bucket (the embedding's,
// completed by backward's last action) can pass in that window; within a node, or for another
// engine's layout, it stays whole after backward. 16-bit gradient messages halve the bytes.
TEST(PlanEstimate, EngineReductionBetweenNodesHidesBehindBackwardButTheLastBucket) {
  const ClusterSpec c = two_nodes_at_one_gbit();
  const config::ModelConfig m = gpt2_124m_at_256();
  const Layout l = parse_layout("dp=2,mb=2,gb=4,precision=fp32,states=engine,bucket_mb=25");
  const Estimate e = estimate(m, l, c);
  const Placement groups = place(l, c);
  ASSERT_TRUE(groups.dp.crosses_nodes);
  const double params = m.parameter_count();
  const double whole = all_reduce_seconds(groups.dp, 4 * params);
  const double tail = all_reduce_seconds(groups.dp, 4 * engine_last_bucket_elements(m, l));
  // The embedding's bucket: the token and position tables.
  EXPECT_DOUBLE_EQ(engine_last_bucket_elements(m, l), (50257.0 + 256.0) * 768.0);
  EXPECT_GT(whole - e.microbatch.backward, tail) << "1 Gbit/s: the reduction outlasts backward";
  // What backward hides is the window after the first bucket: most of backward, not all.
  const double window = whole - e.time.dp_comm;
  EXPECT_GT(window, 0.5 * e.microbatch.backward);
  EXPECT_LT(window, e.microbatch.backward);

  // A slow backward hides everything but the last bucket.
  ClusterSpec fast_link = c;
  fast_link.inter_node.bandwidth = 100e9;
  const Estimate quick = estimate(m, l, fast_link);
  EXPECT_NEAR(quick.time.dp_comm, all_reduce_seconds(place(l, fast_link).dp, 4 * engine_last_bucket_elements(m, l)),
              1e-12);

  // One node: the copies take the cores; another engine's layout: not overlapped by default.
  ClusterSpec one_node = c;
  one_node.devices_per_node = 2;
  EXPECT_NEAR(estimate(m, l, one_node).time.dp_comm, all_reduce_seconds(place(l, one_node).dp, 4 * params), 1e-9);
  const Layout other = parse_layout("dp=2,mb=2,gb=4,precision=fp32");
  EXPECT_NEAR(estimate(m, other, c).time.dp_comm, whole, 1e-9);

  // bf16 gradient messages: half the bytes of the f32 ones, and the cores' passes that round the
  // buckets, sum the members' chunks and widen the gathered sums (22 + 10/n bytes an element).
  Layout halves = l;
  halves.grad_message_bytes = 2;
  EXPECT_NEAR(estimate(m, halves, c).time.dp_comm,
              all_reduce_seconds(groups.dp, 2 * params) - window + stream_seconds(c, 27 * params), 1e-9);
  // Sharded, no all-gather of the sums: their rounding and widening drop out (16 + 4/n).
  Layout sharded = halves, sharded_f32 = l;
  sharded.zero_stage = sharded_f32.zero_stage = 1;
  EXPECT_NEAR(estimate(m, sharded, c).time.dp_comm - estimate(m, sharded_f32, c).time.dp_comm,
              reduce_scatter_seconds(groups.dp, 2 * params) - reduce_scatter_seconds(groups.dp, 4 * params) +
                  stream_seconds(c, 18 * params),
              1e-9);
}

// The window of backward the buckets can cross in opens when the first bucket is complete. Buckets
// fill from the last unit down: the final norm and block 11 (7.08 M f32, 28 MB) close a 25 MB one,
// so the head's and one block's backward come first; a 50 MB bucket waits for block 10 too; one
// bucket waits for the whole backward and hides nothing.
TEST(PlanEstimate, EngineReductionBetweenNodesWaitsForTheFirstBucket) {
  const ClusterSpec c = two_nodes_at_one_gbit();
  const config::ModelConfig m = gpt2_124m_at_256();
  const Layout at_25 = parse_layout("dp=2,mb=2,gb=4,precision=fp32,states=engine,bucket_mb=25");
  const Layout at_50 = parse_layout("dp=2,mb=2,gb=4,precision=fp32,states=engine,bucket_mb=50");
  const Layout one = parse_layout("dp=2,mb=2,gb=4,precision=fp32,states=engine,bucket_mb=100000");
  EXPECT_EQ(engine_units_before_first_bucket(m, at_25), 2);
  EXPECT_EQ(engine_units_before_first_bucket(m, at_50), 3);
  EXPECT_EQ(engine_units_before_first_bucket(m, one), m.n_layer + 2);
  const double whole = all_reduce_seconds(place(at_25, c).dp, 4 * m.parameter_count());
  const Estimate e25 = estimate(m, at_25, c), e50 = estimate(m, at_50, c), e1 = estimate(m, one, c);
  EXPECT_NEAR(e1.time.dp_comm, whole, 1e-9) << "one bucket: the reduction starts when backward ends";
  const double backward = e25.microbatch.backward;
  const double window_25 = whole - e25.time.dp_comm, window_50 = whole - e50.time.dp_comm;
  const double block = window_25 - window_50;  // one block's backward
  const double head = backward - window_25 - block;
  EXPECT_GT(block, 0);
  // The head's backward (two products of 768 x 50257 per token) against a block's (two of each
  // of its 7.08 M weights, and attention): about 5x.
  EXPECT_GT(head / block, 3);
  EXPECT_LT(head / block, 7);
  EXPECT_LT(head + m.n_layer * block, backward) << "the embedding's backward is the rest";
  // Over a busy link one bucket still crosses whole, at the idle rate, after backward.
  ClusterSpec busy = c;
  busy.inter_node.busy_bandwidth = 0.08e9;
  busy.inter_node.compute_slowdown = 1.25;
  EXPECT_NEAR(estimate(m, one, busy).time.dp_comm, whole, 1e-9);
}

// The same reduction over a link measured busy (`plan --calibrate-here --hosts`): while backward
// runs after the first bucket the buckets cross at the busy bandwidth and that part takes
// compute_slowdown times longer;
// what is left after it crosses at the idle bandwidth. Without the busy figures nothing changes.
TEST(PlanEstimate, ABusyLinkSlowsTheReductionBehindBackwardAndBackwardItself) {
  const ClusterSpec c = two_nodes_at_one_gbit();
  const config::ModelConfig m = gpt2_124m_at_256();
  const Layout l = parse_layout("dp=2,mb=2,gb=4,precision=fp32,states=engine,bucket_mb=25");
  const Estimate idle = estimate(m, l, c);
  const double params = m.parameter_count();
  const double whole = all_reduce_seconds(place(l, c).dp, 4 * params);
  const double window = whole - idle.time.dp_comm;  // the part of backward after the first bucket
  const double tail = all_reduce_seconds(place(l, c).dp, 4 * engine_last_bucket_elements(m, l));

  ClusterSpec busy = c;
  busy.inter_node.busy_bandwidth = 0.08e9;
  busy.inter_node.compute_slowdown = 1.25;
  const Placement groups = place(l, busy);
  EXPECT_DOUBLE_EQ(groups.dp.busy_bandwidth, 0.08e9 * busy.efficiency.link);
  EXPECT_DOUBLE_EQ(groups.dp.compute_slowdown, 1.25);
  Group at_busy_rate = groups.dp;
  at_busy_rate.link.bandwidth = groups.dp.busy_bandwidth;
  const double during = all_reduce_seconds(at_busy_rate, 4 * params);
  const double slowed = 1.25 * window;
  ASSERT_GT(during, slowed) << "1 Gbit/s: the reduction outlasts even the slowed backward";
  const Estimate e = estimate(m, l, busy);
  EXPECT_NEAR(e.time.dp_comm, (slowed - window) + std::max((1 - slowed / during) * whole, tail), 1e-9);
  EXPECT_GT(e.time.dp_comm, idle.time.dp_comm);
  EXPECT_NEAR(e.time.step - idle.time.step, e.time.dp_comm - idle.time.dp_comm, 1e-9);

  // A link fast enough that all of it crosses during backward: backward's slowdown while it does,
  // and the last bucket.
  ClusterSpec fast = busy;
  fast.inter_node.bandwidth = 100e9;
  fast.inter_node.busy_bandwidth = 50e9;
  Group fast_busy = place(l, fast).dp;
  fast_busy.link.bandwidth = fast_busy.busy_bandwidth;
  const double fast_during = all_reduce_seconds(fast_busy, 4 * params);
  ASSERT_LT(fast_during, slowed);
  EXPECT_NEAR(estimate(m, l, fast).time.dp_comm,
              fast_during * (1 - 1 / 1.25) + all_reduce_seconds(place(l, fast).dp, 4 * engine_last_bucket_elements(m, l)),
              1e-9);

  // The cluster file carries both, and refuses what cannot be.
  toml::table table = toml::parse(cluster_toml(busy));
  const ClusterSpec read_back = read_cluster_config(config::TableReader(*table["cluster"].as_table(), "cluster"));
  EXPECT_DOUBLE_EQ(read_back.inter_node.busy_bandwidth, busy.inter_node.busy_bandwidth);
  EXPECT_DOUBLE_EQ(read_back.inter_node.compute_slowdown, 1.25);
  EXPECT_EQ(cluster_toml(c).find("busy_bandwidth_gbps"), std::string::npos) << "absent where not measured";
  ClusterSpec wrong = busy;
  wrong.inter_node.busy_bandwidth = 2 * wrong.inter_node.bandwidth;
  EXPECT_NE(test_util::error_of([&] { wrong.validate(); }).find("busy_bandwidth_gbps"), std::string::npos);
  wrong = busy;
  wrong.inter_node.compute_slowdown = 0.5;
  EXPECT_NE(test_util::error_of([&] { wrong.validate(); }).find("compute_slowdown"), std::string::npos);
}
