// Layout syntax, configs on disk, and the errors bad input gets.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "plan/estimate.h"
#include "plan/planner.h"
#include "plan/published.h"
#include "plan_test_util.h"

using namespace tessera;
using namespace tessera::plan;
using test_util::contains;
using test_util::error_of;

TEST(PlanLayout, ParsesTheDocumentedSyntaxAndRoundTrips) {
  Layout l = parse_layout("tp=8,pp=2,dp=32,v=2,mb=1,zero=1,recompute=full,sp=true,precision=bf16");
  EXPECT_EQ(l.tp, 8);
  EXPECT_EQ(l.pp, 2);
  EXPECT_EQ(l.dp, 32);
  EXPECT_EQ(l.virtual_stages, 2);
  EXPECT_EQ(l.schedule, config::ScheduleKind::Interleaved);  // v > 1 with no schedule named
  EXPECT_EQ(l.zero_stage, 1);
  EXPECT_TRUE(l.sp);
  EXPECT_EQ(l.recompute, config::RecomputePolicy::Full);
  EXPECT_EQ(l.precision, Precision::Bf16);
  l.global_batch = 512;
  l.flash_attention = true;
  l.overlap = true;
  EXPECT_EQ(parse_layout(to_string(l)), l);
  l.schedule = config::ScheduleKind::GPipe;
  l.virtual_stages = 1;
  EXPECT_EQ(parse_layout(to_string(l)), l);
  // This engine's accounting is the default and is not written; Megatron's is.
  EXPECT_EQ(parse_layout("tp=2").activations, ActivationAccounting::Engine);
  EXPECT_TRUE(!contains(to_string(l), "activations"));
  l.activations = ActivationAccounting::Megatron;
  EXPECT_TRUE(contains(to_string(l), "activations=megatron"));
  EXPECT_EQ(parse_layout(to_string(l)), l);
  // Every schedule kind has its name; 1f1b with v > 1 is what the syntax always meant by it.
  for (config::ScheduleKind kind : config::kScheduleKinds) {
    EXPECT_EQ(parse_layout("schedule=" + std::string(config::schedule_name(kind))).schedule, kind);
  }
  EXPECT_EQ(parse_layout("v=2,schedule=1f1b").schedule, config::ScheduleKind::Interleaved);
  // Keys not given keep the base's values.
  Layout base;
  base.global_batch = 96;
  EXPECT_EQ(parse_layout(" tp = 2 , mb=4", base).global_batch, 96);
}

TEST(PlanLayout, RecomputePolicyKeysParseAndRoundTrip) {
  Layout every = parse_layout("pp=2,gb=8,recompute=every_k,recompute_every=3");
  EXPECT_EQ(every.recompute, config::RecomputePolicy::EveryK);
  EXPECT_EQ(every.recompute_every, 3);
  EXPECT_EQ(parse_layout(to_string(every)), every);
  EXPECT_TRUE(contains(to_string(every), "recompute=every_k,recompute_every=3,")) << to_string(every);
  // 0 (the default) means ceil(sqrt(layers per chunk)) and is not written.
  every.recompute_every = 0;
  EXPECT_EQ(parse_layout(to_string(every)), every);
  EXPECT_FALSE(contains(to_string(every), "recompute_every")) << to_string(every);

  for (double mib : {4096.0, 1536.5, 0.1, 12345.678901234}) {
    Layout optimal = parse_layout(fmt::format("gb=8,recompute=optimal,activation_budget_mb={}", mib));
    EXPECT_EQ(optimal.recompute, config::RecomputePolicy::Optimal);
    EXPECT_EQ(optimal.activation_budget_mb, mib);
    EXPECT_EQ(parse_layout(to_string(optimal)), optimal) << to_string(optimal);
  }
  EXPECT_EQ(config::recompute_policy_name(config::RecomputePolicy::EveryK), "every_k");
  EXPECT_EQ(config::recompute_policy_name(config::RecomputePolicy::Optimal), "optimal");
  EXPECT_EQ(config::recompute_policy_name(config::RecomputePolicy::Dtr), "dtr");
  const Layout dtr = parse_layout("gb=8,recompute=dtr,activation_budget_mb=1536.5");
  EXPECT_EQ(dtr.recompute, config::RecomputePolicy::Dtr);
  EXPECT_EQ(parse_layout(to_string(dtr)), dtr) << to_string(dtr);
  // Layouts that use neither key print as they always did.
  EXPECT_EQ(to_string(parse_layout("tp=8,pp=2,dp=32,v=2,gb=512,recompute=full,sp=true")),
            "tp=8,pp=2,dp=32,v=2,mb=1,gb=512,zero=0,recompute=full,sp=true,precision=bf16,schedule=interleaved,"
            "flash=false,overlap=false");
}

