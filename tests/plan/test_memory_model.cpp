// Memory per rank: the ZeRO paper's example and Korthikanti et al.'s activation formulas.
#include <gtest/gtest.h>

#include "plan/engine_memory.h"
#include "plan/estimate.h"
#include "plan/memory_model.h"
#include "plan/model_costs.h"
#include "plan/published.h"
#include "plan_test_util.h"

using namespace tessera;
using namespace tessera::plan;

namespace {
constexpr double kGB = 1e9;

config::ModelConfig gpt(int layers, int heads, int hidden) {
  config::ModelConfig m;
  m.n_layer = layers;
  m.n_head = heads;
  m.n_embd = hidden;
  m.vocab_size = 51200;
  m.seq_len = 2048;
  m.dropout = 0.1f;
  return m;
}
}  // namespace

TEST(PlanMemoryModel, ZeroPaperExample) {
  // Rajbhandari et al.: Psi = 7.5B parameters, N_d = 64, mixed-precision Adam (K = 12).
  const double psi = 7.5e9;
  auto gb = [&](int stage) { return model_state_bytes(psi, Precision::Bf16, stage, 64).total() / kGB; };
  EXPECT_NEAR(gb(0), 120.0, 0.05);
  EXPECT_NEAR(gb(1), 31.4, 0.05);
  EXPECT_NEAR(gb(2), 16.6, 0.05);
  EXPECT_NEAR(gb(3), 1.9, 0.05);
  // Term by term: stage 1 = 4 Psi + K Psi / N_d, stage 2 = 2 Psi + (2 + K) Psi / N_d, stage 3 = 16 Psi / N_d.
  MemoryBreakdown s1 = model_state_bytes(psi, Precision::Bf16, 1, 64);
  EXPECT_DOUBLE_EQ(s1.params + s1.grads, 4 * psi);
  EXPECT_DOUBLE_EQ(s1.optimizer, 12 * psi / 64);
  MemoryBreakdown s2 = model_state_bytes(psi, Precision::Bf16, 2, 64);
  EXPECT_DOUBLE_EQ(s2.total(), 2 * psi + 14 * psi / 64);
  EXPECT_DOUBLE_EQ(model_state_bytes(psi, Precision::Bf16, 3, 64).total(), 16 * psi / 64);
  // fp32 Adam keeps no master copy: 4 + 4 + 8 bytes.
  EXPECT_DOUBLE_EQ(model_state_bytes(psi, Precision::Fp32, 0, 64).total(), 16 * psi);
  EXPECT_DOUBLE_EQ(model_state_bytes(psi, Precision::Fp32, 1, 64).optimizer, 8 * psi / 64);
}

TEST(PlanMemoryModel, OptimizerStateFollowsTheChosenOptimizer) {
  // K = the fp32 master (bf16 training) + the optimizer's own bytes per parameter.
  const double psi = 1e9;
  EXPECT_DOUBLE_EQ(model_state_bytes(psi, Precision::Fp32, 0, 1, optim::OptimizerKind::Sgd).optimizer, 0.0);  // no momentum by default
  EXPECT_DOUBLE_EQ(model_state_bytes(psi, Precision::Bf16, 1, 8, optim::OptimizerKind::Lamb).optimizer, 12 * psi / 8);
  EXPECT_DOUBLE_EQ(model_state_bytes(psi, Precision::Fp32, 0, 1, optim::OptimizerKind::Adam8bit).optimizer, (2 + 8.0 / 2048) * psi);
  EXPECT_DOUBLE_EQ(model_state_bytes(psi, Precision::Bf16, 0, 1, optim::OptimizerKind::Adafactor).optimizer, 4 * psi);
  // The layout names it, and round-trips it.
  Layout l = parse_layout("dp=8,zero=1,gb=8,optimizer=adam8bit");
  EXPECT_EQ(l.optimizer, optim::OptimizerKind::Adam8bit);
  EXPECT_EQ(parse_layout(to_string(l)), l);
  EXPECT_EQ(to_string(parse_layout("dp=8,gb=8")).find("optimizer"), std::string::npos);
  config::ModelConfig m = published_model(megatron_table1()[2]);
  Layout adam = parse_layout("dp=64,gb=64,zero=1");
  const double adam_bytes = peak_rank_memory(m, adam, closed_form_pipeline()).memory.optimizer;
  l = parse_layout("dp=64,gb=64,zero=1,optimizer=adam8bit");
  EXPECT_NEAR(peak_rank_memory(m, l, closed_form_pipeline()).memory.optimizer / adam_bytes, (4 + 2 + 8.0 / 2048) / 12,
              1e-12);
  EXPECT_THROW(parse_layout("optimizer=adagrad"), Error);
}

