// every_k and optimal in the planner: the runtime's chain and simulator (src/memory) over a model
// chunk's layers, and how that chain relates to the closed forms of none, selective and full.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>

#include "memory/recompute_policy.h"
#include "plan/collectives.h"
#include "plan/device_time.h"
#include "plan/estimate.h"
#include "plan/memory_model.h"
#include "plan/model_costs.h"
#include "plan/published.h"
#include "plan/recompute_model.h"
#include "plan_test_util.h"

using namespace tessera;
using namespace tessera::plan;
using test_util::contains;
using test_util::error_of;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

config::ModelConfig small_gpt(int layers, float dropout = 0.1f) {
  config::ModelConfig m;
  m.n_layer = layers;
  m.n_head = 16;
  m.n_embd = 1024;
  m.vocab_size = 51200;
  m.seq_len = 1024;
  m.dropout = dropout;
  return m;
}

// These tests hold the chain machinery to Korthikanti's closed forms, so they count Megatron's
// tensors; this engine's accounting is held to the runtime's own prediction in tests/exec.
Layout layout_of(const std::string& text) { return parse_layout(text + ",activations=megatron"); }

// What stage_memory adds outside the chain: the embedding's mask per microbatch in flight on the
// first stage and the head's tensors once on the last.
double edges(const config::ModelConfig& m, const Layout& l, int stage, int64_t chunks) {
  double bytes = 0;
  if (stage == 0) bytes += std::ceil(static_cast<double>(chunks) / l.virtual_stages) * embedding_activation_bytes(m, l);
  if (stage == l.pp - 1) bytes += head_activation_bytes(m, l);
  return bytes;
}

// (in flight - 1) R + P of the chain, plus the edges: the runtime's prediction for the stage.
double chain_activations(const config::ModelConfig& m, const Layout& l, int stage) {
  const int64_t chunks = closed_form_pipeline().inflight_chunks(l, stage);
  const memory::ChainSimulation sim = chunk_recompute(m, l, stage).simulation;
  return static_cast<double>(chunks - 1) * static_cast<double>(sim.after_forward_bytes) +
         static_cast<double>(sim.peak_bytes) + edges(m, l, stage, chunks);
}

double activations(const config::ModelConfig& m, const Layout& l, int stage) {
  return stage_memory(m, l, stage, closed_form_pipeline()).activations;
}

}  // namespace

TEST(PlanRecompute, ChainReproducesTheClosedFormsOfNoneSelectiveAndFull) {
  // Full's chain keeps every layer's input (n x after the forward) and peaks while one layer is
  // recomputed with all of its set: n x + (everything - x), the closed form's "kept inputs plus one
  // layer's working set" to the byte. None and selective likewise. So the three keep their closed
  // forms (cheap for the search) and every_k / optimal, which only the chain describes, agree with
  // them where they meet.
  const std::vector<config::ModelConfig> models = {small_gpt(8), small_gpt(8, 0.0f), published_model(megatron_table1()[4])};
  const std::vector<std::string> layouts = {"gb=8",
                                            "pp=4,gb=16",
                                            "tp=8,pp=4,sp=true,gb=16",
                                            "tp=4,pp=2,v=2,gb=16",
                                            "tp=2,pp=2,mb=2,flash=true,gb=16",
                                            "pp=4,schedule=gpipe,gb=8",
                                            "tp=8,pp=2,precision=fp32,gb=8"};
  for (const auto& m : models) {
    for (const auto& text : layouts) {
      for (const char* policy : {"none", "selective", "full"}) {
        Layout l = layout_of(text + ",recompute=" + policy);
        if (m.n_layer % (l.pp * l.virtual_stages) != 0) continue;
        for (int stage : {0, l.pp - 1}) {
          EXPECT_DOUBLE_EQ(chain_activations(m, l, stage), activations(m, l, stage))
              << text << " recompute=" << policy << " stage " << stage << " L=" << m.n_layer;
        }
      }
      // every_k with segments of one layer is full's schedule: the same numbers through the chain.
      Layout full = layout_of(text + ",recompute=full");
      Layout every_one = layout_of(text + ",recompute=every_k,recompute_every=1");
      if (m.n_layer % (full.pp * full.virtual_stages) != 0) continue;
      EXPECT_EQ(chunk_recompute(m, every_one, 0).schedule, memory::full_schedule(m.n_layer / (full.pp * full.virtual_stages) + 1));
      for (int stage : {0, full.pp - 1}) {
        EXPECT_DOUBLE_EQ(activations(m, every_one, stage), activations(m, full, stage)) << text << " stage " << stage;
      }
    }
  }
}

