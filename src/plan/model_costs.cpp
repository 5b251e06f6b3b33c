#include "plan/model_costs.h"

#include <algorithm>

#include "plan/moe_model.h"

#include "core/check.h"

namespace tessera::plan {

using config::Architecture;
using config::ModelConfig;

int element_bytes(Precision p) { return p == Precision::Bf16 ? 2 : 4; }

namespace {
double d(int64_t v) { return static_cast<double>(v); }
int64_t vocab_per_rank(const ModelConfig& m, int tp) { return (int64_t{m.vocab_size} + tp - 1) / tp; }
}  // namespace

LayerOps layer_forward_ops(const ModelConfig& m, int64_t b, int tp, bool sp, Precision precision, bool flash) {
  TS_CHECK(tp >= 1 && m.n_head % tp == 0 && m.kv_heads() % tp == 0 && m.ffn() % tp == 0,
           "plan: tp={} must divide n_head={}, n_kv_head={} and the FFN size {}", tp, m.n_head, m.kv_heads(), m.ffn());
  const int64_t s = m.seq_len, h = m.n_embd, a = m.n_head, F = m.ffn(), t = tp, dh = m.head_dim();
  const int64_t w3 = m.qkv_dim(), hkv = m.kv_dim();  // q, k, v widths together; k's alone
  const int64_t M = b * s;  // tokens of the microbatch; every rank sees all of them inside the tp region
  const double e = element_bytes(precision);
  const double R = d(b * s * h) / d(sp ? t : 1);           // elements of a replicated [b, s, h] tensor on one rank
  const double mask = m.dropout > 0 ? 1.0 : 0.0;           // dropout keeps a one-byte mask per element
  const bool gpt2 = m.arch == Architecture::Gpt2;

  LayerOps ops;
  ops.gemms.push_back({"qkv", M, w3 / t, h});              // column-parallel: each rank owns a/t heads
  ops.gemms.push_back({"attn_proj", M, h, h / t});          // row-parallel
  if (!m.gated_mlp()) {
    ops.gemms.push_back({"fc1", M, F / t, h});
    ops.gemms.push_back({"fc2", M, h, F / t});
  } else {
    ops.gemms.push_back({"gate", M, F / t, h});
    ops.gemms.push_back({"up", M, F / t, h});
    ops.gemms.push_back({"down", M, h, F / t});
  }
  if (flash) {
    ops.flash_flops = 4.0 * d(b) * d(s) * d(s) * d(h) / d(t);  // QK^T and AV inside one kernel
  } else {
    ops.attention_gemms.push_back({"scores", s, s, dh, b * a / t});   // Q K^T per head
    ops.attention_gemms.push_back({"context", s, dh, s, b * a / t});  // softmax(.) V per head
    const double scores = d(b) * d(a / t) * d(s) * d(s);
    ops.attention_streams.push_back({"softmax", 2 * e * scores});    // fused scale + mask + softmax: read, write
    if (mask > 0) ops.attention_streams.push_back({"attn_dropout", (2 * e + mask) * scores});
  }
  const char* norm = gpt2 ? "layernorm" : "rmsnorm";
  const double hidden = d(b * s * F) / d(t);  // values of the MLP's activation on this rank
  using K = StreamKind;
  ops.streams.push_back({std::string(norm) + "_1", 2 * e * R, K::Norm, R});  // read x, write normalized x
  if (!gpt2) ops.streams.push_back({"rotary", 2 * e * d(b * s * (h + hkv)) / d(t)});  // rotate q and k in place
  ops.streams.push_back({"attn_residual", (3 * e + mask) * R, K::Residual, R});  // fused bias + dropout + residual add
  ops.streams.push_back({std::string(norm) + "_2", 2 * e * R, K::Norm, R});
  if (!m.gated_mlp()) {
    // GELU, ReLU or squared ReLU: one read and one write each, priced alike.
    ops.streams.push_back({"bias_" + config::activation_name(m.mlp_activation()), 2 * e * hidden, K::Activation,
                           hidden});
  } else {
    ops.streams.push_back({"swiglu", 3 * e * hidden, K::Activation, hidden});  // read gate and up, write their product
  }
  ops.streams.push_back({"mlp_residual", (3 * e + mask) * R, K::Residual, R});
  ops.kernels = static_cast<int64_t>(ops.gemms.size() + ops.attention_gemms.size() + ops.streams.size() +
                                     ops.attention_streams.size()) + (flash ? 1 : 0);
  return ops;
}

double layer_forward_flops(const ModelConfig& m, int64_t b) {
  LayerOps ops = layer_forward_ops(m, b, 1, false, Precision::Bf16, false);
  double f = 0;
  for (const auto& g : ops.gemms) f += g.flops();
  for (const auto& g : ops.attention_gemms) f += g.flops();
  return f;
}

double head_forward_flops(const ModelConfig& m, int64_t b) { return 2.0 * d(b) * d(m.seq_len) * d(m.n_embd) * d(m.vocab_size); }

StepFlops step_flops(const ModelConfig& m, int64_t B, config::RecomputePolicy recompute, bool flash) {
  TS_CHECK(recompute != config::RecomputePolicy::EveryK && !config::recompute_takes_budget(recompute),
           "plan: the recompute FLOPs of {} depend on its schedule; call step_flops with the schedule's recomputed layer "
           "forwards (model_recomputed_layer_forwards)",
           config::recompute_policy_name(recompute));
  return step_flops(m, B, recompute, flash, recompute == config::RecomputePolicy::Full ? static_cast<double>(m.n_layer) : 0.0);
}

StepFlops step_flops(const ModelConfig& m, int64_t B, config::RecomputePolicy recompute, bool flash, double recomputed_layers) {
  const double L = m.n_layer;
  // QK^T and AV: 2 x 2 B s^2 h.
  const double attention_core = 4.0 * d(B) * d(m.seq_len) * d(m.seq_len) * d(m.n_embd);
  StepFlops f;
  f.forward = L * layer_forward_flops(m, B) + head_forward_flops(m, B) +
              m.moe_layers() * (moe_ffn_forward_flops(m, B) - dense_mlp_forward_flops(m, B));
  f.backward = 2.0 * f.forward;
  // Whole layers rerun (full, every_k, optimal); the head is not recomputed.
  if (recomputed_layers > 0) f.recompute = recomputed_layers * layer_forward_flops(m, B);
  if (recompute == config::RecomputePolicy::Selective && !flash) f.recompute = L * attention_core;
  // A fused attention backward recomputes the scores QK^T (half the core) from the saved q, k.
  if (flash) f.recompute += L * attention_core / 2;
  return f;
}

double narayanan_parameter_count(const ModelConfig& m) {
  const double l = m.n_layer, h = m.n_embd, V = m.vocab_size, s = m.seq_len;
  return 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h));
}