TEST(PlanLayout, EngineStateAccountingParsesRoundTripsAndIsChecked) {
  // The ZeRO paper's accounting is the default and is not written; this engine's is, with its
  // bucket size.
  EXPECT_EQ(parse_layout("tp=2").states, StateAccounting::Zero);
  EXPECT_FALSE(contains(to_string(parse_layout("tp=2")), "states"));
  Layout engine = parse_layout("dp=2,gb=8,zero=3,states=engine,bucket_mb=0.01");
  EXPECT_EQ(engine.states, StateAccounting::Engine);
  EXPECT_EQ(engine.bucket_mb, 0.01);
  EXPECT_TRUE(contains(to_string(engine), ",states=engine,bucket_mb=0.01")) << to_string(engine);
  EXPECT_EQ(parse_layout(to_string(engine)), engine);
  config::ModelConfig m;
  check_layout(m, engine, 2);
  // A bucket size only the engine accounting reads is refused without it, and must be positive.
  EXPECT_TRUE(contains(error_of([&] { check_layout(m, parse_layout("dp=2,gb=8,bucket_mb=5"), 2); }),
                       "add states=engine or drop bucket_mb"));
  EXPECT_TRUE(contains(error_of([&] { check_layout(m, parse_layout("dp=2,gb=8,states=engine,bucket_mb=0"), 2); }),
                       "must be a positive number of MiB"));
  EXPECT_TRUE(contains(error_of([&] { parse_layout("states=megatron"); }), "must be zero"));
}

TEST(PlanLayout, RecomputePolicyKeysAreChecked) {
  EXPECT_TRUE(contains(error_of([] { parse_layout("recompute=sqrt"); }), "every_k (with recompute_every=K)"));
  EXPECT_TRUE(contains(error_of([] { parse_layout("recompute_every=-1"); }), "'recompute_every=-1' is out of range"));
  EXPECT_TRUE(contains(error_of([] { parse_layout("recompute_every=two"); }), "'recompute_every=two' needs a whole number"));
  EXPECT_TRUE(contains(error_of([] { parse_layout("activation_budget_mb=lots"); }),
                       "'activation_budget_mb=lots' needs a number of MiB"));
  EXPECT_TRUE(contains(error_of([] { parse_layout("activation_budget_mb=-5"); }), "needs a number of MiB, 0 or more"));
  EXPECT_TRUE(contains(error_of([] { parse_layout("activation_budget_mb=inf"); }), "needs a number of MiB"));
  EXPECT_TRUE(contains(error_of([] { parse_layout("recompute_evry=2"); }), "did you mean 'recompute_every'?"));
  EXPECT_TRUE(contains(error_of([] { parse_layout("budget=2"); }), "activation_budget_mb"));

  config::ModelConfig m = published_model(megatron_table1()[4]);  // 48 layers
  auto check = [&](const std::string& text) { return error_of([&] { check_layout(m, parse_layout(text), 2); }); };
  EXPECT_TRUE(contains(check("pp=2,gb=8,recompute=optimal"), "recompute=optimal needs activation_budget_mb=X"));
  EXPECT_TRUE(contains(check("pp=2,gb=8,recompute=full,recompute_every=4"), "use recompute=every_k or drop recompute_every"));
  EXPECT_TRUE(contains(check("pp=2,gb=8,recompute=every_k,activation_budget_mb=100"),
                       "use recompute=optimal or dtr, or drop activation_budget_mb"));
  EXPECT_TRUE(contains(check("pp=2,gb=8,recompute=dtr"), "recompute=dtr needs activation_budget_mb=X"));
  EXPECT_EQ(check("pp=2,gb=8,recompute=dtr,activation_budget_mb=20000"), "");
  EXPECT_EQ(check("pp=2,gb=8,recompute=every_k,recompute_every=4"), "");
  EXPECT_EQ(check("pp=2,gb=8,recompute=every_k"), "");
  EXPECT_EQ(check("pp=2,gb=8,recompute=optimal,activation_budget_mb=20000"), "");
}