TEST(PlanMemoryModel, LayoutModelStatesUseTheZeroFormulas) {
  // The planner's rank of a dp=64 layout of the 7.5B Table 1 model holds exactly the ZeRO bytes of its parameters.
  config::ModelConfig m = published_model(megatron_table1()[2]);
  for (int zero = 0; zero <= 3; ++zero) {
    Layout l;
    l.dp = 64;
    l.global_batch = 64;
    l.zero_stage = zero;
    MemoryBreakdown mem = peak_rank_memory(m, l, closed_form_pipeline()).memory;
    MemoryBreakdown want = model_state_bytes(static_cast<double>(m.parameter_count()), Precision::Bf16, zero, 64);
    EXPECT_DOUBLE_EQ(mem.params, want.params);
    EXPECT_DOUBLE_EQ(mem.grads, want.grads);
    EXPECT_DOUBLE_EQ(mem.optimizer, want.optimizer);
  }
}

TEST(PlanMemoryModel, ActivationsPerLayerAreKorthikanti) {
  for (auto m : {gpt(96, 96, 12288), gpt(105, 128, 20480), gpt(24, 24, 2304)}) {
    const double s = m.seq_len, h = m.n_embd, a = m.n_head;
    for (int64_t b : {1, 4}) {
      const double sbh = s * double(b) * h;
      // No parallelism: sbh (34 + 5 a s / h).
      EXPECT_DOUBLE_EQ(layer_activation_bytes(m, b, 1, false, config::RecomputePolicy::None, false, Precision::Bf16),
                       sbh * (34 + 5 * a * s / h));
      for (int t : {1, 2, 4, 8}) {
        auto bytes = [&](bool sp, config::RecomputePolicy r) { return layer_activation_bytes(m, b, t, sp, r, false, Precision::Bf16); };
        EXPECT_DOUBLE_EQ(bytes(false, config::RecomputePolicy::None), sbh * (10 + 24.0 / t + 5 * a * s / (h * t))) << "TP t=" << t;
        EXPECT_DOUBLE_EQ(bytes(true, config::RecomputePolicy::None), sbh * (34.0 / t + 5 * a * s / (h * t))) << "TP+SP t=" << t;
        EXPECT_DOUBLE_EQ(bytes(false, config::RecomputePolicy::Selective), sbh * (10 + 24.0 / t)) << "TP+selective t=" << t;
        EXPECT_DOUBLE_EQ(bytes(true, config::RecomputePolicy::Selective), 34 * sbh / t) << "TP+SP+selective t=" << t;
        EXPECT_DOUBLE_EQ(bytes(false, config::RecomputePolicy::Full), 2 * sbh) << "full t=" << t;
        EXPECT_DOUBLE_EQ(bytes(true, config::RecomputePolicy::Full), 2 * sbh / t) << "full+SP t=" << t;
      }
    }
  }
}

TEST(PlanMemoryModel, ActivationVariantsFollowTheirTensors) {
  config::ModelConfig m = gpt(4, 16, 1024);
  const double sbh = 2048.0 * 1024;
  // Without dropout the masks and the dropout copy of the scores go: 34 -> 32 (sbh) and 5 -> 2 (a s^2 b).
  config::ModelConfig no_dropout = m;
  no_dropout.dropout = 0;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(no_dropout, 1, 1, false, config::RecomputePolicy::None, false, Precision::Bf16),
                   sbh * 32 + 2 * 16 * 2048.0 * 2048);
  // fp32 doubles every tensor but the one-byte masks: 2 x 32 + 2 and 2 x 2 + 1 for the scores.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, 1, 1, false, config::RecomputePolicy::None, false, Precision::Fp32),
                   sbh * 66 + 9 * 16 * 2048.0 * 2048);
  // Fused attention keeps q, k, v and the output plus an fp32 log-sum-exp per row and head.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(m, 1, 1, false, config::RecomputePolicy::None, true, Precision::Bf16),
                   sbh * 34 + 4 * 16 * 2048.0);
}

