// The nvme tier in the cost model: the cluster's disk ([cluster.disk] of its TOML, written and read
// back, bad figures refused) and a step's I/O time over it, with what the step's compute hides.
#include <gtest/gtest.h>

#include <string>

#include "plan/estimate.h"
#include "plan/offload_io.h"
#include "plan_test_util.h"

using namespace tessera;
using namespace tessera::plan;
using test_util::contains;
using test_util::error_of;

namespace {

// A one-device cluster whose disk writes 1 GB/s and reads 2 GB/s, as its TOML gives it.
const std::string kCluster = R"([cluster]
name = "disk"
devices_per_node = 4

[cluster.device]
name = "cpu"
peak_tflops_fp32 = 0.1
peak_tflops_bf16 = 0.1
memory_gib = 16
memory_bandwidth_gbps = 10

[cluster.intra_node]
bandwidth_gbps = 5
latency_us = 1

[cluster.inter_node]
bandwidth_gbps = 1
latency_us = 10
)";

ClusterSpec read_toml(const std::string& text) {
  toml::table t = toml::parse(text);
  return read_cluster_config(config::TableReader(*t["cluster"].as_table(), "cluster"));
}

ClusterSpec with_disk(const std::string& disk) { return read_toml(kCluster + "\n[cluster.disk]\n" + disk); }

}  // namespace

TEST(PlanOffloadIo, TheDiskReadsBackAsWritten) {
  const ClusterSpec c = with_disk("read_gbps = 2\nwrite_gbps = 1.25\n");
  EXPECT_DOUBLE_EQ(c.disk.read_bandwidth, 2e9);
  EXPECT_DOUBLE_EQ(c.disk.write_bandwidth, 1.25e9);
  const ClusterSpec back = read_toml(cluster_toml(c));
  EXPECT_NEAR(back.disk.read_bandwidth, 2e9, 1e-6);
  EXPECT_NEAR(back.disk.write_bandwidth, 1.25e9, 1e-6);
  EXPECT_FALSE(contains(cluster_toml(c), "mixed_gbps"));  // not measured: not written
  // Reads and writes at once, when measured, travel too.
  const ClusterSpec mixed = with_disk("read_gbps = 2\nwrite_gbps = 1.25\nmixed_gbps = 3\n");
  EXPECT_NEAR(read_toml(cluster_toml(mixed)).disk.mixed_bandwidth, 3e9, 1e-6);
  // A cluster without a disk is allowed, and writes none.
  const ClusterSpec none = read_toml(kCluster);
  EXPECT_FALSE(none.disk.known());
  EXPECT_FALSE(contains(cluster_toml(none), "[cluster.disk]"));
  EXPECT_FALSE(read_toml(cluster_toml(none)).disk.known());
  // Every shipped cluster knows its disk.
  for (const char* name : {"a100-80gb", "h100-sxm", "h200", "cpu-2core"}) {
    const ClusterSpec shipped = load_cluster(name, test_util::config_dirs());
    EXPECT_TRUE(shipped.disk.known()) << name;
    EXPECT_GE(shipped.disk.read_bandwidth, 0.1e9) << name;
  }
}

TEST(PlanOffloadIo, BadDiskFiguresAreRefusedNamingTheKeys) {
  for (const std::string& bad : {std::string("read_gbps = -1\nwrite_gbps = 1\n"), std::string("read_gbps = 1\nwrite_gbps = -2\n"),
                                 std::string("read_gbps = 1\n"), std::string("write_gbps = 1\n")}) {
    const std::string message = error_of([&] { with_disk(bad); });
    EXPECT_TRUE(contains(message, "cluster.disk.read_gbps")) << bad << ": " << message;
    EXPECT_TRUE(contains(message, "must both be positive")) << bad << ": " << message;
  }
  // A mixed rate without the two it goes with, or not positive.
  for (const std::string& bad : {std::string("mixed_gbps = 3\n"), std::string("read_gbps = 1\nwrite_gbps = 1\nmixed_gbps = -1\n")}) {
    const std::string message = error_of([&] { with_disk(bad); });
    EXPECT_TRUE(contains(message, "cluster.disk.mixed_gbps")) << bad << ": " << message;
  }
  // TOML's nan and inf: the reader refuses them, naming the key.
  EXPECT_TRUE(contains(error_of([] { with_disk("read_gbps = nan\nwrite_gbps = 1\n"); }),
                       "'cluster.disk.read_gbps' = nan must be a finite number"));
  EXPECT_TRUE(contains(error_of([] { with_disk("read_gbps = 1\nwrite_gbps = inf\n"); }),
                       "'cluster.disk.write_gbps' = inf must be a finite number"));
  // Not a number: the reader names the key and the type it wants.
  const std::string word = error_of([] { with_disk("read_gbps = \"fast\"\nwrite_gbps = 1\n"); });
  EXPECT_TRUE(contains(word, "cluster.disk.read_gbps")) << word;
  // A key of no meaning there.
  const std::string unknown = error_of([] { with_disk("read_gbps = 1\nwrite_gbps = 1\nrpm = 7200\n"); });
  EXPECT_TRUE(contains(unknown, "cluster.disk.rpm")) << unknown;
}

