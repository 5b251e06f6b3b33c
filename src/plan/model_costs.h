#pragma once
// What one transformer layer costs, derived from its operations: the matrix multiplies (FLOPs and
// shapes), the bandwidth-bound kernels between them (bytes moved), and the parameters each rank
// holds. Letters: b microbatch, s = T sequence, h = C hidden, a = H heads, F FFN size, V vocab,
// l = L layers, t tensor-parallel size, e bytes per activation element.
#include <cstdint>
#include <string>
#include <vector>

#include "config/model_config.h"
#include "plan/layout.h"

namespace tessera::plan {

// C[m, n] = A[m, k] . B[k, n], `batch` times. FLOPs = 2 m n k batch (one multiply and one add).
struct Gemm {
  std::string name;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) * static_cast<double>(batch); }
};

// A bandwidth-bound kernel (norm, softmax, dropout, activation, residual add): bytes it moves.
// Which of this engine's kernels a stream is, for clusters that measured them (KernelCosts).
enum class StreamKind { Other, Norm, Activation, Residual };
struct Stream {
  std::string name;
  double bytes = 0;
  StreamKind kind = StreamKind::Other;
  double elements = 0;  // values the kernel computes (a kind's cost is per value)
};

// The forward operations of one layer on one tensor-parallel rank for a microbatch of `b`
// sequences. With sp, the replicated regions (norms, dropouts, residuals) hold s/t tokens.
struct LayerOps {
  std::vector<Gemm> gemms;             // dense projections (weights are [k, n])
  std::vector<Gemm> attention_gemms;   // QK^T and AV, batched over b x a/t heads (not with flash)
  std::vector<Stream> streams;         // bandwidth-bound kernels outside the attention core
  std::vector<Stream> attention_streams;  // softmax and dropout on the s x s scores (not with flash)
  double flash_flops = 0;              // fused attention forward FLOPs (flash only)
  int64_t kernels = 0;                 // kernel launches in the forward
};
LayerOps layer_forward_ops(const config::ModelConfig& m, int64_t b, int tp, bool sp, Precision precision, bool flash);

// Forward FLOPs of one layer for b sequences (all ranks together):
//   GPT-2 (F = 4h): 24 b s h^2 + 4 b s^2 h   [qkv 6bsh^2, QK^T 2bs^2h, AV 2bs^2h, proj 2bsh^2, MLP 4bshF]
double layer_forward_flops(const config::ModelConfig& m, int64_t b);
// Forward FLOPs of the output projection (logits) for b sequences: 2 b s h V.
double head_forward_flops(const config::ModelConfig& m, int64_t b);

// FLOPs of one optimizer step over the whole model and global batch B (matrix multiplies only;
// norms and softmax are bandwidth-bound and counted as time, not FLOPs, as the papers do).
struct StepFlops {
  double forward = 0;    // B (l layer + head)
  double backward = 0;   // 2 x forward: each matmul has an input-gradient and a weight-gradient matmul
  double recompute = 0;  // full: l layers' forward again; selective: the attention core; flash: QK^T in backward;
                         // every_k, optimal: the layer forwards their schedule reruns
  double model() const { return forward + backward; }              // what MFU counts
  double hardware() const { return forward + backward + recompute; }  // what the device executes
};
// Selective is Megatron's here (Korthikanti et al.): the attention core rerun, unless `flash`.
// none, selective and full: their recompute is fixed by the policy. every_k and optimal need the
// schedule's count and are refused here; use the overload below.
StepFlops step_flops(const config::ModelConfig& m, int64_t global_batch, config::RecomputePolicy recompute, bool flash);
// Any policy, with `recomputed_layers` layer forwards rerun per sequence over the whole model
// (model_recomputed_layer_forwards in recompute_model.h; L for full, 0 for none and selective).
StepFlops step_flops(const config::ModelConfig& m, int64_t global_batch, config::RecomputePolicy recompute, bool flash,
                     double recomputed_layers);

// Narayanan et al. 2021, eq. (2) and (3), for GPT with F = 4h (the final LayerNorm is left out):
//   P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h))
//   F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))      [FLOPs per iteration with full recompute]
double narayanan_parameter_count(const config::ModelConfig& m);
double narayanan_flops_per_iteration(const config::ModelConfig& m, int64_t global_batch);
// Korthikanti et al. 2022: model FLOPs (no recompute) 72 B l s h^2 (1 + s/(6h) + V/(12 h l)).
double korthikanti_model_flops(const config::ModelConfig& m, int64_t global_batch);

// Parameters held by one tensor-parallel rank of one pipeline stage.
struct StageParams {
  double layers = 0;     // transformer layers of the stage
  double embedding = 0;  // token (+ position) table: first stage; tied copy or untied head: last stage
  double other = 0;      // final norm (last stage)
  double total() const { return layers + embedding + other; }
};
// Parameters of one layer on one of t tensor-parallel ranks (weights split, some biases and the
// norms replicated, as Megatron does).
double layer_params_per_rank(const config::ModelConfig& m, int tp);
// `stage` in [0, pp). The tied output layer of the last stage is a copy of the first stage's table
// when pp > 1 (kept in sync by an all-reduce of its gradient).
StageParams stage_params(const config::ModelConfig& m, const Layout& l, int stage);

// Adafactor's state of a rank of `stage` (optim/adafactor.h), in floats, without its first moment:
// every matrix's R and C over the matrix's global rows and columns (each expert of a stack its own
// matrix; every holder keeps them whole), and a second moment per element this rank holds of the
// unfactored tensors (norm gains, biases, an MoE layer's stacked biases). Exact without ZeRO; under
// ZeRO the unfactored elements are this rank's shard of them and every matrix is counted, as a rank
// keeps R and C of each matrix its shard touches.
double adafactor_state_floats(const config::ModelConfig& m, const Layout& l, int stage);

// Bytes per element of activations, parameters and gradients in a precision.
int element_bytes(Precision p);

}  // namespace tessera::plan
