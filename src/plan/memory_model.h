#pragma once
// Memory of one rank by category. The categories carry the same tags the runtime allocator uses,
// so a prediction can be held against a measurement tag by tag.
#include <array>
#include <cstdint>
#include <string_view>

#include "config/model_config.h"
#include "plan/layout.h"
#include "plan/pipeline_model.h"

namespace tessera::plan {

inline constexpr std::array<std::string_view, 6> kMemoryTags = {"params", "grads", "optimizer", "activations", "comm", "workspace"};
// The runtime's tags, in its allocator's order (core/allocator.h): the six above, then PipeDream-2BW's
// stash of the previous weights and mixed precision's 16-bit working copies, which only the engine
// accounting (Layout::states) counts.
inline constexpr std::array<std::string_view, 8> kEngineMemoryTags = {
    "params", "grads", "optimizer", "activations", "comm", "workspace", "weight_stash", "working_copies"};

struct MemoryBreakdown {
  double params = 0;       // model weights in the training precision
  double grads = 0;        // weight gradients
  double optimizer = 0;    // fp32 master weights (mixed precision) and Adam moments
  double activations = 0;  // tensors kept from forward for backward, over all microbatches in flight
  double comm = 0;         // communication buffers: tp gathers, pipeline send/recv, dp buckets, ZeRO-3 gathers
  double workspace = 0;    // transients: matmul library workspace, score and logit buffers
  double weight_stash = 0;    // PipeDream-2BW's previous weights (engine accounting; 0 otherwise)
  double working_copies = 0;  // 16-bit copies of the f32 weights for the matmuls (engine accounting)
  double total() const { return params + grads + optimizer + activations + comm + workspace + weight_stash + working_copies; }
  double by_tag(std::string_view tag) const;
};

// Model-state bytes of one rank holding `params` parameters (ZeRO, Rajbhandari et al. 2020):
//   bf16 with fp32 master weights and Adam: 2 (params) + 2 (grads) + K = 12 (master, m, v) bytes each;
//   fp32 Adam: 4 + 4 + 8.  Stage 1 shards the optimizer state over dp, stage 2 also the gradients,
//   stage 3 also the parameters: stage 1 = 4 Psi + K Psi/N_d, stage 2 = 2 Psi + (2 + K) Psi/N_d,
//   stage 3 = (4 + K) Psi/N_d (bf16).
// Another optimizer replaces Adam's 8 bytes of moments in K by its own state per parameter
// (optim::state_bytes_per_parameter of the named optimizer with its default settings).
MemoryBreakdown model_state_bytes(double params, Precision precision, int zero, int dp,
                                  optim::OptimizerKind optimizer = optim::OptimizerKind::AdamW);

// Activation bytes one layer keeps for backward, for a microbatch of b sequences on one of t
// tensor-parallel ranks, derived tensor by tensor. With e = 2, dropout on and F = 4h these are
// Korthikanti et al. 2022, Table 2 (per layer):
//   TP:                 s b h (10 + 24/t + 5 a s/(h t))
//   TP + SP:            s b h (34/t + 5 a s/(h t))
//   TP + selective:     s b h (10 + 24/t)
//   TP + SP + selective: 34 s b h / t
//   full recompute:     2 s b h (the layer input; / t with SP)
// This is Megatron's accounting (ActivationAccounting::Megatron), so its selective drops the
// attention core's tensors; this engine's own bytes are config::unit_activation_bytes.
double layer_activation_bytes(const config::ModelConfig& m, int64_t b, int tp, bool sp, config::RecomputePolicy recompute, bool flash,
                              Precision precision);

// The activations tag of one rank of pipeline stage `stage` in the layout's activation accounting:
// the chunk-microbatches in flight at its peak, the one in backward at its full set, and the
// embedding's and head's tensors of that stage.
double stage_activation_bytes(const config::ModelConfig& m, const Layout& l, int stage, const PipelineModel& pipeline);

// Memory of one rank of pipeline stage `stage`: with states=engine, this engine's allocations
// (plan/engine_memory.h); otherwise its parameters' model states, the activations of
// the chunk-microbatches it holds at its peak (from the pipeline model), the working set of one
// layer being recomputed, communication buffers and workspace. every_k and optimal take the
// activations of their schedule over the chunk's chain, (in flight - 1) R + P (recompute_model.h);
// none, selective and full the closed forms above, which that chain reproduces exactly.
MemoryBreakdown stage_memory(const config::ModelConfig& m, const Layout& l, int stage, const PipelineModel& pipeline);

struct RankMemory {
  MemoryBreakdown memory;  // of the worst stage
  int stage = 0;           // which stage that is
};
// The stage with the largest total (first or last: the others hold less of both activations and
// embedding tables).
RankMemory peak_rank_memory(const config::ModelConfig& m, const Layout& l, const PipelineModel& pipeline);

}  // namespace tessera::plan