double narayanan_flops_per_iteration(const ModelConfig& m, int64_t B) {
  const double l = m.n_layer, h = m.n_embd, V = m.vocab_size, s = m.seq_len;
  return 96 * d(B) * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h));
}

double korthikanti_model_flops(const ModelConfig& m, int64_t B) {
  const double l = m.n_layer, h = m.n_embd, V = m.vocab_size, s = m.seq_len;
  return 72 * d(B) * l * s * h * h * (1 + s / (6 * h) + V / (12 * h * l));
}

double layer_params_per_rank(const ModelConfig& m, int tp) {
  const double h = m.n_embd, F = m.ffn(), t = tp, bias = m.bias ? 1 : 0;
  const bool gpt2 = m.arch == Architecture::Gpt2;
  const double norm = (gpt2 ? 1 + bias : 1) * h;                // LayerNorm scale (+ shift); RMSNorm scale
  const double w3 = m.qkv_dim();                                // q, k and v rows (fewer k, v rows under GQA)
  const double attn = (w3 * h + bias * w3) / t                 // qkv, column-parallel
                      + h * h / t + bias * h;                  // proj, row-parallel: its bias is replicated
  const double mlp = m.gated_mlp() ? (2 * h * F + 2 * bias * F) / t + F * h / t + bias * h
                                   : (h * F + bias * F) / t + F * h / t + bias * h;
  return 2 * norm + attn + mlp;
}

StageParams stage_params(const ModelConfig& m, const Layout& l, int stage) {
  TS_CHECK(stage >= 0 && stage < l.pp, "plan: stage {} is outside [0, {})", stage, l.pp);
  const double h = m.n_embd, bias = m.bias ? 1 : 0;
  const double table = d(vocab_per_rank(m, l.tp)) * h;  // vocab-parallel embedding (padded to a multiple of tp)
  StageParams p;
  p.layers = static_cast<double>(m.n_layer / l.pp) * layer_params_per_rank(m, l.tp) +
             moe_layers_in_stage(m, l, stage) * moe_extra_params_per_rank(m, l);
  if (stage == 0) p.embedding += table + (m.arch == Architecture::Gpt2 ? d(m.seq_len) * h : 0.0);
  if (stage == l.pp - 1) {
    p.other += (m.arch == Architecture::Gpt2 ? 1 + bias : 1) * h;
    if (!m.tied_embeddings || l.pp > 1) p.embedding += table;
  }
  return p;
}

double adafactor_state_floats(const ModelConfig& m, const Layout& l, int stage) {
  const double C = m.n_embd, F = m.ffn(), W3 = m.qkv_dim(), E = m.moe_experts, t = l.tp, bias = m.bias ? 1 : 0;
  const double ep = std::max(1, l.ep), V = d(vocab_per_rank(m, l.tp)) * l.tp;
  const bool gpt2 = m.arch == Architecture::Gpt2;
  const double mlps = m.gated_mlp() ? 2 : 1;  // first projections: fc, or gate and up
  const double moe = moe_layers_in_stage(m, l, stage), dense = static_cast<double>(m.n_layer / l.pp) - moe;
  double factored = 0, unfactored = 0;
  // Every block: its norms (LayerNorm: gain and shift), attention's qkv and projection.
  const double blocks = dense + moe;
  factored += blocks * ((W3 + C) + 2 * C);
  unfactored += blocks * (2 * (gpt2 ? 1 + bias : 1) * C + bias * (W3 / t + C));
  // A dense MLP: fc (or gate and up) [F, C] and proj [C, F], their biases.
  factored += dense * (mlps * (F + C) + (C + F));
  unfactored += dense * bias * (mlps * F / t + C);
  // An MoE layer: the router [E, C], each expert's matrices, and this rank's experts' stacked biases.
  factored += moe * ((E + C) + E * (mlps * (F + C) + (C + F)));
  unfactored += moe * bias * E / ep * (mlps * F + C);
  if (stage == 0) factored += (V + C) + (gpt2 ? d(m.seq_len) + C : 0.0);
  if (stage == l.pp - 1) {
    unfactored += (gpt2 ? 1 + bias : 1) * C;
    if (!m.tied_embeddings || l.pp > 1) factored += V + C;
  }
  return factored + (l.zero_stage >= 1 ? unfactored / l.dp : unfactored);
}

}  // namespace tessera::plan
