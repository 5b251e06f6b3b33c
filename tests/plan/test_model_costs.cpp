// Parameter counts and FLOPs per step against Narayanan et al. 2021 and Korthikanti et al. 2022.
#include <gtest/gtest.h>

#include <cmath>

#include "plan/model_costs.h"
#include "plan/published.h"
#include "plan_test_util.h"

using namespace tessera;
using namespace tessera::plan;

TEST(PlanModelCosts, ParameterCountIsNarayananPlusTheFinalNorm) {
  for (const auto& row : megatron_table1()) {
    config::ModelConfig m = published_model(row);
    // The exact count of the model the trainer builds has one LayerNorm (2h) the paper leaves out.
    const double exact = static_cast<double>(m.parameter_count());
    EXPECT_NEAR(exact, narayanan_parameter_count(m) + 2.0 * m.n_embd, 1e-12 * exact) << row.config;
    // And the formula reproduces the printed size, rounded as printed (one decimal in billions).
    const double billions = narayanan_parameter_count(m) / 1e9;
    EXPECT_DOUBLE_EQ(std::round(billions * 10) / 10, row.params_billion) << row.config << ": " << billions;
  }
}

TEST(PlanModelCosts, StageParametersAddUpToTheModel) {
  config::ModelConfig m = published_model(megatron_table1()[4]);  // 39.1B
  Layout one;
  EXPECT_EQ(stage_params(m, one, 0).total(), static_cast<double>(m.parameter_count()));
  // Split over 4 stages: the layers divide, the table is held by the first and (tied copy) the last.
  Layout four;
  four.pp = 4;
  double sum = 0;
  for (int s = 0; s < 4; ++s) sum += stage_params(m, four, s).total();
  EXPECT_EQ(sum, static_cast<double>(m.parameter_count()) + double(m.vocab_size) * m.n_embd);
  // Tensor parallelism splits the weights; the replicated norms and biases stay whole.
  const double h = m.n_embd;
  EXPECT_DOUBLE_EQ(8 * layer_params_per_rank(m, 8), layer_params_per_rank(m, 1) + 7 * (4 * h + 2 * h));
}

TEST(PlanModelCosts, FlopsWithFullRecomputeEqualNarayanan) {
  for (const auto& row : megatron_table1()) {
    config::ModelConfig m = published_model(row);
    StepFlops f = step_flops(m, row.batch, config::RecomputePolicy::Full, false);
    const double narayanan = narayanan_flops_per_iteration(m, row.batch);
    EXPECT_NEAR(f.hardware() / narayanan, 1.0, 1e-12) << row.config;
  }
  // The paper's worked number: the 1T model does 5.14e19 FLOPs per iteration.
  config::ModelConfig one_t = published_model(megatron_table1().back());
  EXPECT_NEAR(step_flops(one_t, 3072, config::RecomputePolicy::Full, false).hardware() / 5.14e19, 1.0, 0.005);
}

TEST(PlanModelCosts, ModelFlopsEqualKorthikantiAndExcludeRecompute) {
  for (const auto& row : megatron_table1()) {
    config::ModelConfig m = published_model(row);
    for (config::RecomputePolicy r : {config::RecomputePolicy::None, config::RecomputePolicy::Selective, config::RecomputePolicy::Full}) {
      StepFlops f = step_flops(m, row.batch, r, false);
      EXPECT_NEAR(f.model() / korthikanti_model_flops(m, row.batch), 1.0, 1e-12) << row.config;
      EXPECT_DOUBLE_EQ(f.backward, 2 * f.forward);
    }
    EXPECT_EQ(step_flops(m, row.batch, config::RecomputePolicy::None, false).recompute, 0.0);
  }
}

TEST(PlanModelCosts, SelectiveRecomputeCostsWhatKorthikantiReports) {
  // +2.7% of the layers' forward FLOPs for GPT-3 175B, +1.6% for MT-NLG 530B.
  auto overhead = [](int heads, int hidden, int layers) {
    config::ModelConfig m;
    m.n_layer = layers;
    m.n_head = heads;
    m.n_embd = hidden;
    m.vocab_size = 51200;
    m.seq_len = 2048;
    StepFlops f = step_flops(m, 1, config::RecomputePolicy::Selective, false);
    return f.recompute / (layers * layer_forward_flops(m, 1));
  };
  EXPECT_NEAR(overhead(96, 12288, 96), 0.027, 0.0005);
  EXPECT_NEAR(overhead(128, 20480, 105), 0.016, 0.0005);
}

