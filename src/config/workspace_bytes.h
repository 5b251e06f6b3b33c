#pragma once
// The workspace bytes this engine's model holds, unit by unit, from the shapes alone: what the
// allocator books under the 'workspace' tag while a unit's training forward or backward runs.
// Beside config/activation_bytes.h, and pure for the same reason: the planner (which has no
// runtime) predicts the measured peak of the tag from it (plan/engine_memory.h).
//
// Units are the model's own (nn::GPT::units): the embedding, the n_layer blocks, then the head.
#include <cstdint>
#include <vector>

#include "config/model_config.h"
#include "core/dtype.h"

namespace tessera::config {

struct UnitWorkspaceBytes {
  // The most a training forward holds while it runs (sequence parallelism's packed buffers).
  int64_t forward = 0;
  // The most its backward holds while it runs, the incoming gradient of its output included (the
  // head has none: its gradient starts from the logits, which are activations).
  int64_t backward = 0;
  // The gradient of its input it hands down: held until the unit below has run its backward (0 for
  // the embedding).
  int64_t input_gradient = 0;
  // The most its backward holds before it lets go of any activation it kept: a block's first
  // gradient step (dy, its dropped-out copy, the MLP projection's input gradient); its workspace
  // peak comes later, beside fewer activations. What the memory peak of every tag at once reads.
  int64_t backward_beside_activations = 0;
};

// For a microbatch [B, T] on a rank of `tp` tensor-parallel ranks, with sequence parallelism when
// `sp`, gradients in `compute` (f32, or bf16/f16 under mixed precision), the experts of MoE blocks
// split over `ep` ranks. One entry per unit; the derivation, tensor by tensor, is written out in
// workspace_bytes.cpp.
std::vector<UnitWorkspaceBytes> unit_workspace_bytes(const ModelConfig& model, int64_t B, int64_t T, int tp = 1,
                                                     bool sp = false, DType compute = DType::F32, int ep = 1);

}  // namespace tessera::config