TEST(PlanRecompute, EveryKPeakIsTheChainWorkedByHand) {
  // 6 layers, segments of k = ceil(sqrt(6)) = 3: the forward keeps x_0 and x_3 (R = 2x; the last
  // layer's output is the head's or the boundary's, counted there). The peak comes while the last
  // segment is recomputed: x_0 stored, layers 3, 4 and 5 holding everything (3 A, their inputs
  // included), so P = x + 3A. Each layer's forward reruns once.
  const config::ModelConfig m = small_gpt(6, 0.0f);  // no dropout: no embedding mask on the first stage
  const double x = 2.0 * 1024 * 1024;                // bf16 [1, 1024, 1024]
  const double A = layer_activation_bytes(m, 1, 1, false, config::RecomputePolicy::None, false, Precision::Bf16);
  EXPECT_DOUBLE_EQ(A, 1024.0 * 1024 * (32 + 2 * 16.0 * 1024 / 1024));  // sbh (32 + 2 a s / h) without dropout
  const double head = head_activation_bytes(m, layout_of("gb=1"));

  for (const char* k : {"", ",recompute_every=3"}) {
    Layout l = layout_of(std::string("gb=4,recompute=every_k") + k);
    const ChunkRecompute r = chunk_recompute(m, l, 0);
    EXPECT_EQ(r.every_k, 3);
    EXPECT_EQ(r.simulation.after_forward_bytes, static_cast<int64_t>(2 * x));
    EXPECT_EQ(r.simulation.peak_bytes, static_cast<int64_t>(x + 3 * A));
    EXPECT_EQ(r.simulation.recomputed_forwards, 6);
    // One microbatch in flight (p = 1): P and the head.
    EXPECT_DOUBLE_EQ(activations(m, l, 0), x + 3 * A + head);
    // GPipe holds all 4: three wait at R while one runs its backward.
    l.schedule = config::ScheduleKind::GPipe;
    EXPECT_DOUBLE_EQ(activations(m, l, 0), 3 * 2 * x + x + 3 * A + head);
  }
  // Segments of 2: x_0, x_2, x_4 kept; the last segment's recomputation holds x_0, x_2 and layers
  // 4 and 5: P = 2x + 2A.
  const ChunkRecompute two = chunk_recompute(m, layout_of("gb=4,recompute=every_k,recompute_every=2"), 0);
  EXPECT_EQ(two.simulation.after_forward_bytes, static_cast<int64_t>(3 * x));
  EXPECT_EQ(two.simulation.peak_bytes, static_cast<int64_t>(2 * x + 2 * A));
  // On a pipeline, 12 layers over pp = 2 make the same 6-layer chunk; 1F1B's first stage holds 2.
  const config::ModelConfig deep = small_gpt(12, 0.0f);
  Layout piped = layout_of("pp=2,gb=8,recompute=every_k");
  EXPECT_DOUBLE_EQ(activations(deep, piped, 0), 2 * x + x + 3 * A);
  EXPECT_DOUBLE_EQ(activations(deep, piped, 1), x + 3 * A + head);
}

TEST(PlanRecompute, EveryKTimeAndFlopsComeFromItsSchedule) {
  // every_k reruns each layer once, like full: the same recompute FLOPs and the same step time.
  const config::ModelConfig m = published_model(megatron_table1()[4]);
  ClusterSpec c = test_util::a100();
  Layout full = layout_of("tp=8,pp=4,dp=2,gb=64,recompute=full");
  Layout every = layout_of("tp=8,pp=4,dp=2,gb=64,recompute=every_k");
  EXPECT_DOUBLE_EQ(model_recomputed_layer_forwards(m, every), m.n_layer);
  const Estimate e = estimate(m, every, c), f = estimate(m, full, c);
  EXPECT_DOUBLE_EQ(e.flops.recompute, f.flops.recompute);
  EXPECT_NEAR(e.time.step, f.time.step, 1e-12 * f.time.step);
  // The schedule-independent overload refuses the policies whose FLOPs need a schedule.
  EXPECT_TRUE(contains(error_of([&] { step_flops(m, 64, config::RecomputePolicy::EveryK, false); }), "model_recomputed_layer_forwards"));
  EXPECT_EQ(step_flops(m, 64, config::RecomputePolicy::Full, false, m.n_layer).recompute, step_flops(m, 64, config::RecomputePolicy::Full, false).recompute);
}

