#pragma once
// The activation bytes this engine's model keeps, unit by unit, from the shapes alone: the one
// formula the runtime's predictions (exec/recompute.h, exec/program_memory.h), the trainer's start
// line and the planner (plan/memory_model.h, activations=engine) all read, and that tests hold the
// allocator's measured peak to. Pure: it lives with the config so that the planner, which has no
// runtime, can use it.
//
// Units are the model's own (nn::GPT::units): the embedding, the n_layer blocks, then the head.
#include <cstdint>
#include <vector>

#include "config/model_config.h"
#include "core/dtype.h"

namespace tessera::config {

struct UnitActivationBytes {
  int64_t own = 0;           // kept by a training forward besides the unit's input and output
  int64_t output = 0;        // the output [B, Ts, C] (0 for the head)
  int64_t recomputable = 0;  // of `own`, what selective recomputation drops and the backward rebuilds
  int64_t selective_forward = 0;  // of that, what a selective forward holds while it runs
  // Kept from the input half of a split backward to the weight half: what the weight gradients
  // read (the inputs of the unit's linear layers; the head's also the logits' gradient).
  int64_t weight_half = 0;
  // Kept beside it, in workspace: the output gradients the weight gradients read (each linear
  // layer's; the head's logits' gradient is counted in weight_half).
  int64_t weight_half_gradients = 0;
  int64_t forward_transient = 0;  // held by any forward while it runs, at its peak, besides the above
  int64_t rebuild_peak = 0;       // the most a selective backward holds while it rebuilds `recomputable`
  // Of `own`, what every activation encoding leaves as it is (exec/activation_encoding.h): the
  // statistics, the router's probabilities and gates, and integer ids.
  int64_t exact = 0;
  // Of `own`, what the backward reads only for its sign (a ReLU's input): one bit an element encoded.
  // Not under selective recomputation, whose backward rebuilds the activation from it.
  int64_t sign_only = 0;
};

// For a microbatch [B, T] on a rank of `tp` tensor-parallel ranks (the model built with its plan),
// with sequence parallelism when `sp`, activations in `activations` (f32, or bf16/f16 under mixed
// precision: 2 bytes; the norms' statistics, the log-sum-exp, the losses and the token ids stay 4
// bytes). One entry per unit; the derivation is written out in activation_bytes.cpp.
std::vector<UnitActivationBytes> unit_activation_bytes(const ModelConfig& model, int64_t B, int64_t T, int tp = 1,
                                                       bool sp = false, DType activations = DType::F32);

// Bytes a training forward keeps alive for backward: the sum over units of own + output.
int64_t saved_activation_bytes(const ModelConfig& model, int64_t B, int64_t T, int tp = 1, bool sp = false,
                               DType activations = DType::F32);

// What a block's selective recomputation drops: the tensors that are large and cost one
// elementwise pass to rebuild, the two norm outputs and the MLP activation, 2C + F/tp values per
// token (the tiled attention keeps no T×T scores, so these are the big cheap part here).
int64_t recomputable_values_per_token(const ModelConfig& model, int tp = 1);
// The FLOP model's price of rebuilding what selective recomputation dropped from block `layer` (the
// values above, C for an MoE block), for a microbatch [B, T]: kRebuildFlopsPerValue a value. The
// rebuild is elementwise and bound by memory, so a value costs far more than its few arithmetic
// operations next to a matrix product's; 80 fits the measured cost of selective recomputation on
// GPT-2 124M (docs/benchmarks.md: +0.6 % a step, B 4, T 256: 83 FLOP-model units a rebuilt value).
inline constexpr double kRebuildFlopsPerValue = 80;
double rebuild_flops(const ModelConfig& model, int layer, int64_t B, int64_t T, int tp = 1);
// Of those, what a selective forward still holds while it runs: the MLP activation, F/tp per token,
// until the down projection has read it.
int64_t selective_forward_values_per_token(const ModelConfig& model, int tp = 1);

}  // namespace tessera::config