TEST(PlanModelCosts, LayerOpsFollowTheShapes) {
  config::ModelConfig m = published_model(megatron_table1()[2]);  // h = 4096, a = 32
  LayerOps ops = layer_forward_ops(m, 2, 4, false, Precision::Bf16, false);
  ASSERT_EQ(ops.gemms.size(), 4u);
  EXPECT_EQ(ops.gemms[0].m, 2 * 2048);
  EXPECT_EQ(ops.gemms[0].n, 3 * 4096 / 4);
  EXPECT_EQ(ops.gemms[0].k, 4096);
  ASSERT_EQ(ops.attention_gemms.size(), 2u);
  EXPECT_EQ(ops.attention_gemms[0].batch, 2 * 32 / 4);
  // Per-rank FLOPs are the layer's over t.
  double per_rank = 0;
  for (const auto& g : ops.gemms) per_rank += g.flops();
  for (const auto& g : ops.attention_gemms) per_rank += g.flops();
  EXPECT_DOUBLE_EQ(per_rank * 4, layer_forward_flops(m, 2));
  // Fused attention replaces the two batched products and the score kernels by one kernel of the same FLOPs.
  LayerOps flash = layer_forward_ops(m, 2, 4, false, Precision::Bf16, true);
  EXPECT_TRUE(flash.attention_gemms.empty());
  EXPECT_TRUE(flash.attention_streams.empty());
  EXPECT_DOUBLE_EQ(flash.flash_flops, ops.attention_gemms[0].flops() + ops.attention_gemms[1].flops());
}

TEST(PlanModelCosts, LlamaLayersCountTheirThreeMlpProjections) {
  config::ModelConfig m;
  m.arch = config::Architecture::Llama;
  m.bias = false;
  m.n_layer = 2;
  m.n_head = 8;
  m.n_embd = 512;
  m.vocab_size = 1000;
  m.seq_len = 256;
  const double b = 3, s = m.seq_len, h = m.n_embd, F = m.ffn();
  EXPECT_DOUBLE_EQ(layer_forward_flops(m, 3), 2 * b * s * (4 * h * h + 3 * h * F) + 4 * b * s * s * h);
  Layout l;
  EXPECT_EQ(stage_params(m, l, 0).total(), static_cast<double>(m.parameter_count()));
}

// The MLP's shape follows model.activation on either architecture: three projections for SwiGLU
// (GPT-2 too), two for the ungated ones (Llama too); parameters per rank add up to the model's, and
// the activation's elementwise pass reads and writes F values (SwiGLU reads two).
TEST(PlanModelCosts, TheMlpFollowsTheActivationNotTheArchitecture) {
  using config::Activation;
  for (config::Architecture arch : {config::Architecture::Gpt2, config::Architecture::Llama}) {
    for (Activation a : {Activation::Gelu, Activation::Relu, Activation::Relu2, Activation::Swiglu}) {
      config::ModelConfig m;
      m.arch = arch;
      m.bias = arch == config::Architecture::Gpt2;
      m.activation = a;
      m.n_layer = 2;
      m.n_head = 8;
      m.n_embd = 512;
      m.vocab_size = 1000;
      m.seq_len = 256;
      const std::string what = config::architecture_name(arch) + " " + config::activation_name(a);
      const double b = 3, s = m.seq_len, h = m.n_embd, F = m.ffn();
      const double matrices = a == Activation::Swiglu ? 3 : 2;
      EXPECT_DOUBLE_EQ(layer_forward_flops(m, 3), 2 * b * s * (4 * h * h + matrices * h * F) + 4 * b * s * s * h)
          << what;
      Layout l;
      EXPECT_EQ(stage_params(m, l, 0).total(), static_cast<double>(m.parameter_count())) << what;
      const LayerOps ops = layer_forward_ops(m, 3, 1, false, Precision::Bf16, false);
      EXPECT_EQ(ops.gemms.size(), 2 + matrices) << what;
    }
  }
}