TEST(PlanLayout, BadSyntaxNamesTheKey) {
  EXPECT_TRUE(contains(error_of([] { parse_layout("tpp=2"); }), "unknown key 'tpp'; did you mean 'tp'?"));
  EXPECT_TRUE(contains(error_of([] { parse_layout("tp=two"); }), "'tp=two' needs a whole number"));
  EXPECT_TRUE(contains(error_of([] { parse_layout("recompute=some"); }),
                       "must be one of none, selective, full, every_k, optimal, dtr, checkmate"));
  EXPECT_TRUE(contains(error_of([] { parse_layout("precision=fp16"); }), "must be bf16"));
  EXPECT_TRUE(contains(error_of([] { parse_layout("sp"); }), "is not key=value"));
  EXPECT_TRUE(contains(error_of([] { parse_layout("activations=pytorch"); }), "must be engine"));
  EXPECT_TRUE(contains(error_of([] { parse_layout("schedule=chimera"); }),
                       "must be one of gpipe, 1f1b, interleaved, 2bw, zb-h1"));
}

TEST(PlanLayout, ProductMustMatchTheDevices) {
  config::ModelConfig m = published_model(megatron_table1()[4]);
  Layout l = parse_layout("tp=8,pp=2,dp=16,gb=1536");
  std::string e = error_of([&] { check_layout(m, l, 512); });
  EXPECT_TRUE(contains(e, "tp=8 x pp=2 x dp=16 = 256 devices, but 512 devices were asked for")) << e;
  EXPECT_TRUE(contains(e, "dp=32")) << e;
  EXPECT_EQ(error_of([&] { check_layout(m, parse_layout("tp=8,pp=2,dp=32,gb=1536"), 512); }), "");
}

TEST(PlanLayout, TensorParallelMustDivideTheHeads) {
  config::ModelConfig m = published_model(megatron_table1()[0]);  // 24 heads
  std::string e = error_of([&] { check_layout(m, parse_layout("tp=16,dp=2,gb=512"), 32); });
  EXPECT_TRUE(contains(e, "tp=16 does not divide model.n_head=24")) << e;
  EXPECT_TRUE(contains(e, "1, 2, 3, 4, 6, 8, 12, 24")) << e;
}

TEST(PlanLayout, OtherConstraintsExplainTheFix) {
  config::ModelConfig m = published_model(megatron_table1()[4]);  // 48 layers
  auto check = [&](const std::string& text, int64_t devices) {
    return error_of([&] { check_layout(m, parse_layout(text), devices); });
  };
  EXPECT_TRUE(contains(check("pp=5,gb=10", 5), "must divide model.n_layer=48"));
  EXPECT_TRUE(contains(check("dp=3,gb=100", 3), "not a multiple of dp=3 x mb=1"));
  EXPECT_TRUE(contains(check("pp=4,v=2,gb=6", 4), "multiple of pp=4"));
  EXPECT_TRUE(contains(check("v=2,gb=8", 1), "needs pp > 1"));
  // ZeRO-2 and 3 run under pipelines (ZeRO-3 keeps each stage's units gathered across the step).
  EXPECT_TRUE(check("pp=2,dp=2,zero=2,gb=8", 4).empty());
  EXPECT_TRUE(check("pp=2,dp=2,zero=3,gb=8", 4).empty());
  EXPECT_TRUE(contains(check("sp=true,gb=8", 1), "needs tp > 1"));
  EXPECT_TRUE(contains(check("zero=4,dp=2,gb=8", 2), "ZeRO stage 0, 1, 2 or 3"));
  EXPECT_TRUE(contains(check("pp=2,v=2,schedule=gpipe,gb=8", 2), "use schedule=interleaved"));
  EXPECT_EQ(check("pp=2,schedule=zb-h1,gb=8", 2), "");
  EXPECT_TRUE(contains(check("pp=2,schedule=2bw,gb=8", 2), "a second weight version in memory"));
  EXPECT_EQ(check("pp=2,schedule=gpipe,gb=8", 2), "");
}

TEST(PlanConfigs, ShippedModelsMatchTable1) {
  for (const auto& row : megatron_table1()) {
    config::ModelConfig file = load_model(row.config, test_util::config_dirs());
    config::ModelConfig table = published_model(row);
    EXPECT_EQ(file.n_layer, table.n_layer) << row.config;
    EXPECT_EQ(file.n_head, table.n_head) << row.config;
    EXPECT_EQ(file.n_embd, table.n_embd) << row.config;
    EXPECT_EQ(file.vocab_size, table.vocab_size) << row.config;
    EXPECT_EQ(file.seq_len, table.seq_len) << row.config;
    EXPECT_EQ(file.parameter_count(), table.parameter_count()) << row.config;
  }
  config::ModelConfig gpt3 = load_model("gpt3-175b", test_util::config_dirs());
  EXPECT_NEAR(static_cast<double>(gpt3.parameter_count()) / 1e9, 174.6, 0.1);
}

