#pragma once
// The efficiency model of one device: how long a matrix multiply or a bandwidth-bound kernel
// takes. Three named constants of the cluster (efficiency.gemm, efficiency.memory,
// efficiency.kernel_overhead_us) carry all of it, efficiency.gemm read from a measured curve by
// size where the cluster has one (and fused attention from its own curve):
//   matmul:  max(FLOPs / (peak x gemm), bytes / (bandwidth x memory)) + overhead   (a roofline)
//   stream:  bytes / (bandwidth x memory) + overhead
// Small or thin matmuls (attention's per-head products, thin tensor-parallel shards) fall on the
// bandwidth side of the roofline or are dominated by the per-kernel overhead; large ones run at
// the achievable fraction of peak.
#include "plan/cluster.h"
#include "plan/collectives.h"
#include "plan/model_costs.h"

namespace tessera::plan {

// The fraction of peak a product of g's size achieves: efficiency.gemm, or the cluster's measured
// curve read at the FLOPs of one of its calls.
double gemm_efficiency(const ClusterSpec& c, const Gemm& g);
double gemm_seconds(const ClusterSpec& c, Precision p, const Gemm& g);
// The input-gradient and weight-gradient products of g: dA = dC B^T and dB = A^T dC.
double gemm_backward_seconds(const ClusterSpec& c, Precision p, const Gemm& g);
double stream_seconds(const ClusterSpec& c, double bytes);
// A stream of a kind the cluster may have measured (KernelCosts): the longer of its bytes over the
// bandwidth and its values times the kind's cost, plus the overhead. `backward`: the kernel's
// backward, which moves kBackwardStreamTraffic x the bytes.
double stream_seconds(const ClusterSpec& c, const Stream& s, bool backward);
// A fused kernel bound by its FLOPs (flash attention).
double fused_seconds(const ClusterSpec& c, Precision p, double flops);
// The backward of a fused attention whose forward does `forward_flops`.
double fused_backward_seconds(const ClusterSpec& c, Precision p, double forward_flops);

// The backward of an elementwise or normalization kernel reads the incoming gradient and the
// saved input(s) and writes the outgoing gradient: about twice the bytes of its forward.
inline constexpr double kBackwardStreamTraffic = 2.0;
// A fused attention backward does 2.5 x the forward's FLOPs (dQ, dK, dV, dP and the recomputed QK^T).
inline constexpr double kFlashBackwardFlops = 2.5;

// Seconds of one layer on one rank for one microbatch, split into compute (matmuls and streams)
// and the tensor-parallel collectives that sit between them (not overlapped, as in Megatron).
struct LayerTime {
  double forward = 0;
  double backward = 0;
  // Extra forward work during backward: full reruns the layer, selective its attention core. For
  // every_k and optimal the schedule decides which layers rerun, so this is 0 and the stage adds
  // recomputed_layer_forwards (recompute_model.h) x forward.
  double recompute = 0;
  // What a layer kept selectively reruns in its backward: its norms' and activation's forward
  // passes (selective recomputation's rebuild; a chain schedule's Keep::Selective).
  double rebuild = 0;
  double forward_tp = 0;
  double backward_tp = 0;
  double recompute_tp = 0;
};
LayerTime layer_time(const config::ModelConfig& m, const Layout& l, const ClusterSpec& c, const Placement& place);

}  // namespace tessera::plan
