#include "plan/moe_model.h"

#include <algorithm>

#include "plan/device_time.h"
#include "plan/model_costs.h"

namespace tessera::plan {

namespace {
double d(int64_t v) { return static_cast<double>(v); }
int mlp_matrices(const config::ModelConfig& m) { return m.gated_mlp() ? 3 : 2; }
}  // namespace

int moe_layers_in_stage(const config::ModelConfig& m, const Layout& l, int stage) {
  const int per_stage = m.n_layer / l.pp;
  int n = 0;
  for (int layer = stage * per_stage; layer < (stage + 1) * per_stage; ++layer) n += m.is_moe_layer(layer) ? 1 : 0;
  return n;
}

double moe_extra_params_per_rank(const config::ModelConfig& m, const Layout& l) {
  if (m.moe_experts == 0) return 0;
  const double h = m.n_embd, F = m.ffn(), t = l.tp, bias = m.bias ? 1 : 0;
  const double dense_share = m.gated_mlp() ? (2 * h * F + 2 * bias * F) / t + F * h / t + bias * h
                                           : (h * F + bias * F) / t + F * h / t + bias * h;
  return moe_expert_params_per_rank(m, l) + d(m.moe_experts) * h - dense_share;
}

double moe_expert_params_per_rank(const config::ModelConfig& m, const Layout& l) {
  if (m.moe_experts == 0) return 0;
  return static_cast<double>(m.moe_experts) / l.ep * d(m.mlp_parameter_count());
}

double dense_mlp_forward_flops(const config::ModelConfig& m, int64_t b) {
  return 2.0 * d(b) * m.seq_len * m.n_embd * m.ffn() * mlp_matrices(m);
}

double moe_ffn_forward_flops(const config::ModelConfig& m, int64_t b, bool total) {
  const double router = 2.0 * d(b) * m.seq_len * m.n_embd * m.moe_experts;
  return router + (total ? m.moe_experts : m.moe_top_k) * dense_mlp_forward_flops(m, b);
}

double moe_all_to_all_pass_bytes(const config::ModelConfig& m, const Layout& l) {
  if (m.moe_experts == 0 || l.ep <= 1) return 0;
  const double rows = d(l.micro_batch) * m.seq_len * m.moe_top_k;
  return rows * m.n_embd * element_bytes(l.precision) * (l.ep - 1) / l.ep;
}

MoeLayerTime moe_layer_extra_time(const config::ModelConfig& m, const Layout& l, const ClusterSpec& c,
                                  const Placement& groups) {
  MoeLayerTime t;
  if (m.moe_experts == 0) return t;
  const int64_t rows = int64_t{l.micro_batch} * m.seq_len, h = m.n_embd, F = m.ffn();
  const int64_t Ft = F / l.tp;
  const int k = m.moe_top_k;
  auto mlp = [&](int64_t tokens, int64_t width, bool backward) {
    double s = 0;
    for (int i = 0; i + 1 < mlp_matrices(m); ++i) {
      const Gemm up{"up", tokens, width, h};
      s += backward ? gemm_backward_seconds(c, l.precision, up) : gemm_seconds(c, l.precision, up);
    }
    const Gemm down{"down", tokens, h, width};
    return s + (backward ? gemm_backward_seconds(c, l.precision, down) : gemm_seconds(c, l.precision, down));
  };
  // The router runs in f32 whatever the compute precision (nn/moe.h).
  const Gemm router{"router", rows, m.moe_experts, h};
  // Experts are whole on every tp rank; the dense MLP this replaces was F/t wide.
  t.forward = k * mlp(rows, F, false) - mlp(rows, Ft, false) + gemm_seconds(c, Precision::Fp32, router);
  t.backward = k * mlp(rows, F, true) - mlp(rows, Ft, true) + gemm_backward_seconds(c, Precision::Fp32, router);
  const double pass = moe_all_to_all_pass_bytes(m, l) * l.ep / std::max(1, l.ep - 1);  // the whole send buffer
  t.forward_comm = 2 * all_to_all_seconds(groups.ep, l.ep > 1 ? pass : 0);
  t.backward_comm = t.forward_comm;
  return t;
}

MoeSummary moe_summary(const config::ModelConfig& m, const Layout& l, const ClusterSpec& c) {
  MoeSummary s;
  s.total_params = m.parameter_count();
  s.active_params = m.active_parameter_count();
  if (m.moe_experts == 0) return s;
  int layers = 0;
  for (int stage = 0; stage < l.pp; ++stage) layers = std::max(layers, moe_layers_in_stage(m, l, stage));
  const double microbatches = d(l.microbatches());
  s.all_to_all_bytes_per_step = 4 * layers * microbatches * moe_all_to_all_pass_bytes(m, l);
  const MoeLayerTime t = moe_layer_extra_time(m, l, c, place(l, c));
  s.all_to_all_seconds_per_step = layers * microbatches * (t.forward_comm + t.backward_comm);
  return s;
}

}  // namespace tessera::plan