TEST(PlanRecompute, OptimalBetweenFullAndNoneFitsItsBudgetAndRecomputesLess) {
  const config::ModelConfig m = small_gpt(8);
  ClusterSpec c = test_util::a100();
  const Layout none = layout_of("gb=8,recompute=none"), full = layout_of("gb=8,recompute=full");
  // p = 1: one microbatch in flight, so the activations are one microbatch's peak.
  const double none_peak = activations(m, none, 0), full_peak = activations(m, full, 0);
  ASSERT_LT(full_peak, none_peak);
  for (double share : {0.25, 0.5, 0.75}) {
    Layout l = layout_of("gb=8,recompute=optimal");
    l.activation_budget_mb = std::floor((full_peak + share * (none_peak - full_peak)) / kMiB);
    const ChunkRecompute r = chunk_recompute(m, l, 0);
    EXPECT_LE(activations(m, l, 0), l.activation_budget_mb * kMiB) << share;
    EXPECT_GT(r.simulation.recomputed_forwards, 0) << share;
    EXPECT_LT(r.simulation.recomputed_forwards, 8) << share;
    // Time and FLOPs: between none's and full's, from the schedule's reruns.
    const Estimate e = estimate(m, l, c);
    EXPECT_DOUBLE_EQ(e.flops.recompute, r.simulation.recomputed_forwards * layer_forward_flops(m, 8));
    EXPECT_LT(e.flops.recompute, estimate(m, full, c).flops.recompute);
    EXPECT_LT(e.time.step, estimate(m, full, c).time.step);
    EXPECT_GT(e.time.step, estimate(m, none, c).time.step);
  }
  // A larger budget never reruns more.
  Layout tight = layout_of("gb=8,recompute=optimal"), loose = tight;
  tight.activation_budget_mb = std::floor((full_peak + 0.2 * (none_peak - full_peak)) / kMiB);
  loose.activation_budget_mb = std::floor((full_peak + 0.8 * (none_peak - full_peak)) / kMiB);
  EXPECT_GE(chunk_recompute(m, tight, 0).simulation.recomputed_forwards,
            chunk_recompute(m, loose, 0).simulation.recomputed_forwards);
}

// The planner runs DTR's schedule as the runtime would: within the budget, recomputing no less than
// the optimal schedule, and refusing a budget below its own least, which is above optimal's.
TEST(PlanRecompute, DtrFitsItsBudgetAndRecomputesNoLessThanOptimal) {
  const config::ModelConfig m = small_gpt(8);
  const Layout none = layout_of("gb=8,recompute=none"), full = layout_of("gb=8,recompute=full");
  const double none_peak = activations(m, none, 0), full_peak = activations(m, full, 0);
  int recomputing = 0;
  for (double share : {0.25, 0.5, 0.75}) {
    Layout dtr = layout_of("gb=8,recompute=dtr"), optimal = layout_of("gb=8,recompute=optimal");
    dtr.activation_budget_mb = optimal.activation_budget_mb =
        std::floor((full_peak + share * (none_peak - full_peak)) / kMiB);
    if (dtr.activation_budget_mb < minimum_activation_budget_mb(m, dtr)) continue;
    const ChunkRecompute r = chunk_recompute(m, dtr, 0);
    EXPECT_LE(activations(m, dtr, 0), dtr.activation_budget_mb * kMiB) << share;
    EXPECT_GE(r.simulation.time, chunk_recompute(m, optimal, 0).simulation.time) << share;
    recomputing += r.simulation.recomputed_forwards > 0 ? 1 : 0;
  }
  EXPECT_GT(recomputing, 0);
  Layout tight = layout_of("gb=8,recompute=dtr,activation_budget_mb=1");
  const std::string e = error_of([&] { estimate(m, tight, test_util::a100()); });
  EXPECT_TRUE(contains(e, "with recompute=dtr")) << e;
  EXPECT_TRUE(contains(e, fmt::format("at least {:.2f}", minimum_activation_budget_mb(m, tight)))) << e;
  // DTR's least is its own: the bisection's, not optimal's (which is rounded to the DP's quantum,
  // so the two are not ordered here).
  Layout least = tight;
  least.activation_budget_mb = minimum_activation_budget_mb(m, tight);
  EXPECT_LE(activations(m, least, 0), least.activation_budget_mb * kMiB);
}