TEST(PlanConfigs, ShippedClustersLoad) {
  for (const char* name : {"a100-80gb", "h100-sxm", "h200", "cpu-2core"}) {
    ClusterSpec c = load_cluster(name, test_util::config_dirs());
    EXPECT_EQ(c.name, name);
    EXPECT_GT(c.peak_flops(Precision::Bf16), 0);
    EXPECT_GT(c.usable_memory(), 0);
  }
  ClusterSpec cpu = load_cluster("cpu-2core", test_util::config_dirs());
  EXPECT_DOUBLE_EQ(cpu.peak_flops(Precision::Fp32), 185e9);
  EXPECT_EQ(cpu.max_devices(), 1);
  ClusterSpec h200 = load_cluster("h200", test_util::config_dirs());
  EXPECT_DOUBLE_EQ(h200.peak_flops(Precision::Bf16), 989e12);
}

TEST(PlanConfigs, MissingNamesListWhatIsShipped) {
  std::string e = error_of([] { load_cluster("a100-40gb", test_util::config_dirs()); });
  EXPECT_TRUE(contains(e, "no cluster config 'a100-40gb'")) << e;
  EXPECT_TRUE(contains(e, "a100-80gb, cpu-2core, h100-sxm, h200")) << e;
  e = error_of([] { load_model("/nonexistent/model.toml", test_util::config_dirs()); });
  EXPECT_TRUE(contains(e, "no model config '/nonexistent/model.toml'")) << e;
}

TEST(PlanConfigs, ClusterTablesAreStrict) {
  auto read = [](std::string_view text) {
    toml::table t = toml::parse(text);
    return read_cluster_config(config::TableReader(*t["cluster"].as_table(), "cluster"));
  };
  const std::string good = R"(
[cluster]
name = "x"
devices_per_node = 8
[cluster.device]
name = "d"
peak_tflops_bf16 = 100.0
peak_tflops_fp32 = 10.0
memory_gib = 40.0
memory_bandwidth_gbps = 1000.0
[cluster.intra_node]
bandwidth_gbps = 100.0
latency_us = 2.0
[cluster.inter_node]
bandwidth_gbps = 10.0
latency_us = 5.0
)";
  ClusterSpec c = read(good);
  EXPECT_DOUBLE_EQ(c.device.memory_bandwidth, 1000e9);
  EXPECT_DOUBLE_EQ(c.inter_node.latency, 5e-6);
  EXPECT_TRUE(contains(error_of([&] { read(good + "[cluster.efficiency]\ngemm = 1.5\n"); }), "must be a fraction"));
  EXPECT_TRUE(contains(error_of([&] { read(good + "[cluster.efficiency]\ngem = 0.5\n"); }),
                       "unknown key 'cluster.efficiency.gem'; did you mean 'cluster.efficiency.gemm'"));
  std::string no_memory = good;
  no_memory.replace(no_memory.find("memory_gib = 40.0\n"), 18, "");
  EXPECT_TRUE(contains(error_of([&] { read(no_memory); }), "missing required key 'cluster.device.memory_gib'"));
}

TEST(PlanSearch, AModelThatFitsNowhereSaysSo) {
  // The 1T model's weights alone need ~16 TB of model state: 8 A100s cannot hold it in any layout.
  config::ModelConfig m = published_model(megatron_table1().back());
  PlanRequest r;
  r.devices = 8;
  r.global_batch = 8;
  std::string e = error_of([&] { plan_layouts(m, test_util::a100(), r); });
  EXPECT_TRUE(contains(e, "does not fit on 8 devices of cluster 'a100-80gb' in any layout")) << e;
  EXPECT_TRUE(contains(e, "the smallest needs")) << e;
  EXPECT_TRUE(contains(e, "use more devices")) << e;
}

TEST(PlanSearch, BadRequestsAreNamed) {
  config::ModelConfig m = published_model(megatron_table1()[0]);
  ClusterSpec cpu = load_cluster("cpu-2core", test_util::config_dirs());
  PlanRequest r;
  r.devices = 4;
  r.global_batch = 8;
  EXPECT_TRUE(contains(error_of([&] { plan_layouts(m, cpu, r); }), "cluster 'cpu-2core' has 1 (1 nodes of 1)"));
  r.devices = 0;
  EXPECT_TRUE(contains(error_of([&] { plan_layouts(m, test_util::a100(), r); }), "--devices must be at least 1"));
  // 5 devices: tp = 5 does not divide 24 heads, pp = 5 not 24 layers, dp = 5 not a batch of 1.
  r.devices = 5;
  r.global_batch = 1;
  EXPECT_TRUE(contains(error_of([&] { plan_layouts(m, test_util::a100(), r); }), "no valid layout of 5 devices"));
}