TEST(PlanMemoryModel, FirstStageHoldsTheWholeModelsActivationsUnder1F1B) {
  // Korthikanti: the first stage keeps p microbatches of L/p layers, i.e. L layers, whatever p is.
  // (No dropout here, so the embedding keeps no mask and the count is the layers' alone.)
  config::ModelConfig m = gpt(32, 32, 4096);
  m.dropout = 0;
  const double per_layer = layer_activation_bytes(m, 1, 8, true, config::RecomputePolicy::None, false, Precision::Bf16);
  for (int p : {2, 4, 8}) {
    Layout l;
    l.activations = ActivationAccounting::Megatron;
    l.tp = 8;
    l.pp = p;
    l.sp = true;
    l.global_batch = 64;
    EXPECT_DOUBLE_EQ(stage_memory(m, l, 0, closed_form_pipeline()).activations, 32 * per_layer) << "p=" << p;
    // The last stage holds one microbatch of its L/p layers plus the head's tensors.
    const double head = 2 * 2 * 2048.0 * 4096 / 8 + 4 * 2048.0 * 51200 / 8;
    EXPECT_DOUBLE_EQ(stage_memory(m, l, p - 1, closed_form_pipeline()).activations, 32.0 / p * per_layer + head);
  }
  // Interleaving multiplies it by 1 + (p - 1)/(p v) (Korthikanti's m is our v).
  for (int v : {2, 4}) {
    Layout l;
    l.activations = ActivationAccounting::Megatron;
    l.tp = 8;
    l.pp = 4;
    l.virtual_stages = v;
    l.schedule = config::ScheduleKind::Interleaved;
    l.sp = true;
    l.global_batch = 64;
    EXPECT_NEAR(stage_memory(m, l, 0, closed_form_pipeline()).activations / (32 * per_layer), 1 + 3.0 / (4 * v), 1e-12)
        << "v=" << v;
  }
  // GPipe keeps every microbatch: m x L/p layers.
  Layout gpipe;
  gpipe.activations = ActivationAccounting::Megatron;
  gpipe.tp = 8;
  gpipe.pp = 4;
  gpipe.sp = true;
  gpipe.global_batch = 16;
  gpipe.schedule = config::ScheduleKind::GPipe;
  EXPECT_DOUBLE_EQ(stage_memory(m, gpipe, 0, closed_form_pipeline()).activations, 16 * 8 * per_layer);
}

TEST(PlanMemoryModel, RecomputeKeepsOneLayersWorkingSet) {
  // With recompute, the layer being recomputed holds its full set once on top of the kept inputs.
  config::ModelConfig m = gpt(32, 32, 4096);
  m.dropout = 0;
  Layout l;
  l.activations = ActivationAccounting::Megatron;
  l.tp = 8;
  l.pp = 4;
  l.global_batch = 64;
  l.recompute = config::RecomputePolicy::Full;
  const double kept = layer_activation_bytes(m, 1, 8, false, config::RecomputePolicy::Full, false, Precision::Bf16);
  const double all = layer_activation_bytes(m, 1, 8, false, config::RecomputePolicy::None, false, Precision::Bf16);
  EXPECT_DOUBLE_EQ(stage_memory(m, l, 0, closed_form_pipeline()).activations, 32 * kept + all - kept);
}

TEST(PlanMemoryModel, TagsAreTheAllocatorTags) {
  EXPECT_EQ(kMemoryTags.size(), 6u);
  MemoryBreakdown mem{1, 2, 3, 4, 5, 6};
  double sum = 0;
  for (auto tag : kMemoryTags) sum += mem.by_tag(tag);
  EXPECT_EQ(sum, mem.total());
  EXPECT_EQ(mem.by_tag("activations"), 4);
  EXPECT_TRUE(test_util::contains(test_util::error_of([&] { mem.by_tag("weights"); }), "not a memory tag"));
}

TEST(PlanMemoryModel, EngineTagsAreTheRuntimesEight) {
  MemoryBreakdown mem{1, 2, 3, 4, 5, 6, 7, 8};
  double sum = 0;
  for (auto tag : kEngineMemoryTags) sum += mem.by_tag(tag);
  EXPECT_EQ(sum, mem.total());
  EXPECT_EQ(mem.by_tag("working_copies"), 8);
}