TEST(PlanRecompute, OptimalOnAPipelineBudgetsEveryStage) {
  // The last stage's budget leaves less room for the chain (the head's tensors take their share),
  // so it may rerun more than the first; every stage stays within the budget.
  const config::ModelConfig m = published_model(megatron_table1()[4]);  // 48 layers
  Layout l = layout_of("tp=8,pp=4,dp=2,gb=64,recompute=optimal");
  const Layout none = layout_of("tp=8,pp=4,dp=2,gb=64,recompute=none");
  const double one_microbatch = (chunk_recompute(m, none, 3).simulation.peak_bytes + stage_edge_bytes(m, none, 3)) / kMiB;
  l.activation_budget_mb = std::floor(0.6 * one_microbatch);
  double total = 0;
  for (int stage = 0; stage < l.pp; ++stage) {
    const ChunkRecompute r = chunk_recompute(m, l, stage);
    EXPECT_LE(r.simulation.peak_bytes + stage_edge_bytes(m, l, stage), l.activation_budget_mb * kMiB) << stage;
    total += r.simulation.recomputed_forwards;
  }
  EXPECT_DOUBLE_EQ(model_recomputed_layer_forwards(m, l), total);
  EXPECT_GE(chunk_recompute(m, l, 3).simulation.recomputed_forwards, chunk_recompute(m, l, 0).simulation.recomputed_forwards);
  const Estimate e = estimate(m, l, test_util::a100());
  EXPECT_DOUBLE_EQ(e.flops.recompute, total * layer_forward_flops(m, 64));
}

TEST(PlanRecompute, OptimalWithAHugeBudgetIsNone) {
  for (const char* text : {"gb=8", "tp=8,pp=4,dp=2,gb=64", "tp=4,pp=2,v=2,sp=true,gb=16"}) {
    const config::ModelConfig m = published_model(megatron_table1()[4]);
    Layout none = layout_of(std::string(text) + ",recompute=none");
    Layout optimal = layout_of(std::string(text) + ",recompute=optimal,activation_budget_mb=1e9");
    EXPECT_EQ(chunk_recompute(m, optimal, 0).schedule, memory::none_schedule(m.n_layer / (none.pp * none.virtual_stages) + 1));
    for (int stage : {0, none.pp - 1}) EXPECT_DOUBLE_EQ(activations(m, optimal, stage), activations(m, none, stage)) << text;
    const ClusterSpec c = test_util::a100();
    const Estimate o = estimate(m, optimal, c), n = estimate(m, none, c);
    EXPECT_EQ(o.flops.recompute, 0.0) << text;
    EXPECT_DOUBLE_EQ(o.time.step, n.time.step) << text;
    EXPECT_DOUBLE_EQ(o.memory.memory.total(), n.memory.memory.total()) << text;
  }
}

TEST(PlanRecompute, OptimalBelowItsMinimumIsRefusedNamingIt) {
  const config::ModelConfig m = small_gpt(8);
  Layout l = layout_of("gb=8,recompute=optimal,activation_budget_mb=1");
  const std::string e = error_of([&] { estimate(m, l, test_util::a100()); });
  EXPECT_TRUE(contains(e, "activation_budget_mb=1 is below the minimum of")) << e;
  std::smatch match;
  ASSERT_TRUE(std::regex_search(e, match, std::regex("raise activation_budget_mb to at least ([0-9.]+)"))) << e;
  const double minimum = std::stod(match[1]);
  EXPECT_DOUBLE_EQ(minimum, minimum_activation_budget_mb(m, l));
  // The minimum is at most full's peak (full is one of the schedules optimal may pick) and at least
  // what the embedding and head take alone.
  EXPECT_LE(minimum, std::ceil(activations(m, layout_of("gb=8,recompute=full"), 0) / kMiB * 100) / 100);
  EXPECT_GT(minimum * kMiB, stage_edge_bytes(m, l, 0));
  // The named minimum is accepted; just below it is refused.
  l.activation_budget_mb = minimum;
  EXPECT_EQ(error_of([&] { estimate(m, l, test_util::a100()); }), "");
  EXPECT_LE(activations(m, l, 0), minimum * kMiB);
  l.activation_budget_mb = minimum - 0.5;
  EXPECT_TRUE(contains(error_of([&] { stage_memory(m, l, 0, closed_form_pipeline()); }), "below the minimum"));
}