TEST(PlanOffloadIo, TheStepsTransfersAtTheRanksShareOfTheDiskOutlastingItsCompute) {
  const ClusterSpec c = with_disk("read_gbps = 2\nwrite_gbps = 1\n");
  // 1 GB written (1 s) and read back (0.5 s) by the node's only rank, beside 1 s of compute.
  OffloadIo io = offload_io(c, 1e9, 1, 1.0);
  EXPECT_TRUE(io.timed);
  EXPECT_DOUBLE_EQ(io.bytes_written, 1e9);
  EXPECT_DOUBLE_EQ(io.bytes_read, 1e9);
  EXPECT_DOUBLE_EQ(io.seconds, 1.5);
  EXPECT_DOUBLE_EQ(io.exposed_seconds, 0.5);
  // Four ranks on the node share its disk; enough compute hides all of it.
  io = offload_io(c, 1e9, 4, 10.0);
  EXPECT_DOUBLE_EQ(io.seconds, 6.0);
  EXPECT_DOUBLE_EQ(io.exposed_seconds, 0.0);
  // A disk that serves both at once moves them at its mixed rate, each no faster than alone.
  const ClusterSpec both = with_disk("read_gbps = 2\nwrite_gbps = 1\nmixed_gbps = 2.5\n");
  EXPECT_DOUBLE_EQ(offload_io(both, 1e9, 1, 0.0).seconds, 1.0);        // the writes alone take 1 s
  EXPECT_DOUBLE_EQ(offload_io(both, 0.5e9, 2e9, 1, 0.0).seconds, 1.0);  // the reads alone take 1 s
  EXPECT_DOUBLE_EQ(offload_io(both, 2e9, 3e9, 1, 0.0).seconds, 2.0);    // 5 GB at 2.5 GB/s
  // Reads without writes (offloaded parameters, read for each unit's forward and backward).
  io = offload_io(c, 1e9, 3e9, 1, 1.0);
  EXPECT_DOUBLE_EQ(io.bytes_written, 1e9);
  EXPECT_DOUBLE_EQ(io.bytes_read, 3e9);
  EXPECT_DOUBLE_EQ(io.seconds, 2.5);
  EXPECT_DOUBLE_EQ(offload_io(c, 0, 2e9, 2, 0.5).exposed_seconds, 1.5);
  // Without a disk, traffic is not timed; no traffic takes no time on any cluster.
  const ClusterSpec none = read_toml(kCluster);
  EXPECT_FALSE(offload_io(none, 1e9, 1, 1.0).timed);
  EXPECT_TRUE(offload_io(none, 0, 1, 1.0).timed);
  EXPECT_DOUBLE_EQ(offload_io(none, 0, 1, 1.0).seconds, 0.0);
}

TEST(PlanOffloadIo, ExposedIoLengthensTheStepAndLowersItsThroughput) {
  const ClusterSpec c = with_disk("read_gbps = 2\nwrite_gbps = 1\n");
  config::ModelConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 64;
  m.seq_len = 64;
  m.vocab_size = 256;
  const Estimate base = estimate(m, parse_layout("mb=2,gb=4,precision=fp32,flash=true,states=engine"), c);
  Estimate e = base;
  add_exposed_io(e, base.time.step);  // as long again
  EXPECT_DOUBLE_EQ(e.time.io, base.time.step);
  EXPECT_DOUBLE_EQ(e.time.step, 2 * base.time.step);
  EXPECT_DOUBLE_EQ(e.tokens_per_second, base.tokens_per_second / 2);
  EXPECT_DOUBLE_EQ(e.mfu, base.mfu / 2);
  EXPECT_DOUBLE_EQ(e.tflops_per_device, base.tflops_per_device / 2);
  EXPECT_DOUBLE_EQ(e.time.compute, base.time.compute);
}