// This engine's allocations, derived by hand for a tiny GPT-2 (tests/train/test_planner_memory.cpp
// holds them against the runtime's measured peaks). P = 66560 (embedding: 2048 x 32 tokens, 32 x 32
// positions) + 2 x 12704 (blocks) + 64 (final norm) = 92032 parameters.
TEST(PlanMemoryModel, EngineStatesCountThisEnginesAllocations) {
  config::ModelConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 32;
  m.seq_len = 32;
  m.vocab_size = 2048;
  m.dropout = 0.1f;
  const double P = 92032, B = 2, T = 32, C = 32;
  auto memory = [&](const std::string& layout, int stage = 0) {
    Layout l = parse_layout("mb=2,gb=8,precision=fp32,flash=true,states=engine,bucket_mb=0.01," + layout);
    check_layout(m, l, l.devices());
    return stage_memory(m, l, stage, closed_form_pipeline());
  };
  const MemoryBreakdown one = memory("");
  EXPECT_EQ(one.params, 4 * P);  // f32 values: they are the master weights
  EXPECT_EQ(one.grads, 4 * P);
  EXPECT_EQ(one.optimizer, 8 * P);  // Adam's m and v
  EXPECT_EQ(one.comm, 0);
  // The MLP's backward under dropout: dy, its masked copy, fc2's input gradient and GeLU's (F = 4C
  // each) and fc1's input gradient.
  EXPECT_EQ(one.workspace, 4 * B * T * (3 * C + 2 * 4 * C));
  // A pipeline stage holds the whole model's values and gradients, and updates its own: the
  // embedding and the first block.
  const MemoryBreakdown first = memory("pp=2", 0);
  EXPECT_EQ(first.params, 4 * P);
  EXPECT_EQ(first.optimizer, 8 * (66560 + 12704));
  EXPECT_EQ(first.comm, 2 * 4 * B * T * C);  // the sent boundary tensors
  // ZeRO-3: the embedding gathered with the first block prefetched, the embedding's bucket filling
  // and both blocks' buckets (the second holding the final norm) still on the wire.
  const MemoryBreakdown zero3 = memory("dp=2,zero=3");
  EXPECT_EQ(zero3.params, 4 * P / 2);
  EXPECT_EQ(zero3.comm, 4 * (66560 + 12704 + 66560 + 12768 + 12704));
  EXPECT_EQ(engine_zero_comm_bytes(m, parse_layout("mb=2,gb=8,dp=2,zero=3,states=engine,bucket_mb=0.01")), zero3.comm);
  // Mixed precision adds 16-bit working copies of what the rank reads, and halves the gradients
  // flowing down.
  const MemoryBreakdown bf16 = memory("precision=bf16");
  EXPECT_EQ(bf16.params, 4 * P);
  EXPECT_EQ(bf16.working_copies, 2 * P);
  EXPECT_EQ(bf16.workspace, one.workspace / 2);
}

TEST(PlanMemoryModel, RecomputeAndShardingShrinkTheRightTags) {
  config::ModelConfig m = published_model(megatron_table1()[3]);  // 18.4B
  Layout l;
  l.tp = 8;
  l.dp = 4;
  l.global_batch = 32;
  auto mem = [&](const Layout& x) { return peak_rank_memory(m, x, closed_form_pipeline()).memory; };
  Layout selective = l, full = l, zero3 = l;
  selective.recompute = config::RecomputePolicy::Selective;
  full.recompute = config::RecomputePolicy::Full;
  zero3.zero_stage = 3;
  EXPECT_LT(mem(selective).activations, mem(l).activations);
  EXPECT_LT(mem(full).activations, mem(selective).activations);
  EXPECT_EQ(mem(full).params, mem(l).params);
  EXPECT_DOUBLE_EQ(mem(zero3).params * 4, mem(l).params);
  // ZeRO-3 gathers a layer's weights (and prefetches the next) instead of filling gradient buckets.
  const double bucket = 2 * 25 * 1024.0 * 1024;
  EXPECT_DOUBLE_EQ(mem(zero3).comm - mem(l).comm, 2 * 2 * layer_params_per_rank(m, 8) - bucket);
}