// Selective recomputation reruns what the accounting drops. Under this engine's (what a run of
// memory.recompute = "selective" does) a layer rebuilds its norm outputs and MLP activation: those
// kernels' forward passes, and no matmul FLOPs. Under Megatron's (Korthikanti et al.) it reruns the
// attention core, which fused attention never stored.
TEST(PlanRecompute, SelectiveRerunsWhatItsAccountingDrops) {
  const config::ModelConfig m = published_model(megatron_table1()[4]);
  const ClusterSpec c = test_util::a100();
  const Layout megatron = layout_of("tp=8,pp=4,dp=2,gb=64,recompute=selective");
  Layout engine = megatron;
  engine.activations = ActivationAccounting::Engine;
  const LayerOps ops = layer_forward_ops(m, megatron.micro_batch, megatron.tp, megatron.sp, megatron.precision, false);
  double core = 0;
  for (const Gemm& g : ops.attention_gemms) core += gemm_seconds(c, megatron.precision, g);
  for (const Stream& s : ops.attention_streams) core += stream_seconds(c, s.bytes);
  double rebuild = 0;
  for (const Stream& s : ops.streams) {
    if (s.kind == StreamKind::Norm || s.kind == StreamKind::Activation) rebuild += stream_seconds(c, s, false);
  }
  EXPECT_GT(rebuild, 0);
  EXPECT_EQ(selective_rebuild(megatron), SelectiveRebuild::AttentionCore);
  EXPECT_EQ(selective_rebuild(engine), SelectiveRebuild::NormsAndActivation);
  EXPECT_DOUBLE_EQ(layer_time(m, megatron, c, place(megatron, c)).recompute, core);
  EXPECT_DOUBLE_EQ(layer_time(m, engine, c, place(engine, c)).recompute, rebuild);
  EXPECT_GT(estimate(m, megatron, c).flops.recompute, 0);
  EXPECT_EQ(estimate(m, engine, c).flops.recompute, 0);
  Layout fused = megatron;
  fused.flash_attention = true;
  EXPECT_EQ(selective_rebuild(fused), SelectiveRebuild::Nothing);
  EXPECT_EQ(layer_time(m, fused, c, place(fused, c)).recompute, 0);
  Layout fused_engine = engine;
  fused_engine.flash_attention = true;
  EXPECT_DOUBLE_EQ(layer_time(m, fused_engine, c, place(fused_engine, c)).recompute, rebuild);
}

// With this engine's accounting each block's chain unit offers its rebuildable part, and the cost
// model predicts Checkmate, whose MILP it does not solve, by the cheaper of Rotor's schedule and
// DTR's (which keeps blocks selectively): at budgets between full's peak and none's, never costlier
// than Rotor's, cheaper where DTR's selective keeps pay, and the step's time counts each keep's
// rebuild (the layer's norm and activation passes) instead of a whole rerun forward.
TEST(PlanRecompute, CheckmateIsPredictedByTheCheaperOfRotorsAndDtrsSchedules) {
  const config::ModelConfig m = small_gpt(8);
  const auto engine = [](const std::string& text) { return parse_layout(text + ",activations=engine"); };
  const double none_peak = activations(m, engine("gb=8,recompute=none"), 0);
  const double full_peak = activations(m, engine("gb=8,recompute=full"), 0);
  int cheaper = 0;
  for (double share : {0.25, 0.5, 0.75}) {
    Layout checkmate = engine("gb=8,recompute=checkmate"), optimal = engine("gb=8,recompute=optimal"),
           dtr = engine("gb=8,recompute=dtr");
    checkmate.activation_budget_mb = optimal.activation_budget_mb = dtr.activation_budget_mb =
        std::floor((full_peak + share * (none_peak - full_peak)) / kMiB);
    const ChunkRecompute c = chunk_recompute(m, checkmate, 0), o = chunk_recompute(m, optimal, 0);
    const double dtr_time = dtr.activation_budget_mb >= minimum_activation_budget_mb(m, dtr)
                                ? chunk_recompute(m, dtr, 0).simulation.time
                                : o.simulation.time;
    EXPECT_DOUBLE_EQ(c.simulation.time, std::min(o.simulation.time, dtr_time)) << share;
    EXPECT_LE(activations(m, checkmate, 0), checkmate.activation_budget_mb * kMiB) << share;
    const double checkmate_step = estimate(m, checkmate, test_util::a100()).time.step;
    const double optimal_step = estimate(m, optimal, test_util::a100()).time.step;
    EXPECT_LE(checkmate_step, optimal_step * (1 + 1e-12)) << share;
    if (c.simulation.time < o.simulation.time) {
      ++cheaper;
      EXPECT_GT(rebuilt_layers(m, checkmate, 0), 0) << share;
      EXPECT_LT(recomputed_layer_forwards(m, checkmate, 0), recomputed_layer_forwards(m, optimal, 0)) << share;
      EXPECT_LT(checkmate_step, optimal_step) << share;
    }
  }
  EXPECT_GE(cheaper, 2);
}
