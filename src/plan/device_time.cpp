#include "plan/device_time.h"

#include <algorithm>

#include "plan/collectives.h"

namespace tessera::plan {

namespace {
double gemm_bytes(const Gemm& g, double e) {
  const double m = static_cast<double>(g.m), n = static_cast<double>(g.n), k = static_cast<double>(g.k);
  return e * (m * k + k * n + m * n) * static_cast<double>(g.batch);
}
}  // namespace

double gemm_efficiency(const ClusterSpec& c, const Gemm& g) {
  // A batched product is that many calls of one product's size.
  return c.efficiency.gemm_curve.empty() ? c.efficiency.gemm
                                         : c.efficiency.gemm_curve.at(g.flops() / static_cast<double>(g.batch));
}

double gemm_seconds(const ClusterSpec& c, Precision p, const Gemm& g) {
  const double compute = g.flops() / (c.peak_flops(p) * gemm_efficiency(c, g));
  const double memory = gemm_bytes(g, element_bytes(p)) / (c.device.memory_bandwidth * c.efficiency.memory);
  return std::max(compute, memory) + c.efficiency.kernel_overhead;
}

double gemm_backward_seconds(const ClusterSpec& c, Precision p, const Gemm& g) {
  // dA[m, k] = dC[m, n] B^T[n, k];  dB[k, n] = A^T[k, m] dC[m, n]
  return gemm_seconds(c, p, Gemm{g.name, g.m, g.k, g.n, g.batch}) + gemm_seconds(c, p, Gemm{g.name, g.k, g.n, g.m, g.batch});
}

double stream_seconds(const ClusterSpec& c, double bytes) {
  return bytes / (c.device.memory_bandwidth * c.efficiency.memory) + c.efficiency.kernel_overhead;
}

double stream_seconds(const ClusterSpec& c, const Stream& s, bool backward) {
  const KernelCosts& k = c.efficiency.kernels;
  double per_value = 0;
  switch (s.kind) {
    case StreamKind::Norm: per_value = backward ? k.norm_backward : k.norm; break;
    case StreamKind::Activation: per_value = backward ? k.activation_backward : k.activation; break;
    case StreamKind::Residual: per_value = k.residual; break;
    case StreamKind::Other: break;
  }
  const double bytes = (backward ? kBackwardStreamTraffic : 1.0) * s.bytes;
  return std::max(bytes / (c.device.memory_bandwidth * c.efficiency.memory), per_value * s.elements) +
         c.efficiency.kernel_overhead;
}

double fused_seconds(const ClusterSpec& c, Precision p, double flops) {
  const double efficiency = c.efficiency.attention_curve.empty() ? c.efficiency.gemm : c.efficiency.attention_curve.at(flops);
  return flops / (c.peak_flops(p) * efficiency) + c.efficiency.kernel_overhead;
}

double fused_backward_seconds(const ClusterSpec& c, Precision p, double forward_flops) {
  if (c.efficiency.attention_backward_curve.empty()) return fused_seconds(c, p, kFlashBackwardFlops * forward_flops);
  return kFlashBackwardFlops * forward_flops / (c.peak_flops(p) * c.efficiency.attention_backward_curve.at(forward_flops)) +
         c.efficiency.kernel_overhead;
}

LayerTime layer_time(const config::ModelConfig& m, const Layout& l, const ClusterSpec& c, const Placement& place) {
  const LayerOps ops = layer_forward_ops(m, l.micro_batch, l.tp, l.sp, l.precision, l.flash_attention);
  const Precision p = l.precision;
  double dense_f = 0, dense_b = 0, core_f = 0, core_b = 0, streams_f = 0, streams_b = 0;
  for (const auto& g : ops.gemms) {
    dense_f += gemm_seconds(c, p, g);
    dense_b += gemm_backward_seconds(c, p, g);
  }
  for (const auto& g : ops.attention_gemms) {
    core_f += gemm_seconds(c, p, g);
    core_b += gemm_backward_seconds(c, p, g);
  }
  for (const auto& s : ops.attention_streams) {
    core_f += stream_seconds(c, s.bytes);
    core_b += stream_seconds(c, kBackwardStreamTraffic * s.bytes);
  }
  if (l.flash_attention) {
    core_f += fused_seconds(c, p, ops.flash_flops);
    core_b += fused_backward_seconds(c, p, ops.flash_flops);
  }
  for (const auto& s : ops.streams) {
    streams_f += stream_seconds(c, s, false);
    streams_b += stream_seconds(c, s, true);
  }

  LayerTime t;
  for (const Stream& stream : ops.streams) {
    if (stream.kind == StreamKind::Norm || stream.kind == StreamKind::Activation) {
      t.rebuild += stream_seconds(c, stream, false);
    }
  }
  t.forward = dense_f + core_f + streams_f;
  t.backward = dense_b + core_b + streams_b;
  // Two tensor-parallel exchanges each way (after attention and after the MLP, and their
  // mirrors in backward): all-reduces, or with sp an all-gather plus a reduce-scatter of the same
  // volume (Korthikanti et al.).
  const double activation = static_cast<double>(element_bytes(p)) * static_cast<double>(l.micro_batch) * m.seq_len * m.n_embd;
  const double exchange = l.sp ? all_gather_seconds(place.tp, activation) + reduce_scatter_seconds(place.tp, activation)
                               : all_reduce_seconds(place.tp, activation);
  t.forward_tp = 2 * exchange;
  t.backward_tp = 2 * exchange;
  if (l.recompute == config::RecomputePolicy::Full) {
    t.recompute = t.forward;
    t.recompute_tp = t.forward_tp;
  } else if (selective_rebuild(l) == SelectiveRebuild::AttentionCore) {
    t.recompute = core_f;
  } else if (selective_rebuild(l) == SelectiveRebuild::NormsAndActivation) {
    t.recompute = t.rebuild;
  }
  return t;
}

}  // namespace tessera::plan
